"""A trace-replay spec: `trace` is required (found at validate time, from params or the matrix), and the
replay's containers get the glibc malloc settings the recorder used, under a stack's own env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.errors import SpecError
from kaliper.spec import spec_from_text
from kaliper.trace import MALLOC_ENV
from tests.support.trace_bundles import v1_meta, v2_meta

SPEC = """\
name: replay
workload: {name: trace-replay, params: {iterations: 1}}
"""


def own_container(manifest: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"
    ][0]
    return container


def container_env(manifest: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in own_container(manifest)["env"]}


def test_a_missing_trace_is_an_input_error_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(
        SpecError, match=r"replay\.yaml: workload\.params\.trace: workload trace-replay requires"
    ):
        spec_from_text(SPEC, "replay.yaml", tmp_path)


def test_the_matrix_may_give_the_trace(tmp_path: Path) -> None:
    loaded = spec_from_text(SPEC + "matrix: {trace: [traces/a, traces/b]}\n", "replay.yaml", tmp_path)
    plan = configure(loaded, experiment_id="replay-x")
    assert [t.doc.params["trace"] for t in plan.trials] == ["traces/a", "traces/b"]


def test_replay_containers_get_the_recorders_malloc_settings_under_the_stacks_env(tmp_path: Path) -> None:
    text = SPEC.replace("{iterations: 1}", "{trace: traces/a}") + (
        "stacks:\n"
        "  - {name: plain}\n"
        "  - {name: own, env: {MALLOC_TRIM_THRESHOLD_: '0', ONEDNN_MAX_CPU_ISA: AVX2}}\n"
    )
    plan = configure(spec_from_text(text, "replay.yaml", tmp_path), experiment_id="replay-x")
    plain, own = (container_env(t.manifest) for t in plan.trials)
    assert {k: plain[k] for k in MALLOC_ENV} == MALLOC_ENV
    assert own["MALLOC_TRIM_THRESHOLD_"] == "0" and own["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert own["MALLOC_MMAP_THRESHOLD_"] == MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"]
    names = [e["name"] for e in own_container(plan.trials[1].manifest)["env"]]
    assert names.count("MALLOC_TRIM_THRESHOLD_") == 1  # one variable, not two for the pod to choose from
    other = configure(
        spec_from_text("name: m\nworkload: {name: pi-matmul}\n", "m.yaml", tmp_path), experiment_id="m-x"
    )
    assert not set(MALLOC_ENV) & set(container_env(other.trials[0].manifest))


def test_a_job_of_another_size_than_the_recorded_ranks_is_refused(tmp_path: Path) -> None:
    """A two-rank bundle in the run's storage (only its trace.json is read) against jobs of 1, 2, 3
    replicas, and per trial of a matrix; a bundle not readable where the experiment is configured is left
    to the replicas."""
    storage = tmp_path / "store"
    for name, meta in (("ddp", v2_meta()), ("one", v1_meta())):
        (storage / "traces" / name).mkdir(parents=True)
        (storage / "traces" / name / "trace.json").write_text(json.dumps(meta))
    url = f"file://{storage}"

    def spec(replicas: str, params: str = "{trace: traces/ddp}", matrix: str = "") -> Any:
        text = (
            f"name: replay\nworkload: {{name: trace-replay, params: {params}}}\n{matrix}"
            f"job: {{kind: PyTorchJob, replicas: {replicas}}}\n"
        )
        return spec_from_text(text, "replay.yaml", tmp_path)

    assert len(configure(spec("{Master: 1, Worker: 1}"), storage_url=url).trials) == 1
    for replicas, found in (("{Master: 1}", "found 1 (Master: 1)"), ("{Master: 1, Worker: 2}", "found 3")):
        with pytest.raises(SpecError) as refused:
            configure(spec(replicas), storage_url=url)
        assert str(refused.value).startswith(
            "replay.yaml: job.replicas: trace 'traces/ddp' was recorded on 2 rank(s); expected 2 replica(s) "
            "in all (one per rank), "
        )
        assert found in str(refused.value)
    with pytest.raises(SpecError, match=r"trace 'traces/one' was recorded on 1 rank\(s\); expected 1"):
        configure(
            spec("{Master: 1, Worker: 1}", "{}", "matrix: {trace: [traces/ddp, traces/one]}\n"),
            storage_url=url,
        )
    # not readable here (no such trace, a URL): the replicas refuse it if they must
    assert configure(spec("{Master: 1}", "{trace: traces/none}"), storage_url=url).trials
    assert configure(spec("{Master: 1}", "{trace: 'http://127.0.0.1:9/x'}"), storage_url=url).trials
