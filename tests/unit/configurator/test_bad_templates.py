"""Hostile or broken job templates: `kaliper validate` and `kaliper run` refuse them, fast, writing nothing.

Each case is run in-process through the CLI entry point, in a temporary directory holding the spec and
its template, with small template limits (2 s, 512 MiB) so the jsonnet bombs are cut quickly: exit 2,
one `error: ...` line naming the spec/template and the field or JSON path, no traceback, no file written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kaliper.cli.app import main

SPEC = """\
name: bad
workload: {{name: pi-matmul, template: {template}}}
job: {{kind: PyTorchJob, replicas: {{Master: 1, Worker: 1}}, image: 'ghcr.io/k/p:1.0', service_account: bench}}
"""
GOOD = """\
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  local c = k.container('pytorch', { name: 'p', containerPort: 23456 }, run, job, workload, params, sampling);
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: k.metadata(run),
    spec: { runPolicy: k.runPolicy(job), pytorchReplicaSpecs: k.replicaSpecs(c, run, job) },
  } + PATCH
"""


def pod(patch: str, rtype: str = "Master") -> str:
    return f"{{ spec+: {{ pytorchReplicaSpecs+: {{ {rtype}+: {{ template+: {{ spec+: {patch} }} }} }} }} }}"


def container(patch: str) -> str:
    return pod(f"{{ containers: [super.containers[0] + {patch}] }}")


@dataclass
class Case:
    id: str
    expect: list[str]
    patch: str = "{}"
    body: str | None = None  # a whole template instead of GOOD + patch
    template: str = "job.jsonnet"
    files: dict[str, str] = field(default_factory=dict)


BOMB = "function(run, job, workload, params, sampling) {}\n"
CASES = [
    Case("exponential", ["exceeded 2 s", "(trial t000)"],
         body=BOMB.replace("{}", "local f(n) = if n == 0 then 1 else f(n - 1) + f(n - 1); { x: f(80) }")),
    Case("string-doubling", ["exceeded", "(trial t000)"],
         body=BOMB.replace("{}", "local d(s, n) = if n == 0 then s else d(s + s, n - 1); { x: std.length(d('ab', 40)) }")),
    Case("huge-range", ["exceeded", "(trial t000)"],
         body=BOMB.replace("{}", "{ x: std.length(std.range(1, 2e8)) }")),
    Case("name-traversal", ["metadata.name", "../../../../tmp/x"], "{ metadata+: { name: '../../../../tmp/x' } }"),
    Case("name-upper", ["metadata.name", "DNS-1123"], "{ metadata+: { name: 'Bad_Name' } }"),
    Case("name-too-long", ["metadata.name", "characters"], "{ metadata+: { name: std.repeat('a', 300) } }"),
    Case("pod-name-too-long", ["metadata.name (pod", "-master-0'"], "{ metadata+: { name: std.repeat('a', 245) } }"),
    Case("namespace", ["metadata.namespace", "DNS-1123"], "{ metadata+: { namespace: 'Bad NS' } }"),
    Case("label-key", ["metadata.labels['bad key!']"], "{ metadata+: { labels+: { 'bad key!': 'x' } } }"),
    Case("label-value", ["metadata.labels.x", "label value"], "{ metadata+: { labels+: { x: std.repeat('v', 64) } } }"),
    Case("annotation-value", ["metadata.annotations.a", "a string"], "{ metadata+: { annotations: { a: 3 } } }"),
    Case("replica-type-traversal", ["spec.pytorchReplicaSpecs['../../x']"],
         "{ spec+: { pytorchReplicaSpecs+: { '../../x': super.Worker } } }"),
    Case("replicas-million", ["spec.pytorchReplicaSpecs.Worker.replicas", "expected 1", "1000000"],
         "{ spec+: { pytorchReplicaSpecs+: { Worker+: { replicas: 1000000 } } } }"),
    Case("count-mismatch", ["spec.pytorchReplicaSpecs.Master.replicas", "expected 1", "found 2"],
         "{ spec+: { pytorchReplicaSpecs+: { Master+: { replicas: 2 } } } }"),
    Case("missing-worker", ["spec.pytorchReplicaSpecs.Worker", "job.replicas.Worker"],
         "{ spec+: { pytorchReplicaSpecs+: { Worker:: super.Worker } } }"),
    Case("container-name", ["containers[0].name", "'pytorch'", "'main'"], container("{ name: 'main' }")),
    Case("two-containers", ["template.spec.containers", "exactly one", "2 containers"],
         pod("{ containers: [super.containers[0], super.containers[0] + { name: 'side' }] }")),
    Case("hostpath", ["volumes[0].hostPath", "no hostPath"], pod("{ volumes: [{ name: 'h', hostPath: { path: '/' } }] }")),
    Case("host-network", ["Worker.template.spec.hostNetwork"], pod("{ hostNetwork: true }", "Worker")),
    Case("host-pid", ["template.spec.hostPID"], pod("{ hostPID: true }")),
    Case("privileged", ["securityContext.privileged"], container("{ securityContext+: { privileged: true } }")),
    Case("capabilities", ["capabilities.add"], container("{ securityContext+: { capabilities: { add: ['SYS_ADMIN'] } } }")),
    Case("service-account", ["serviceAccountName", "'bench' (job.service_account)", "'admin'"],
         pod("{ serviceAccountName: 'admin' }")),
    Case("node-name", ["template.spec.nodeName"], pod("{ nodeName: 'node-1' }")),
    Case("command-string", ["containers[0].command", "list of strings"], container("{ command: 'kaliper workload' }")),
    Case("args-number", ["containers[0].args", "list of strings"], container("{ args: ['--n', 3] }")),
    Case("restart-always", ["restartPolicy", "Never or OnFailure", "'Always'"],
         "{ spec+: { pytorchReplicaSpecs+: { Master+: { restartPolicy: 'Always' } } } }"),
    Case("env-name", ["containers[0].env[0].name", "environment variable name"],
         container("{ env: [{ name: '1 BAD=', value: 'x' }] }")),
    Case("wrong-kind", ["kind: expected PyTorchJob (job.kind)", "'TFJob'"], "{ kind: 'TFJob' }"),
    Case("wrong-api-version", ["apiVersion: expected kubeflow.org/v1", "'v1'"], "{ apiVersion: 'v1' }"),
    Case("not-an-object", ["expected a PyTorchJob object", "found str"], body="function(run, job, workload, params, sampling) 'x'\n"),
    Case("symlink-outside", ["workload.template", "inside the spec's directory"], template="link.jsonnet"),
    Case("absolute-path", ["workload.template", "relative to the spec's directory"], template="/etc/hostname"),
    Case("import-outside", ["outside", "confined"], "import '../outside.libsonnet'"),
    Case("jsonnet-error", ["jsonnet evaluation failed", "(trial t000)"], "{ a: error 'broken on purpose' }"),
]  # fmt: skip


def setup(root: Path, case: Case) -> Path:
    """root/spec (the cwd: spec.yaml and templates) and root/outside (what must stay unreachable)."""
    work, outside = root / "spec", root / "outside"
    work.mkdir()
    outside.mkdir()
    (root / "outside.libsonnet").write_text("{ token: 'outside' }\n")
    (outside / "job.jsonnet").write_text(GOOD.replace("PATCH", "{}"))
    (work / "job.jsonnet").write_text(case.body or GOOD.replace("PATCH", case.patch))
    (work / "link.jsonnet").symlink_to(outside / "job.jsonnet")
    (work / "spec.yaml").write_text(SPEC.format(template=case.template))
    return work


def _stat(path: Path) -> tuple[int, int] | None:
    return (path.stat().st_mtime_ns, path.stat().st_ino) if path.exists() else None


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_template_is_refused_with_nothing_written(
    case: Case,
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = setup(tmp_path, case)
    monkeypatch.chdir(work)
    monkeypatch.setenv("KALIPER_TEMPLATE_TIMEOUT", "2")
    monkeypatch.setenv("KALIPER_TEMPLATE_MEMORY", "512MiB")
    store = tmp_path / "store"
    before = tree(tmp_path)
    traversal_target = _stat(Path("/tmp/x"))  # where the metadata.name traversal would have written
    argv = (
        ["validate", "spec.yaml"]
        if command == "validate"
        else ["run", "spec.yaml", "--storage", f"file://{store}"]
    )

    began = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    elapsed = time.monotonic() - began

    # `kaliper run` as root warns first (a spec is code); the error is the one other line
    err = "".join(
        line for line in capsys.readouterr().err.splitlines(True) if not line.startswith("warning: ")
    )
    assert exit_info.value.code == 2, err
    assert elapsed < 5, f"took {elapsed:.1f} s"
    assert err.startswith("error: "), err
    assert "Traceback" not in err
    assert "spec.yaml" in err or "job.jsonnet" in err, err
    for text in case.expect:
        assert text in err, err
    if "exceeded" in case.expect:  # a bomb: the message names the limit that cut it (which one is a race)
        assert "exceeded 2 s" in err or "exceeded the memory limit of 512 MiB" in err, err
    assert "token" not in err  # the unreachable file was never read
    assert not store.exists() or not any(store.iterdir())
    assert tree(tmp_path) - before <= {"store"}, tree(tmp_path) - before
    assert _stat(Path("/tmp/x")) == traversal_target


def test_the_control_template_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases above differ from a template that validates by their patch only."""
    work = setup(tmp_path, Case("good", []))
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", "spec.yaml"])
    assert exit_info.value.code in (0, None)
