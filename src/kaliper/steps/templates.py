"""A spec's custom jsonnet template and its imports, carried inside a compiled workflow (the bundle).

On a laptop `workload.template` is a file beside the spec; a cluster step pod has only the spec text (a
workflow parameter) and Kaliper's image. So `kaliper compile` / `submit` bundle the template and every
file it imports from the spec's directory into a second workflow parameter, `templates`: one JSON
object `{relative path: text}`. Each step that reads the spec writes the bundle into a fresh temporary
directory and loads the spec from there, so configuring on the cluster evaluates the same files, under
the same confinement (imports only inside that directory and Kaliper's library), as on the laptop.

Which files: jsonnet imports are string literals (a computed import is a syntax error), so the template is
scanned for `import` / `importstr` / `importbin`, recursively, resolving each path as the template
worker does (beside the importing file first, then Kaliper's library). Files of Kaliper's library
(kaliper.libsonnet, the built-in job templates) are in the image and are not bundled. A static scan finds
imports a lazily evaluated template never reached for one trial (`if ... then import 'a' else import
'b'`), which recording the imports of one evaluation would miss. Compile then configures from the
materialized bundle (`check_bundle`), so a bundle that lacks a file fails at compile time, not in a pod.

Size: the bundle travels as one command-line argument of the step containers, and Linux caps one argv
string at 128 KiB (MAX_ARG_STRLEN), hence MAX_TEMPLATES_ARG_BYTES, the spec's own limit.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Final

from kaliper.configurator.render import LIBRARY_DIR
from kaliper.errors import InputError, SpecError
from kaliper.spec import LoadedSpec

# One argv string (Linux MAX_ARG_STRLEN is 128 KiB); the same budget as the spec text (plan.py).
MAX_TEMPLATES_ARG_BYTES: Final = 100_000
MAX_BUNDLE_FILES: Final = 200
IMPORT_KEYWORDS: Final = ("import", "importstr", "importbin")

Bundle = dict[str, str]

_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|\#[^\n]*|/\*.*?\*/)
      | (?P<block>\|\|\|.*?\n\s*\|\|\|)
      | (?P<string>@"(?:[^"]|"")*"|@'(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.DOTALL | re.VERBOSE,
)


def _literal(token: str) -> str:
    """The value of a jsonnet string literal token (verbatim @"..." or an escaped JSON-like one)."""
    if token.startswith("@"):
        quote = token[1]
        return token[2:-1].replace(quote * 2, quote)
    body = token[1:-1]
    if token[0] == "'":
        body = body.replace('\\"', '"').replace("\\'", "'").replace('"', '\\"')
    loaded: str = json.loads(f'"{body}"')
    return loaded


def imported_paths(text: str) -> list[tuple[str, str]]:
    """(keyword, path) of every import in jsonnet `text`, in order; comments and strings skipped."""
    found: list[tuple[str, str]] = []
    pending: str | None = None
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "comment":
            continue
        if kind == "string" and pending is not None:
            found.append((pending, _literal(match.group())))
        pending = match.group() if kind == "word" and match.group() in IMPORT_KEYWORDS else None
    return found


def _relative(path: Path, root: Path) -> str | None:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else None


def template_bundle(loaded: LoadedSpec) -> Bundle:
    """{path relative to the spec's directory: text} of the spec's template and all it imports; {} for a
    spec without `workload.template`. SpecError for a file outside the spec's directory or not UTF-8."""
    given = loaded.spec.workload.template
    if given is None:
        return {}
    root = loaded.base_dir.resolve()
    library = LIBRARY_DIR.resolve()
    where = f"{loaded.source}: workload.template {given!r}"
    start = (loaded.base_dir / given).resolve()
    if _relative(start, root) is None:
        raise SpecError(f"{where}: {start} is outside the spec's directory {root}")
    bundle: Bundle = {}
    queue: list[tuple[Path, str]] = [(start, "import")]
    while queue:
        path, keyword = queue.pop(0)
        name = _relative(path, root)
        if name is None or name in bundle:
            continue
        if len(bundle) >= MAX_BUNDLE_FILES:
            raise SpecError(f"{where}: imports more than {MAX_BUNDLE_FILES} files")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError(
                f"{where}: {name} is not UTF-8 text; a template bundle carries text only "
                f"({keyword} of binary files cannot travel in a workflow parameter)"
            ) from None
        bundle[name] = text
        if keyword != "import":
            continue  # importstr / importbin: data, not jsonnet
        for kind, rel in imported_paths(text):
            target = _resolve(path.parent, rel, library)
            if target is not None and _relative(target, library) is None:
                queue.append((target, kind))
    return dict(sorted(bundle.items()))


def _resolve(base: Path, rel: str, library: Path) -> Path | None:
    """Where the template worker finds `rel` (kaliper.configurator.jsonnet_worker): beside the importing
    file, then in Kaliper's library; None when neither has it (evaluation reports that)."""
    if Path(rel).is_absolute():
        return None
    for candidate in ((base / rel).resolve(), (library / rel).resolve()):
        if candidate.is_file():
            return candidate
    return None


def bundle_json(bundle: Bundle) -> str:
    return json.dumps(bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_bundle_size(bundle: Bundle, source: str) -> str:
    """The bundle as the `templates` parameter, or SpecError naming the files and their sizes."""
    text = bundle_json(bundle)
    size = len(text.encode())
    if size > MAX_TEMPLATES_ARG_BYTES:
        largest = sorted(bundle.items(), key=lambda item: -len(item[1].encode()))[:5]
        files = ", ".join(f"{name} ({len(body.encode())} bytes)" for name, body in largest)
        raise SpecError(
            f"{source}: workload.template and its imports are {size} bytes as a workflow parameter "
            f"(largest: {files}); a workflow passes them to its steps as one command-line argument, which must "
            f"stay under {MAX_TEMPLATES_ARG_BYTES} bytes (Linux MAX_ARG_STRLEN is 128 KiB): shrink the "
            "templates, or build an image that contains them"
        )
    return text


def parse_bundle(text: str) -> Bundle:
    """The `--templates-json` argument back as a bundle; InputError for anything else."""
    try:
        bundle = json.loads(text)
    except ValueError as exc:
        raise InputError(f"--templates-json: not JSON ({exc})") from None
    if not isinstance(bundle, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in bundle.items()
    ):
        raise InputError("--templates-json: expected a JSON object of relative paths to file texts")
    for name in bundle:
        parts = PurePosixPath(name).parts
        if not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\\" in name:
            raise InputError(f"--templates-json: {name!r} is not a relative path inside the bundle")
    return bundle


@contextmanager
def materialized(bundle: Bundle) -> Iterator[Path]:
    """A fresh temporary directory holding the bundle's files (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="kaliper-templates-") as tmp:
        root = Path(tmp)
        for name, text in bundle.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        yield root
