"""Stack provenance: package origins without credentials, image digests, BLAS libraries, stack ids."""

from __future__ import annotations

import pytest

from kaliper.results.provenance import capture_stack, installed_packages

DIGEST = "sha256:" + "ab" * 32


def test_origin_comes_from_the_index_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://builder:s3cr3t-token@pypi.example.org:8443/simple")
    packages = {p.name: p for p in installed_packages()}
    # pydantic came from an index (no direct URL): its origin is the index, minus user:token.
    assert packages["pydantic"].origin == "https://pypi.example.org:8443/simple"
    assert all("s3cr3t" not in p.origin for p in packages.values())
    # Kaliper itself is an editable install: its origin is the PEP 610 direct URL.
    assert packages["kaliper"].origin.startswith("file://")


def test_origin_is_unknown_when_nothing_tells_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert {p.name: p for p in installed_packages()}["pydantic"].origin == "unknown"


def test_image_digest_blas_and_stack_id() -> None:
    import numpy as np

    np.ones(2) @ np.ones(2)  # BLAS loaded
    pinned = capture_stack(f"registry.example/kaliper-pytorch@{DIGEST}")
    tagged = capture_stack("registry.example/kaliper-pytorch:0.1.0")
    assert pinned.image_digest == DIGEST
    assert tagged.image_digest is None
    assert any(lib.get("user_api") == "blas" and lib.get("num_threads", 0) >= 1 for lib in pinned.blas)
    assert pinned.id != tagged.id  # the image is part of the stack's identity
    assert capture_stack(tagged.image).id == tagged.id  # and the id is stable
