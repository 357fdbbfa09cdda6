"""A local run builds environments, not images: stacks that differ only in their image are refused."""

from __future__ import annotations

from pathlib import Path

from kaliper.configurator import configure
from kaliper.jobs.manifest import replica_specs
from kaliper.spec import load_spec
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES

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
    assert "spec.yaml: stacks: old, new differ only in their image" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists()


def test_validate_accepts_stacks_for_a_cluster(tmp_path: Path, kaliper: CliRunner) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    proc = kaliper("validate", "spec.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "2 trial(s)" in proc.stdout


LOCAL_ONLY = """\
name: stacks
workload: {name: pi-matmul, framework: numpy, params: {matrix_size: 16}}
stacks:
  - {name: old, requirements: ["numpy==1.26.4"]}
  - {name: tuned, env: {OMP_PROC_BIND: "true"}}
"""


def test_compile_refuses_a_stack_without_an_image_and_says_how_to_build_one(
    tmp_path: Path, kaliper: CliRunner
) -> None:
    (tmp_path / "spec.yaml").write_text(LOCAL_ONLY)
    for target in ("workflowtemplate", "kfp"):
        proc = kaliper("compile", "spec.yaml", "--target", target)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(
            "error: spec.yaml: stacks[0] (old): requirements or python without an image"
        )
        assert (
            "FROM ghcr.io/kaliper-dev/kaliper:" in proc.stderr
            and "RUN pip install 'numpy==1.26.4'" in proc.stderr
        )
        assert proc.stdout == ""


def test_compile_takes_env_only_stacks_and_stacks_with_images(tmp_path: Path, kaliper: CliRunner) -> None:
    text = LOCAL_ONLY.replace(
        '{name: old, requirements: ["numpy==1.26.4"]}',
        '{name: old, requirements: ["numpy==1.26.4"], image: "ghcr.io/kaliper-dev/kaliper-numpy:0.1.0"}',
    )
    (tmp_path / "spec.yaml").write_text(text)
    proc = kaliper("compile", "spec.yaml", "--target", "workflowtemplate")
    assert proc.returncode == 0, proc.stderr
    assert "kind: WorkflowTemplate" in proc.stdout


def test_a_stacks_env_is_in_its_job_manifest_on_every_front_end(tmp_path: Path) -> None:
    """The configurator puts a stack's env into the replicas' container env (run.env): the local executor
    and a cluster's pods get the same variables, and KALIPER_STACK_ENV names them for provenance."""
    plan = configure(load_spec(EXAMPLES / "stacks-onednn.yaml"), storage_url=f"file://{tmp_path}")
    seen = {}
    for trial in plan.trials:
        for spec in replica_specs(trial.manifest).values():
            [container] = spec["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in container["env"]}
            seen[trial.doc.stack.name] = (env["TF_ENABLE_ONEDNN_OPTS"], env["KALIPER_STACK_ENV"])
        assert trial.doc.stack.env == {"TF_ENABLE_ONEDNN_OPTS": seen[trial.doc.stack.name][0]}
    assert seen == {"onednn-on": ("1", "TF_ENABLE_ONEDNN_OPTS"), "onednn-off": ("0", "TF_ENABLE_ONEDNN_OPTS")}
