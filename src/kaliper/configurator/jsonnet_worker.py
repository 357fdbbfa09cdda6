"""The child process that evaluates jsonnet templates under a memory and a time limit.

Why a process: the `_jsonnet` C extension neither checks Python signals nor takes a timeout, so an
exponential template (`f(n-1) + f(n-1)`, string doubling, `std.range(1, 2e8)`) would run and grow
unbounded inside the caller. Here the address space is capped once (`RLIMIT_AS`) and every evaluation is
armed with `ITIMER_REAL`, whose SIGALRM keeps its default action: the process dies, and the parent
(kaliper.configurator.render) reports which limit was hit.

Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.
  request: {"template": path, "roots": [dir, ...], "library": dir, "native": bool,
            "values": [argument value, ...], "calls": [{name: index into values}, ...]}
  answer:  {"ok": [the value of each evaluation], "seconds": evaluation time} or {"error": message}
Every item of `calls` is one call of the template function (with those named arguments); a batch is one
jsonnet evaluation, so jsonnet's standard library is parsed once per batch, not once per trial, and an
argument value the trials share (job, workload, sampling) is sent and parsed once per batch.

`native` gives templates the native function `kaliper.arg` (see `number_arg`): kaliper.libsonnet's `arg`
uses it for numbers, else its pure-jsonnet `pureArg` (std.format is slow: ~7 ms a trial).

Run as a script (`python .../jsonnet_worker.py MEMORY_BYTES TIMEOUT_S`), so it does not import the
kaliper package and starts in milliseconds. Imports only the standard library and `_jsonnet`.
"""

from __future__ import annotations

import json
import math
import resource
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_STACK = 200
MAX_IMPORT_BYTES = 1 << 20
_BATCH_FILE = "<kaliper-batch>"


class ConfinedImporter:
    """jsonnet import callback that only serves files inside the allowed roots (symlinks resolved)."""

    def __init__(self, roots: list[Path], library: Path) -> None:
        self.roots = [root.resolve() for root in roots]
        self.library = library.resolve()

    def _allowed(self, path: Path) -> bool:
        return any(path.is_relative_to(root) for root in self.roots)

    def __call__(self, base: str, rel: str) -> tuple[str, bytes]:
        if Path(rel).is_absolute():
            raise RuntimeError(
                f"absolute paths are not allowed in imports ({rel!r}); imports are confined to {self._describe()}"
            )
        candidates = [(Path(base) / rel).resolve(), (self.library / rel).resolve()]
        outside = None
        for path in candidates:
            if not path.is_file():
                continue
            if not self._allowed(path):
                outside = path
                continue
            data = path.read_bytes()
            if len(data) > MAX_IMPORT_BYTES:
                raise RuntimeError(f"import {rel!r}: {path} is larger than {MAX_IMPORT_BYTES} bytes")
            return str(path), data
        if outside is not None:
            raise RuntimeError(
                f"import {rel!r} resolves to {outside}, outside {self._describe()}; jsonnet imports are confined"
            )
        raise RuntimeError(f"import {rel!r}: no such file in {base} or the Kaliper template library")

    def _describe(self) -> str:
        return " and ".join(str(r) for r in self.roots)


def _unparse(x: float) -> str:
    """std.toString of a number (C++ jsonnet's jsonnet_unparse_number)."""
    return f"{x:.0f}" if x == math.floor(x) else f"{x:.17g}"


def _digits(mag: float) -> str:
    """std.format's render_int of a whole, non-negative number: the same float steps."""
    if mag == 0:
        return "0"
    digits = []
    while mag != 0:
        digits.append(_unparse(math.fmod(mag, 10)))
        mag = math.floor(mag / 10)
    return "".join(reversed(digits))


def _fixed(x: float, prec: int) -> str:
    """std.format's render_float_dec (no flags): rounded by adding 0.5 to x * 10^prec."""
    n = abs(x)
    denominator = math.pow(10, prec)
    numerator = n * denominator + 0.5
    whole = (1 if n > 0 else 0) * math.floor(numerator / denominator)
    frac = math.fmod(math.floor(numerator), denominator)
    text = ("-" if x < 0 else "") + _digits(whole)
    if prec == 0 or not frac > 0:
        return text
    return f"{text}.{_digits(frac).rjust(prec, '0').rstrip('0')}"


