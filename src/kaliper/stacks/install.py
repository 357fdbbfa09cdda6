"""Kaliper inside a stack's environment: the running installation's package copied in, with a minimal
dist-info, instead of `pip install kaliper`: the environment runs exactly the Kaliper that prepared it
(a development checkout included), without a wheel build or an index that serves Kaliper."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import re
import shutil
import tomllib
from pathlib import Path
from urllib.parse import unquote, urlparse

import kaliper
from kaliper.stacks.key import files_digest

INSTALLER = "kaliper-stacks"
_EXTRA = re.compile(r"\bextra\s*==")


def package_dir() -> Path:
    """The directory of the running `kaliper` package."""
    return Path(kaliper.__file__).resolve().parent


def _skipped(relative: Path) -> bool:
    return "__pycache__" in relative.parts or relative.suffix == ".pyc"


def package_files(root: Path) -> list[Path]:
    """Every file of the package under `root`, relative, sorted; bytecode left out."""
    return sorted(
        p.relative_to(root) for p in root.rglob("*") if p.is_file() and not _skipped(p.relative_to(root))
    )


def package_digest(root: Path) -> str:
    """Digest of the package's files (paths and bytes): a development change gives a new key."""
    return files_digest((p.as_posix(), (root / p).read_bytes()) for p in package_files(root))


def _editable_pyproject() -> Path | None:
    """pyproject.toml of an editable install (a development checkout), whose metadata can be stale."""
    try:
        text = importlib.metadata.distribution("kaliper").read_text("direct_url.json")
        data = json.loads(text or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None
    if not isinstance(data, dict) or not (data.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(data.get("url", "")))
    path = Path(unquote(url.path)) / "pyproject.toml"
    return path if url.scheme == "file" and path.is_file() else None


def base_requirements() -> list[str]:
    """Kaliper's own requirements without extras: what every stack's environment holds besides its own.

    From a development checkout's pyproject.toml when Kaliper is installed editable (its installed
    metadata is only as fresh as the last `pip install -e`), else from the installed metadata."""
    pyproject = _editable_pyproject()
    if pyproject is not None:
        try:
            project = tomllib.loads(pyproject.read_text()).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            project = {}
        deps = project.get("dependencies")
        if project.get("name") == "kaliper" and isinstance(deps, list):
            return [str(d) for d in deps]
    try:
        requires = importlib.metadata.requires("kaliper") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return [r for r in requires if not _EXTRA.search(r.partition(";")[2])]


def _record_line(relative: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{relative},sha256={digest},{len(data)}"


def install_kaliper(site_packages: Path, source: Path, version: str, requirements: list[str]) -> str:
    """Copy the package at `source` into `site_packages` and write `kaliper-<version>.dist-info` so that
    importlib.metadata sees it; returns the digest of what was copied."""
    target = site_packages / "kaliper"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    copied = package_files(target)
    dist = site_packages / f"kaliper-{version}.dist-info"
    dist.mkdir()
    metadata = ["Metadata-Version: 2.1", "Name: kaliper", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requirements]
    files = {
        "METADATA": "\n".join(metadata) + "\n",
        "INSTALLER": INSTALLER + "\n",
        "entry_points.txt": "[console_scripts]\nkaliper = kaliper.cli:main\n",
        "direct_url.json": json.dumps({"url": source.parent.as_uri(), "dir_info": {}}) + "\n",
    }
    for name, text in files.items():
        (dist / name).write_text(text)
    record = [_record_line(f"kaliper/{p.as_posix()}", (target / p).read_bytes()) for p in copied]
    record += [_record_line(f"{dist.name}/{n}", (dist / n).read_bytes()) for n in sorted(files)]
    record.append(f"{dist.name}/RECORD,,")
    (dist / "RECORD").write_text("\n".join(record) + "\n")
    return package_digest(target)
