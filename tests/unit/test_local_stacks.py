"""A local run measures the current environment, so it refuses to 'compare' stacks it cannot build."""

from __future__ import annotations

from pathlib import Path

from conftest import CliRunner

SPEC = """\
name: stacks
workload: {name: pi-matmul, params: {matrix_size: 16}}
repetitions: 1
sampling: {warmup: 0, min_samples: 6, max_samples: 6, max_time: 1s}
stacks:
  - {name: old, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.0.9"}
  - {name: new, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"}
"""


def test_run_refuses_distinct_stacks_and_writes_nothing(tmp_path: Path, kaliper: CliRunner) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    store = tmp_path / "store"
    proc = kaliper("run", "spec.yaml", "--storage", f"file://{store}")
    assert proc.returncode == 2, proc.stderr
    assert "spec.yaml: stacks: 2 stacks with different images" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists()


def test_validate_accepts_stacks_for_a_cluster(tmp_path: Path, kaliper: CliRunner) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    proc = kaliper("validate", "spec.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "2 trial(s)" in proc.stdout
