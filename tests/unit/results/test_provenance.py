"""Stack provenance: package origins and environment without credentials, image digests, BLAS libraries,
stack ids."""

from __future__ import annotations

import pytest

from kaliper.results.provenance import (
    capture_stack,
    clean_url,
    index_origin,
    installed_packages,
    relevant_env,
)

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


def test_index_origin_drops_user_info_and_secret_query_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:pw-SECRET1@pypi.example/simple?private_token=SECRET2")
    assert index_origin() == "https://pypi.example/simple?private_token=***"
    packages = installed_packages()
    assert {p.origin for p in packages if p.direct_url is None and p.installer} == {index_origin()}
    assert not [p.name for p in packages if "SECRET" in p.model_dump_json()]


def test_clean_url_never_raises_and_redacts_every_shape() -> None:
    assert clean_url("https://u:p@host:notaport/x") == "https://host:notaport/x"  # urlsplit would raise
    assert (
        clean_url("git+https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r")
        == "git+https://github.com/o/r"
    )
    assert clean_url("https://h/x?X-Amz-Signature=abc&v=1") == "https://h/x?X-Amz-Signature=***&v=1"
    assert clean_url("file:///work/main") == "file:///work/main"


def test_environment_capture_drops_secret_names_and_redacts_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_VAR_db_password", "SECRET3-value")
    monkeypatch.setenv("TF_VAR_region", "SECRET3b-value")  # every TF_VAR_ is Terraform input: dropped
    monkeypatch.setenv("NCCL_IB_AUTH", "SECRET4-value")
    monkeypatch.setenv("TORCH_HOME", "https://u:SECRET5@models.example/torch")
    monkeypatch.setenv("CUDA_CACHE_PATH", "/cache?access_token=SECRET6")
    monkeypatch.setenv("HF_TOKEN", "hf_SECRET7-value")
    monkeypatch.setenv("OMP_DISPLAY_ENV", "note hf_SECRET7-value")  # another variable's secret value
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    env = relevant_env()
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["TORCH_HOME"] == "https://***@models.example/torch"
    assert env["CUDA_CACHE_PATH"] == "/cache?access_token=***"
    assert env["OMP_DISPLAY_ENV"] == "note ***"
    assert not {"TF_VAR_db_password", "TF_VAR_region", "NCCL_IB_AUTH", "HF_TOKEN"} & set(env)
    assert "SECRET" not in capture_stack(None).model_dump_json()
