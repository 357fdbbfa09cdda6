"""The slurm backend's decisions without a cluster: sbatch's options from a rendered manifest and the
spec's `slurm:` section, the batch script, and each task's training-operator environment derived from
where Slurm placed the tasks (the real configurator renders the manifests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.errors import ExecutionError, SpecError
from kaliper.execution.slurm.backend import batch_script, sbatch_options
from kaliper.execution.slurm.task import replica_env, task_hosts, tasks_per_node
from kaliper.execution.slurm.tasks import job_tasks, task_table
from kaliper.jobs.manifest import for_repetition
from kaliper.spec import spec_from_text
from kaliper.spec.slurm import SlurmSpec
from tests.support.paths import EXAMPLES
from tests.support.synthetic import plan_spec


def manifest_of(name: str, **changes: Any) -> dict[str, Any]:
    document = yaml.safe_load((EXAMPLES / name).read_text())
    document.update(changes)
    plan = plan_spec(document, "file:///tmp/store")
    return for_repetition(plan.trials[0].manifest, 0)


def test_sbatch_options_come_from_job_and_the_slurm_section() -> None:
    manifest = manifest_of("slurm-ddp.yaml")
    slurm = SlurmSpec(partition="gpu", account="proj-1", qos="normal", constraint="a100&ib", exclusive=True,
                      nodes=2, extra=["--mail-type=END", "--requeue"])  # fmt: skip
    options = sbatch_options("slurm-ddp-t000-r0", 2, manifest, slurm, Path("/runs/x"), Path("/work"))
    assert options[:4] == ["--job-name=slurm-ddp-t000-r0", "--ntasks=2", "--nodes=2", "--cpus-per-task=1"]
    assert "--mem-per-cpu=2048M" in options  # job.resources: memory 2Gi over cpu 1
    assert "--time=00:10:00" in options  # job.timeout: 10m
    for option in (
        "--partition=gpu",
        "--account=proj-1",
        "--qos=normal",
        "--constraint=a100&ib",
        "--exclusive",
    ):
        assert option in options
    assert options[-2:] == ["--mail-type=END", "--requeue"] and "--chdir=/work" in options


def test_the_batch_script_is_fixed_text_with_quoted_paths() -> None:
    script = batch_script(Path("/runs/it's here"), "/venv/bin/python", SlurmSpec(), "ghcr.io/x/y:1.0")
    assert script.startswith("#!/bin/sh\n")
    assert "exec srun --kill-on-bad-exit=1" in script
    assert "'/runs/it'\"'\"'s here/table.json'" in script  # quoted: a path is never shell text
    assert "container-image" not in script  # container: none runs the stack's environment
    pyxis = batch_script(Path("/r"), "/venv/bin/python", SlurmSpec(container="pyxis"), "ghcr.io/x/y:1.0")
    assert "--container-image=ghcr.io/x/y:1.0" in pyxis and " python -m kaliper.execution.slurm.task" in pyxis
    apptainer = batch_script(
        Path("/r"), "/venv/bin/python", SlurmSpec(container="apptainer"), "ghcr.io/x/y:1.0"
    )
    assert (
        "apptainer exec --bind /r docker://ghcr.io/x/y:1.0 python -m kaliper.execution.slurm.task"
        in apptainer
    )


@pytest.mark.parametrize(
    ("text", "counts"), [("2", [2]), ("2(x3)", [2, 2, 2]), ("2(x2),1", [2, 2, 1]), ("1,3", [1, 3])]
)
def test_tasks_per_node_as_slurm_writes_it(text: str, counts: list[int]) -> None:
    assert tasks_per_node(text) == counts


def test_pytorchjob_tasks_join_at_the_node_of_rank_0() -> None:
    manifest = manifest_of("slurm-ddp.yaml")
    counts, tasks = job_tasks(manifest, None, {"KALIPER_SPOOL_DIR": "/spool"})
    assert [(t.replica_type, t.index) for t in tasks] == [("Master", 0), ("Worker", 0)]
    table = json.loads(json.dumps(task_table(manifest, counts, tasks, "/runs/x", None)))
    hosts = task_hosts(["node-a", "node-b"], tasks_per_node("1(x2)"))
    master = replica_env(table, 0, hosts, job_id=4242, local_rank=0)
    worker = replica_env(table, 1, hosts, job_id=4242, local_rank=0)
    assert master["MASTER_ADDR"] == worker["MASTER_ADDR"] == "node-a"
    assert master["MASTER_PORT"] == worker["MASTER_PORT"]
    assert (master["RANK"], worker["RANK"], master["WORLD_SIZE"]) == ("0", "1", "2")
    assert worker["LOCAL_RANK"] == "0" and worker["KALIPER_SPOOL_DIR"] == "/spool"
    assert worker["KALIPER_REPLICA_TYPE"] == "worker"  # the pod's own env (its label), resolved as locally


def test_tfjob_tasks_get_the_cluster_of_the_nodes_slurm_chose() -> None:
    manifest = manifest_of("tfjob-multiworker.yaml")
    counts, tasks = job_tasks(manifest, None, {})
    table = json.loads(json.dumps(task_table(manifest, counts, tasks, "/runs/x", None)))
    hosts = task_hosts(["n1", "n2"], [1, 1])
    config = json.loads(replica_env(table, 1, hosts, job_id=7, local_rank=0)["TF_CONFIG"])
    workers = config["cluster"]["worker"]
    assert [w.split(":")[0] for w in workers] == ["n1", "n2"] and config["task"] == {
        "type": "worker",
        "index": 1,
    }


def test_a_trainjob_is_refused_with_the_reason() -> None:
    with pytest.raises(ExecutionError, match="TrainJob"):
        job_tasks(manifest_of("trainjob-ddp.yaml"), None, {})


@pytest.mark.parametrize(
    ("section", "found"),
    [
        ({"partition": "gpu; rm -rf /"}, "slurm.partition"),
        ({"extra": ["--time=99:00:00"]}, "--time is set by Kaliper"),
        ({"extra": ["--export=ALL,X=$(id)"]}, "slurm.extra"),
        ({"container": "docker"}, "slurm.container"),
        ({"nodes": 0}, "slurm.nodes"),
    ],
)
def test_a_bad_slurm_section_is_refused_naming_the_field(section: dict[str, Any], found: str) -> None:
    text = (EXAMPLES / "slurm-ddp.yaml").read_text()
    document = yaml.safe_load(text)
    document["slurm"] = section
    with pytest.raises(SpecError, match=found.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)")):
        spec_from_text(yaml.safe_dump(document), "spec.yaml", EXAMPLES)
