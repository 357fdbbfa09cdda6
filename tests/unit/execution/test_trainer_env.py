"""What Kaliper injects into a TrainJob's trainer container, compared with what Kubeflow Trainer v2.3.0's
torch plugin injects: names and values read from upstream's own text (a verbatim excerpt of torch.go and
constants.go, tests/unit/fixtures/trainer/), in the cluster's form and in the local executor's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kaliper.execution.local.container import container_env
from kaliper.jobs.kubeflow import COMPLETION_INDEX_ANNOTATION
from kaliper.jobs.operator_env import LOCAL_HOST, trainer_env, trainjob_labels
from tests.support.paths import FIXTURES

SOURCE = (FIXTURES / "trainer" / "torch-plugin-v2.3.0.go.txt").read_text()
CONSTANTS = {
    f"constants.{name}": text or number
    for name, text, number in re.findall(
        r'^\s+(\w+)\s+(?:string|int32)\s*=\s*(?:"([^"]*)"|(\d+))\s*$', SOURCE, re.M
    )
}
VARIABLES = dict(re.findall(r"^\s+(\w+)\s+string\s*=\s*(fmt\.Sprintf\(.*\))\s*$", SOURCE, re.M))


def balanced(text: str, opening: int) -> str:
    """The text inside the parenthesis that opens at `opening`."""
    depth = 0
    for at in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[at], 0)
        if depth == 0:
            return text[opening + 1 : at]
    raise AssertionError(f"unbalanced: {text[opening:]}")


def arguments(text: str) -> list[str]:
    """Go call arguments split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()] if current.strip() else parts


def go_value(expression: str, names: dict[str, str]) -> str:
    """The value of a Go expression of the excerpt: a name bound in `names`, or fmt.Sprintf of them."""
    expression = expression.strip()
    if expression in names:
        return names[expression]
    call = re.fullmatch(r'fmt\.Sprintf\("([^"]*)",(.*)\)', expression, re.S)
    assert call is not None, f"a Go expression the test cannot read: {expression}"
    args = arguments(call.group(2))
    return re.sub(r"%[sd]", lambda _: go_value(args.pop(0), names), call.group(1))


def upstream_env(job: str, nodes: int, procs: int) -> dict[str, str]:
    """name → value (a fieldRef as `fieldRef:<path>`) of each variable the excerpt's torch plugin injects
    into the trainer container of a TrainJob `job` with `nodes` × `procs`."""
    names = {
        **CONSTANTS,
        "trainJob.Name": job,
        # the trainer's pod count is set from spec.trainer.numNodes (torch.go:117-118) ...
        "ptr.Deref(ptr.Deref(trainerPS, runtime.PodSet{}).Count, 1)": str(nodes),
        # ... and numProcPerNode from spec.trainer.numProcPerNode (torch.go:121-124)
        "numProcPerNode.String()": str(procs),
        # k8s.io/api batch/v1: JobCompletionIndexAnnotation = labelPrefix + "job-completion-index"
        "batchv1.JobCompletionIndexAnnotation": "batch.kubernetes.io/job-completion-index",
    }
    names.update({f"constants.{var}": go_value(expr, names) for var, expr in VARIABLES.items()})
    found: dict[str, str] = {}
    for block in SOURCE.split("*corev1ac.EnvVar().")[1:]:
        name = names[balanced(block, block.index("WithName(") + len("WithName"))]
        if "WithValue(" in block:
            found[name] = go_value(balanced(block, block.index("WithValue(") + len("WithValue")), names)
        else:
            path = balanced(block, block.index("WithFieldPath(") + len("WithFieldPath"))
            found[name] = "fieldRef:" + go_value(path, names)
    return found


def manifest(**trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bench-t000-r0"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 3, "numProcPerNode": 2, "command": ["torchrun"], **trainer},
        },
    }


def as_shapes(env: list[dict[str, Any]]) -> dict[str, str]:
    return {
        e["name"]: e["value"] if "value" in e else "fieldRef:" + e["valueFrom"]["fieldRef"]["fieldPath"]
        for e in env
    }


def test_the_excerpt_reads_as_upstream_says() -> None:
    # The reader of the excerpt itself: five variables, torchrun's names, the port and the master's form.
    env = upstream_env("job", 3, 2)
    assert sorted(env) == sorted(
        ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"]
    )
    assert env["PET_MASTER_ADDR"] == "job-node-0-0.job"
    assert env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']"


def test_cluster_rendering_is_exactly_the_torch_plugins() -> None:
    job = manifest()
    assert as_shapes(trainer_env(job)) == upstream_env("bench-t000-r0", 3, 2)


def test_local_rendering_has_the_same_names_with_loopback_values() -> None:
    job = manifest()
    local = as_shapes(trainer_env(job, (LOCAL_HOST, 40123)))
    upstream = upstream_env("bench-t000-r0", 3, 2)
    assert set(local) == set(upstream)
    assert local["PET_MASTER_ADDR"] == "127.0.0.1" and local["PET_MASTER_PORT"] == "40123"
    for name in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK"):
        assert local[name] == upstream[name]


@pytest.mark.parametrize("node", [0, 2])
def test_local_node_rank_comes_from_the_pods_completion_index(node: int) -> None:
    # The local executor resolves the fieldRef as the kubelet would, from the node pod's annotation.
    env = trainer_env(manifest(), (LOCAL_HOST, 40123))
    resolved = container_env(
        {"name": "node", "env": env},
        f"bench-t000-r0-node-0-{node}",
        "default",
        trainjob_labels("bench-t000-r0", node),
        {COMPLETION_INDEX_ANNOTATION: str(node)},
    )
    assert resolved["PET_NODE_RANK"] == str(node)
    assert resolved["PET_NNODES"] == "3" and resolved["PET_NPROC_PER_NODE"] == "2"


def test_trainer_env_comes_first_and_the_plugin_wins_a_clash() -> None:
    job = manifest(
        env=[{"name": "KALIPER_REPLICA_TYPE", "value": "Node"}, {"name": "PET_NNODES", "value": "9"}]
    )
    env = trainer_env(job)
    assert env[0] == {"name": "KALIPER_REPLICA_TYPE", "value": "Node"}
    assert as_shapes(env)["PET_NNODES"] == "3"
    assert [e["name"] for e in env].count("PET_NNODES") == 1


def test_torchtune_gets_no_master_variables() -> None:
    # torch.go:175: `tune run` gets a rendezvous argument instead of PET_MASTER_*.
    names = {e["name"] for e in trainer_env(manifest(command=["tune", "run"]))}
    assert "PET_MASTER_ADDR" not in names and "PET_MASTER_PORT" not in names
    assert "PET_NODE_RANK" in names


def test_node_pods_carry_jobset_labels() -> None:
    assert trainjob_labels("j", 1) == {
        "jobset.sigs.k8s.io/jobset-name": "j",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": "1",
    }
