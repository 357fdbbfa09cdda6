"""What differs between two compared stacks, as their records measured it (not as the spec asked).

A stack comparison is only as meaningful as the stacks really differ: a spec may pin NumPy 2.x for the
candidate while the image still imports 1.26, or set TF_ENABLE_ONEDNN_OPTS where the framework never
reads it. So next to each stack comparison the report says what the records show differs: package
versions, the BLAS/OpenMP libraries loaded (threadpoolctl), the Python interpreter and the stack's
environment variables. Each side is the stack of one record: the first measured run's primary record
of the stack's first measured trial (every record of one process carries the same stack).

Nothing differing is said as loudly as a difference: it usually means the stacks are not what the user
thinks. Long lists are cut (`limit` lines per kind, then "and N more") so a report of two unrelated
images stays readable; summary.json still gets every difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kaliper.results.provenance import normalize_name
from kaliper.results.record import Stack

if TYPE_CHECKING:
    from kaliper.reporter.loading.loaded import ExperimentResult

Kind = Literal["package", "blas", "python", "env"]
KINDS: tuple[Kind, ...] = ("package", "blas", "python", "env")
LIMIT = 20  # lines per kind in report.md and report.html
NOTHING = "the records show no difference in packages, BLAS, Python or env"
# The packages a benchmark is usually about: the provenance table shows them, and a list of what differs
# between two stacks puts them first, so that cutting a long list never hides them.
KEY_PACKAGES = (
    "torch",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "jax",
    "jaxlib",
    "numpy",
    "scipy",
    "intel-extension-for-pytorch",
    "onnxruntime",
    "kaliper",
)
_LIBRARY_KINDS = {"blas": "BLAS", "openmp": "OpenMP"}
_KIND_WORDS = {"package": "packages", "blas": "libraries", "python": "", "env": "variables"}


@dataclass(frozen=True)
class Difference:
    """One thing that differs; `a`/`b` None: absent (a package, a library kind) or unset (a variable)."""

    kind: Kind
    name: str
    a: str | None
    b: str | None

    def document(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class StackDifference:
    """Stack `b` against stack `a`; `missing` names the sides that have no measured record."""

    a: str
    b: str
    differences: tuple[Difference, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def compared(self) -> bool:
        return not self.missing

    def document(self) -> dict[str, Any]:
        return {
            "stack_a": self.a,
            "stack_b": self.b,
            "note": None if self.compared else heading(self),
            "differences": [d.document() for d in self.differences],
        }


def _package_order(key: str) -> tuple[int, str]:
    return (KEY_PACKAGES.index(key) if key in KEY_PACKAGES else len(KEY_PACKAGES), key)


def _packages(a: Stack, b: Stack) -> list[Difference]:
    names: dict[str, str] = {}
    va: dict[str, str] = {}
    vb: dict[str, str] = {}
    for stack, versions in ((a, va), (b, vb)):
        for p in stack.packages:
            key = normalize_name(p.name)
            names.setdefault(key, p.name)
            versions.setdefault(key, p.version)
    return [
        Difference("package", names[k], va.get(k), vb.get(k))
        for k in sorted(names, key=_package_order)
        if va.get(k) != vb.get(k)
    ]


def _libraries(stack: Stack) -> dict[str, str]:
    """user_api ("blas", "openmp") → its loaded libraries as "internal_api version (prefix, kernel)",
    sorted, deduplicated. NumPy and SciPy each bundle an OpenBLAS (`libopenblas` or
    `libscipy_openblas`): the prefix tells whose is whose, and the kernel OpenBLAS chose for this CPU
    (its `architecture`) often differs between builds and explains a difference in speed."""
    found: dict[str, set[str]] = {}
    for lib in stack.blas:
        api = str(lib.get("user_api") or "blas")
        name = " ".join(str(lib[k]) for k in ("internal_api", "version") if lib.get(k) is not None)
        detail = ", ".join(str(lib[k]) for k in ("prefix", "architecture") if lib.get(k))
        found.setdefault(api, set()).add(f"{name or 'unknown'} ({detail})" if detail else name or "unknown")
    return {api: ", ".join(sorted(libs)) for api, libs in found.items()}


def _blas(a: Stack, b: Stack) -> list[Difference]:
    la, lb = _libraries(a), _libraries(b)
    return [
        Difference("blas", api, la.get(api), lb.get(api))
        for api in sorted(la.keys() | lb.keys())
        if la.get(api) != lb.get(api)
    ]


def _python(stack: Stack) -> str:
    return " ".join(stack.python[k] for k in ("implementation", "version") if stack.python.get(k))


def _env(a: Stack, b: Stack) -> list[Difference]:
    return [
        Difference("env", k, a.env.get(k), b.env.get(k))
        for k in sorted(a.env.keys() | b.env.keys())
        if a.env.get(k) != b.env.get(k)
    ]


def stack_difference(a_name: str, a: Stack | None, b_name: str, b: Stack | None) -> StackDifference:
    """What differs from stack `a` to stack `b` (None: that stack has no measured record)."""
    missing = tuple(name for name, stack in ((a_name, a), (b_name, b)) if stack is None)
    if a is None or b is None:
        return StackDifference(a_name, b_name, missing=missing)
    found = _packages(a, b) + _blas(a, b)
    if _python(a) != _python(b):
        found.append(Difference("python", "python", _python(a) or None, _python(b) or None))
    return StackDifference(a_name, b_name, tuple(found + _env(a, b)))


def representative_stack(result: ExperimentResult, name: str) -> Stack | None:
    """The stack of the first measured run's primary record of the first measured trial of stack `name`."""
    for trial in result.trials:
        record = trial.first_record if trial.doc.stack.name == name else None
        if record is not None:
            return record.stack
    return None


def heading(d: StackDifference) -> str:
    """One sentence for the report: what the lines below it are, or why there are none."""
    if d.missing:
        sides = " and ".join(f"stack {m}" for m in d.missing)
        return f"Stack differences: no measured record of {sides}, so the records cannot say what differs"
    if not d.differences:
        return f"Stack differences: {NOTHING}; the stacks may not be what you think they are"
    return f"Stack differences ({d.a} → {d.b}), as the records show them:"


def _line(d: Difference) -> str:
    if d.kind == "package":
        return f"{d.name}: {d.a or 'absent'} → {d.b or 'absent'}"
    if d.kind == "blas":
        return f"{_LIBRARY_KINDS.get(d.name, d.name)}: {d.a or 'none'} → {d.b or 'none'}"
    if d.kind == "python":
        return f"Python: {d.a or 'unknown'} → {d.b or 'unknown'}"
    return f"env {d.name}: {d.a if d.a is not None else 'unset'} → {d.b if d.b is not None else 'unset'}"


def difference_lines(d: StackDifference, limit: int = LIMIT) -> list[str]:
    """Plain text, one line per difference, at most `limit` per kind then "and N more ..."; the
    renderers escape them."""
    out = []
    for kind in KINDS:
        of_kind = [x for x in d.differences if x.kind == kind]
        out += [_line(x) for x in of_kind[:limit]]
        if len(of_kind) > limit:
            out.append(f"and {len(of_kind) - limit} more {_KIND_WORDS[kind]}".rstrip())
    return out
