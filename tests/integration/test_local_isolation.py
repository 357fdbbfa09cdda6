"""Local distributed jobs: private loopback network, a killed replica fails the run fast, no orphans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kaliper.execution.local.netns import isolation_unavailable_reason
from tests.support.replicas import wait_for

pytestmark = pytest.mark.slow

TEMPLATE = """\
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  local container(code) = {
    name: 'pytorch', image: job.image, command: ['python'], args: ['-c', code],
    env: k.env(run, job) + [{ name: 'OUT_DIR', value: params.out_dir }],
  };
  local replica(rtype) = {
    replicas: job.replicas[rtype], restartPolicy: 'Never',
    template: { metadata: { labels: k.labels(run) }, spec: { containers: [container(params[rtype])] } },
  };
  {
    apiVersion: 'kubeflow.org/v1', kind: 'PyTorchJob', metadata: k.metadata(run),
    spec: { runPolicy: k.runPolicy(job),
            pytorchReplicaSpecs: { [t]: replica(t) for t in std.objectFields(job.replicas) } },
  }
"""

# The master starts a grandchild (as a DataLoader worker would), records both pids and the interfaces it
# sees, then waits; the worker records its pid and sleeps until the test kills it. Each file is written
# under a temporary name and renamed into place: once it exists, it is whole.
MASTER = (
    "import os, socket, subprocess, time, json; d = os.environ['OUT_DIR'];"
    "g = subprocess.Popen(['sleep', '300']);"
    "json.dump({'pid': os.getpid(), 'grandchild': g.pid, 'ifaces': [n for _, n in socket.if_nameindex()]},"
    " open(d + '/master.tmp', 'w'));"
    "os.replace(d + '/master.tmp', d + '/master.json');"
    "time.sleep(300)"
)
WORKER = (
    "import os, time; d = os.environ['OUT_DIR']; open(d + '/worker.tmp', 'w').write(str(os.getpid()));"
    "os.replace(d + '/worker.tmp', d + '/worker.pid'); time.sleep(300)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _spec(tmp_path: Path, out: Path) -> Path:
    (tmp_path / "job.jsonnet").write_text(TEMPLATE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: killed\n"
        "workload:\n  template: job.jsonnet\n"
        f"  params: {{out_dir: {json.dumps(str(out))}, Master: {json.dumps(MASTER)}, Worker: {json.dumps(WORKER)}}}\n"
        "repetitions: 1\n"
        "job: {kind: PyTorchJob, replicas: {Master: 1, Worker: 1}, image: 'ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0',"
        " timeout: 5m}\n"
    )
    return spec


def test_killed_replica_fails_the_run_quickly_and_leaves_no_orphans(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    store = tmp_path / "store"
    spec = _spec(tmp_path, out)
    run = subprocess.Popen(
        [sys.executable, "-m", "kaliper", "run", str(spec), "--storage", f"file://{store}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def started() -> bool:
        assert run.poll() is None, run.communicate()
        return (out / "worker.pid").exists() and (out / "master.json").exists()

    wait_for(started, what="both replicas to say they started", timeout=120)
    worker = int((out / "worker.pid").read_text())
    master = json.loads((out / "master.json").read_text())
    os.kill(worker, 9)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stdout + stderr

    for pid in (worker, master["pid"], master["grandchild"]):
        assert not _alive(pid), f"process {pid} outlived the run"

    run_dir = next(store.glob("experiments/*/trials/t000/runs/0"))
    launch = json.loads((run_dir / "launch.json").read_text())
    assert launch["status"] == "failed"
    # The master's own start and end, as the executor recorded them: stopped once the worker died, not
    # left to its 300 s sleep (a master that slept to the end lived 300 s or more, however fast the machine).
    (recorded,) = [r for r in launch["replicas"] if r["replica_type"] == "Master"]
    lived = datetime.fromisoformat(recorded["finished"]) - datetime.fromisoformat(recorded["started"])
    assert lived < timedelta(seconds=300), "the run waited instead of failing when a replica died"
    assert launch["failure"]["replica"] == "Worker-0"
    assert "worker-0 was killed by signal SIGKILL (9)" in launch["message"]
    record = json.loads((run_dir / "worker-0.json").read_text())
    assert record["status"] == "failed" and "SIGKILL" in record["error"]
    master_record = json.loads((run_dir / "master-0.json").read_text())
    assert master_record["status"] == "failed" and "Stopped" in master_record["error"]

    if isolation_unavailable_reason() is None:
        assert launch["network"] == "isolated"
        assert master["ifaces"] == ["lo"], "replicas of a local distributed job see only loopback"
    else:
        assert launch["network"] == "host"