def _exponent(x: float) -> int:
    return math.floor(math.log(abs(x)) / math.log(10)) if x != 0 else 0


def format_g15(x: float) -> str:
    """std.format('%.15g', x), step by step as jsonnet's standard library computes it (its exponent
    comes from log(x)/log(10) and may differ from C's printf, so printf's text is not always the same)."""
    exponent = _exponent(x)
    if -4 <= exponent < 15:
        return _fixed(x, 15 - max(1, exponent + 1))
    # std.pow(10, -324) is 0: jsonnet divides by 10^-323 instead
    mantissa = x * 10 / math.pow(10, exponent + 1) if exponent == -324 else x / math.pow(10, exponent)
    sign = "-" if exponent < 0 else "+"
    return f"{_fixed(mantissa, 14)}e{sign}{_digits(abs(exponent)).rjust(2, '0')}"


def number_arg(x: float) -> str:
    """kaliper.libsonnet's `pureArg` of a number, the same text (the native function `kaliper.arg`)."""
    if not isinstance(x, float):
        raise RuntimeError(f"kaliper.arg: expected a number, found {type(x).__name__}")
    if x == math.floor(x) and abs(x) < 1e15:
        return _unparse(x)
    if abs(x) < 1e300:
        short = format_g15(x)
        if float(short) == x:
            return short
    return _unparse(x)


NATIVE_CALLBACKS: dict[str, tuple[tuple[str, ...], Callable[..., Any]]] = {
    "kaliper.arg": (("x",), number_arg),
}


def batch_snippet(template: Path, names: list[str]) -> str:
    """Jsonnet calling the template once per call, as TLAs would (named arguments taken from the pool)."""
    arguments = ", ".join(f"{name}=v[c[{json.dumps(name)}]]" for name in names)
    return (
        f"local template = import {json.dumps(template.name)};\n"
        "local b = std.extVar('kaliper_batch');\n"
        "local v = b.values;\n"
        f"[if std.isFunction(template) then template({arguments}) else template for c in b.calls]\n"
    )


def evaluate(request: dict[str, Any]) -> list[Any]:
    """The value of every evaluation in the request (raises RuntimeError on a jsonnet error)."""
    import _jsonnet

    template = Path(request["template"]).resolve()
    roots = [Path(r) for r in request["roots"]]
    values: list[Any] = request["values"]
    calls: list[dict[str, int]] = request["calls"]
    library = Path(request["library"])
    importer = ConfinedImporter([*roots, library], library)
    native = NATIVE_CALLBACKS if request.get("native", True) else {}
    if len(calls) == 1:  # exactly what `jsonnet --tla-code` does: error traces as users know them
        text = _jsonnet.evaluate_file(
            str(template),
            tla_codes={name: json.dumps(values[index]) for name, index in calls[0].items()},
            import_callback=importer,
            native_callbacks=native,
            max_stack=MAX_STACK,
        )
        return [json.loads(text)]
    text = _jsonnet.evaluate_snippet(
        str(template.parent / _BATCH_FILE),
        batch_snippet(template, list(calls[0])),
        ext_codes={"kaliper_batch": json.dumps({"values": values, "calls": calls})},
        import_callback=importer,
        native_callbacks=native,
        max_stack=MAX_STACK,
    )
    result: list[Any] = json.loads(text)
    return result


def serve(memory_bytes: int, timeout_s: float) -> None:
    """Answer requests until stdin closes; the limits hold for the whole process / each request."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    for line in sys.stdin:
        request = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        began = time.perf_counter()
        try:
            answer: dict[str, Any] = {"ok": evaluate(request), "seconds": time.perf_counter() - began}
        except RuntimeError as exc:
            answer = {"error": str(exc).strip()}
        except MemoryError:
            answer = {"error": "MemoryError", "memory": True}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]))
