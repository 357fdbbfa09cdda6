"""TrainJob templates the checks refuse before anything runs: unknown fields (which the API server would
drop silently) and wrong types against the Trainer v2.3.0 CRD's schema, counts that differ from the spec,
what reaches beyond the pod through a runtime patch, and a queued job that is not labelled or suspended.

Each case is one patch on the built-in trainjob.libsonnet, run through the CLI entry point in-process
(`kaliper validate` and `kaliper run`): exit 2, one `error:` line naming the template, the trial and the
JSON path, nothing written. `test_the_unpatched_template_passes` is the control.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kaliper.cli.app import main

SPEC = """\
name: bad
workload: {name: pi-matmul, template: job.jsonnet, params: {device: cpu}}
job:
  kind: TrainJob
  nodes: 2
  procs_per_node: 2
  image: 'ghcr.io/k/p:1.0'
  service_account: bench
  queue: team-a
"""
TEMPLATE = """\
local trainjob = import 'trainjob.libsonnet';
local podSpec(m) = m.spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec;
local node(m) = podSpec(m).containers[0];
local podPatch(m, p) = m + { spec+: { runtimePatches: [m.spec.runtimePatches[0] + { trainingRuntimeSpec+: { template+: {
  spec+: { replicatedJobs: [m.spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0] + {
    template+: { spec+: { template+: { spec+: p } } } }] } } } }] } };
function(run, job, workload, params, sampling)
  local m = trainjob(run, job, workload, params, sampling);
  PATCH
"""


@dataclass
class Case:
    id: str
    expect: list[str]
    patch: str


CASES = [
    Case("unknown-top-level", ["spec.hostNetwork", "unknown field 'hostNetwork'", "v2.3.0"],
         "m + { spec+: { hostNetwork: true } }"),
    Case("typo-deep", ["spec.trainer.numNode", "unknown field 'numNode'", "numNodes, numProcPerNode"],
         "m + { spec+: { trainer+: { numNode: 2 } } }"),
    Case("unknown-in-patch", ["replicatedJobs[0].template.spec.template.spec.hostPID", "unknown field"],
         "podPatch(m, { hostPID: true })"),
    Case("wrong-type", ["spec.trainer.numNodes", "expected an integer", "found str '2'"],
         "m + { spec+: { trainer+: { numNodes: '2' } } }"),
    Case("wrong-type-deep", ["spec.trainer.env[0].value", "expected a string", "found int 3"],
         "m + { spec+: { trainer+: { env: [{ name: 'X', value: 3 }] + super.env } } }"),
    Case("below-minimum", ["spec.activeDeadlineSeconds", "from 1", "found 0"],
         "m + { spec+: { activeDeadlineSeconds: 0 } }"),
    Case("nodes-differ", ["spec.trainer.numNodes", "expected 2 (job.nodes)", "found 3"],
         "m + { spec+: { trainer+: { numNodes: 3 } } }"),
    Case("procs-differ", ["spec.trainer.numProcPerNode", "expected 2 (job.procs_per_node)", "found 1"],
         "m + { spec+: { trainer+: { numProcPerNode: 1 } } }"),
    Case("reserved-env", ["spec.trainer.env[0].name", "no PET_* variable", "'PET_NNODES'"],
         "m + { spec+: { trainer+: { env: [{ name: 'PET_NNODES', value: '1' }] + super.env } } }"),
    Case("command-string", ["spec.trainer.command", "expected a list", "found str"],
         "m + { spec+: { trainer+: { command: 'torchrun -m kaliper' } } }"),
    Case("hostpath", ["spec.volumes[0].hostPath", "no hostPath"],
         "podPatch(m, { volumes: [{ name: 'h', hostPath: { path: '/' } }] })"),
    Case("privileged", ["containers[0].securityContext.privileged"],
         "podPatch(m, { containers: [node(m) + { securityContext+: { privileged: true } }] })"),
    Case("node-env-in-patch", ["containers[0].env", "spec.trainer.env"],
         "podPatch(m, { containers: [node(m) + { env: [{ name: 'A', value: 'b' }] }] })"),
    Case("service-account", ["serviceAccountName", "'bench' (job.service_account)", "'admin'"],
         "podPatch(m, { serviceAccountName: 'admin' })"),
    Case("queue-label-missing", ["metadata.labels['kueue.x-k8s.io/queue-name']", "'team-a' (job.queue)"],
         "m + { metadata+: { labels: { [k]: m.metadata.labels[k] for k in std.objectFields(m.metadata.labels) if k != 'kueue.x-k8s.io/queue-name' } } }"),
    Case("not-suspended", ["spec.suspend", "expected true"], "m + { spec+: { suspend: false } }"),
    Case("name-not-dns1035", ["metadata.name", "starting with a letter"], "m + { metadata+: { name: '1-bad' } }"),
]  # fmt: skip


def setup(root: Path, patch: str) -> Path:
    work = root / "spec"
    work.mkdir()
    (work / "job.jsonnet").write_text(TEMPLATE.replace("PATCH", patch))
    (work / "spec.yaml").write_text(SPEC)
    return work


# `kaliper run` (configure, then nothing written) for the schema's cases; `validate` for every case.
RUN_CASES = ("unknown-top-level", "typo-deep", "wrong-type")
RUNS = [
    pytest.param(case, command, id=f"{case.id}-{command}")
    for case in CASES
    for command in ("validate", "run")
    if command == "validate" or case.id in RUN_CASES
]


@pytest.mark.parametrize(("case", "command"), RUNS)
def test_bad_trainjob_is_refused_before_anything_runs(
    case: Case,
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = setup(tmp_path, case.patch)
    monkeypatch.chdir(work)
    store = tmp_path / "store"
    before = {str(p) for p in tmp_path.rglob("*")}
    argv = (
        ["validate", "spec.yaml"]
        if command == "validate"
        else ["run", "spec.yaml", "--storage", f"file://{store}"]
    )
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = "".join(
        line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("warning: ")
    )
    assert exit_info.value.code == 2, err
    assert err.startswith("error: spec.yaml: workload.template 'job.jsonnet'"), err
    assert "(trial t000)" in err and "Traceback" not in err, err
    assert err.count("\n") == 1, err
    for text in case.expect:
        assert text in err, err
    assert not store.exists() or not any(store.iterdir())
    assert {str(p) for p in tmp_path.rglob("*")} - before <= {str(store)}


def test_the_unpatched_template_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases above differ from a TrainJob that validates by their patch only."""
    monkeypatch.chdir(setup(tmp_path, "m"))
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", "spec.yaml"])
    assert exit_info.value.code in (0, None)
