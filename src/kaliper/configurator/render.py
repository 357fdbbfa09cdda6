"""Evaluate jsonnet job templates with the trial as top-level arguments.

Imports are confined: a template may import files from its own directory (and below) and from
Kaliper's template library, nothing else, so a spec cannot read arbitrary files through a template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import _jsonnet

from kaliper.errors import TemplateError

LIBRARY_DIR = Path(__file__).resolve().parent / "templates"
BUILTIN_TEMPLATES = {
    "PyTorchJob": LIBRARY_DIR / "pytorchjob.libsonnet",
    "TFJob": LIBRARY_DIR / "tfjob.libsonnet",
}
MAX_TEMPLATE_BYTES = 1 << 20


class _ConfinedImporter:
    """jsonnet import callback that only serves files inside the allowed roots."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [root.resolve() for root in roots]

    def _allowed(self, path: Path) -> bool:
        return any(path.is_relative_to(root) for root in self.roots)

    def __call__(self, base: str, rel: str) -> tuple[str, bytes]:
        if Path(rel).is_absolute():
            raise RuntimeError(
                f"import {rel!r}: absolute paths are not allowed; imports are confined to {self._describe()}"
            )
        candidates = [(Path(base) / rel).resolve(), (LIBRARY_DIR / rel).resolve()]
        outside = None
        for path in candidates:
            if not path.is_file():
                continue
            if not self._allowed(path):
                outside = path
                continue
            data = path.read_bytes()
            if len(data) > MAX_TEMPLATE_BYTES:
                raise RuntimeError(f"import {rel!r}: {path} is larger than {MAX_TEMPLATE_BYTES} bytes")
            return str(path), data
        if outside is not None:
            raise RuntimeError(
                f"import {rel!r} resolves to {outside}, outside {self._describe()}; jsonnet imports are confined"
            )
        raise RuntimeError(f"import {rel!r}: no such file in {base} or the Kaliper template library")

    def _describe(self) -> str:
        return " and ".join(str(r) for r in self.roots)


def render_template(template: Path, arguments: dict[str, Any]) -> Any:
    """The JSON value the template function returns for `arguments` (passed as jsonnet TLA code)."""
    template = template.resolve()
    if not template.is_file():
        raise TemplateError(f"{template}: no such template file")
    importer = _ConfinedImporter([template.parent, LIBRARY_DIR])
    try:
        output = _jsonnet.evaluate_file(
            str(template),
            tla_codes={name: json.dumps(value) for name, value in arguments.items()},
            import_callback=importer,
            max_stack=200,
        )
    except RuntimeError as exc:
        raise TemplateError(f"{template}: jsonnet evaluation failed:\n{str(exc).strip()}") from None
    return json.loads(output)
