"""job.yaml as stored: PyYAML's text, written by libyaml's emitter where that is the same text.

Dumping YAML is most of the cost of writing a big sweep (PyYAML's emitter is pure Python, ~2.5 ms a
manifest); libyaml's is ~4x faster with PyYAML's own representer, and is used only for manifests whose
strings it provably writes alike (`plain_text`; the two are compared by tests/unit/test_configure_scale.py).
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _ManifestDumper(yaml.SafeDumper):
    """PyYAML's own string style, whatever another library registered globally (Hera does, on import):
    job.yaml must be the same bytes in every process, or a retried configure step could not rewrite it."""


_ManifestDumper.add_representer(str, yaml.representer.SafeRepresenter.represent_str)
_FastDumper: type[Any] | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _CManifestDumper(yaml.CSafeDumper):
        """_ManifestDumper's representer with libyaml's emitter: ~4x faster, used only for `plain_text`."""

    _CManifestDumper.add_representer(str, yaml.representer.SafeRepresenter.represent_str)
    _FastDumper = _CManifestDumper
_PLAIN = re.compile(r"[!-~]*\Z")  # printable ASCII, no space: nothing to fold, escape or break


def plain_text(manifest: Any) -> bool:
    """Whether every string (key or value) is printable ASCII without spaces, keys are short and not
    empty, and no container appears twice: where libyaml's emitter writes what PyYAML's does (they
    differ on folding at spaces, line breaks, non-ASCII, long or empty keys; PyYAML writes `? ''` for an
    empty key, libyaml `''`; tests/unit/test_configure_scale.py compares them)."""
    stack, seen = [manifest], set()
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not _PLAIN.match(value):
                return False
        elif isinstance(value, dict | list):
            if id(value) in seen:
                return False
            seen.add(id(value))
            if isinstance(value, list):
                stack.extend(value)
                continue
            for key, item in value.items():
                if not (isinstance(key, str) and 0 < len(key) < 100 and _PLAIN.match(key)):
                    return False
                stack.append(item)
        elif not (value is None or isinstance(value, bool | int | float)):
            return False
    return True


def dump_manifest(manifest: dict[str, Any]) -> str:
    fast = _FastDumper is not None and plain_text(manifest)
    dumper = _FastDumper if fast else _ManifestDumper
    return yaml.dump(manifest, Dumper=dumper, sort_keys=False, default_flow_style=False)
