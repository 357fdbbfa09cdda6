"""The child process that evaluates jsonnet templates under a memory and a time limit.

Why a process: the `_jsonnet` C extension neither checks Python signals nor takes a timeout, so an
exponential template (`f(n-1) + f(n-1)`, string doubling, `std.range(1, 2e8)`) would run and grow
unbounded inside the caller. Here the address space is capped once (`RLIMIT_AS`) and every evaluation is
armed with `ITIMER_REAL`, whose SIGALRM keeps its default action: the process dies, and the parent
(kaliper.configurator.render) reports which limit was hit.

Protocol: one JSON request per line on stdin, one JSON answer per line on stdout.
  request: {"template": path, "roots": [dir, ...], "library": dir, "tlas": [{name: value}, ...]}
  answer:  {"ok": [the value of each evaluation]} or {"error": message}
Every item of `tlas` is one call of the template function (with those named arguments); a batch is one
jsonnet evaluation, so jsonnet's standard library is parsed once per batch, not once per trial.

Run as a script (`python .../jsonnet_worker.py MEMORY_BYTES TIMEOUT_S`), so it does not import the
kaliper package and starts in milliseconds. Imports only the standard library and `_jsonnet`.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
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


def batch_snippet(template: Path) -> str:
    """Jsonnet calling the template once per argument set, as TLAs would (named arguments)."""
    return (
        f"local template = import {json.dumps(template.name)};\n"
        "[\n"
        "  if std.isFunction(template) then template(\n"
        "    run=a.run, job=a.job, workload=a.workload, params=a.params, sampling=a.sampling) else template\n"
        "  for a in std.extVar('kaliper_batch')\n"
        "]\n"
    )


def evaluate(request: dict[str, Any]) -> list[Any]:
    """The value of every evaluation in the request (raises RuntimeError on a jsonnet error)."""
    import _jsonnet

    template = Path(request["template"]).resolve()
    roots = [Path(r) for r in request["roots"]]
    tlas: list[dict[str, Any]] = request["tlas"]
    library = Path(request["library"])
    importer = ConfinedImporter([*roots, library], library)
    if len(tlas) == 1:  # exactly what `jsonnet --tla-code` does: error traces as users know them
        text = _jsonnet.evaluate_file(
            str(template),
            tla_codes={name: json.dumps(value) for name, value in tlas[0].items()},
            import_callback=importer,
            max_stack=MAX_STACK,
        )
        return [json.loads(text)]
    text = _jsonnet.evaluate_snippet(
        str(template.parent / _BATCH_FILE),
        batch_snippet(template),
        ext_codes={"kaliper_batch": json.dumps(tlas)},
        import_callback=importer,
        max_stack=MAX_STACK,
    )
    values: list[Any] = json.loads(text)
    return values


def serve(memory_bytes: int, timeout_s: float) -> None:
    """Answer requests until stdin closes; the limits hold for the whole process / each request."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    for line in sys.stdin:
        request = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            answer: dict[str, Any] = {"ok": evaluate(request)}
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
