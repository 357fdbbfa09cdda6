"""`launch_run` end to end through the real `kubernetes` client against a loopback API server.

No kube-apiserver can be installed here, so a stdlib HTTP server on 127.0.0.1 plays one back: it
answers the REST paths the client calls with recorded training-operator v1.9 objects
(fixtures/kube/), streams watches as chunked JSON lines (ending with a 410 Expired ERROR event where
the recording has one), and keeps every request it received. The client code, its URL building,
watch decoding and error mapping are the real ones; so are the configurator and FileStorage.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from kubernetes.client import Configuration

from kaliper.configurator import configure, write_plan
from kaliper.configurator.jobcheck import JobExpectations
from kaliper.errors import ExecutionError, InputError
from kaliper.execution.kubernetes import launch as launch_module
from kaliper.execution.kubernetes.api import JobApi
from kaliper.execution.kubernetes.launch import launch_run
from kaliper.execution.kubernetes.logrecords import MAX_LOG_BYTES
from kaliper.jobs.objects import RESULTS_VOLUME, WORKFLOW_LABEL, job_name
from kaliper.results.documents import LaunchDoc, to_document
from kaliper.results.protocol import result_line
from kaliper.results.record import load_record
from kaliper.spec import spec_from_text
from kaliper.storage import Storage, layout, open_storage
from tests.support.cli import in_process
from tests.support.kubeconfig import use_kubeconfig
from tests.support.paths import FIXTURES

KUBE = FIXTURES / "kube"
WF, WFUID, EXP = "kaliper-ddp-8xk2p", "0c4e3a1b-7d2f-4e9a-b6c8-1f2e3d4c5b6a", "ddp-x"
SPEC = """\
name: ddp
workload:
  name: cnn-train
  framework: {framework}
  params: {{model: small, batch_size: 16, image_size: 32, num_classes: 10, data: synthetic}}
repetitions: 2
job:
  kind: {kind}
  namespace: bench
  replicas: {replicas}
  image: ghcr.io/kaliper-dev/kaliper-{framework}:0.1.0
  timeout: 10m
"""
PYTORCH = {"kind": "PyTorchJob", "framework": "pytorch", "replicas": "{Master: 1, Worker: 1}"}
PYTORCH_2 = {"kind": "PyTorchJob", "framework": "pytorch", "replicas": "{Master: 1, Worker: 2}"}
TENSORFLOW = {"kind": "TFJob", "framework": "tensorflow", "replicas": "{Worker: 2}"}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def finished(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions", [])
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    authorization: str | None = None

    @property
    def watch(self) -> bool:
        """The client sends watch=True; the API server parses it with Go's strconv.ParseBool."""
        return self.query.get("watch", "").lower() in ("true", "1", "t")


@dataclass
class Script:
    """What the server answers. Lists and watches are consumed in order; the last list repeats and
    a watch with nothing scripted stays open until its timeoutSeconds, like an idle real one."""

    create: tuple[int, dict[str, Any]] | None = None  # None: 201 with the posted body
    existing: dict[str, Any] | None = None
    lists: list[dict[str, Any]] = field(default_factory=list)
    watches: list[list[dict[str, Any]]] = field(default_factory=list)
    pods: Callable[[dict[str, Any] | None], dict[str, Any]] = lambda job: {"kind": "PodList", "items": []}
    logs: dict[str, str] = field(default_factory=dict)


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = Script()
        self.requests: list[Request] = []
        self.current: dict[str, Any] | None = None  # the job as last shown to the client

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def api(self) -> JobApi:
        return JobApi.from_configuration(Configuration(host=self.url))

    def received(self, method: str, suffix: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def _record(self, body: Any = None) -> Request:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        request = Request(self.command, parts.path, query, body, self.headers.get("Authorization"))
        self.server.requests.append(request)
        return request

    def _send(self, code: int, document: Any, content_type: str = "application/json") -> None:
        data = document.encode() if isinstance(document, str) else json.dumps(document).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        if self.server.script.create is not None:
            self._send(*self.server.script.create)
            return
        created = {**body, "metadata": {**body["metadata"], "uid": "5e0c9f1a-0000-4000-8000-000000000001",
                   "resourceVersion": "48190", "generation": 1, "creationTimestamp": "2025-03-04T10:00:00Z"}}  # fmt: skip
        self.server.current = created
        self._send(201, created)

    def do_GET(self) -> None:
        request = self._record()
        script, segments = self.server.script, request.path.strip("/").split("/")
        if request.path.startswith("/api/v1/") and segments[-1] == "pods":
            self._send(200, script.pods(self.server.current))
        elif request.path.startswith("/api/v1/") and segments[-1] == "log":
            pod = segments[-2]
            if pod not in script.logs:
                self._send(404, status(404, "NotFound", f'pods "{pod}" not found'))
                return
            text = script.logs[pod]
            if "tailLines" in request.query:
                text = "".join(text.splitlines(keepends=True)[-int(request.query["tailLines"]) :])
            if "limitBytes" in request.query:
                text = text.encode()[: int(request.query["limitBytes"])].decode(errors="replace")
            self._send(200, text, "text/plain")
        elif segments[-1] in ("pytorchjobs", "tfjobs", "trainjobs") and request.watch:
            self._watch(int(request.query["timeoutSeconds"]))
        elif segments[-1] in ("pytorchjobs", "tfjobs", "trainjobs"):
            listing = script.lists.pop(0) if len(script.lists) > 1 else script.lists[0]
            self.server.current = listing["items"][0] if listing["items"] else None
            self._send(200, listing)
        elif script.existing is not None:
            self.server.current = script.existing
            self._send(200, script.existing)
        else:
            self._send(
                404, status(404, "NotFound", f'{segments[-2]}.kubeflow.org "{segments[-1]}" not found')
            )

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, timeout_seconds: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            events = self.server.script.watches.pop(0) if self.server.script.watches else None
            if events is None:
                time.sleep(timeout_seconds)  # an idle watch: nothing changes until it times out
            for event in events or []:
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.server.current = event["object"]
                self._chunk(json.dumps(event).encode() + b"\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def server() -> Iterator[ApiServer]:
    api_server = ApiServer()
    thread = threading.Thread(target=api_server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield api_server
    api_server.shutdown()
    api_server.server_close()


def write_experiment(tmp_path: Path, shape: dict[str, str]) -> Storage:
    storage = open_storage("file://" + str(tmp_path / "results"))
    loaded = spec_from_text(SPEC.format(**shape), "ddp.yaml", tmp_path)
    write_plan(configure(loaded, experiment_id=EXP, storage_url=storage.url), storage)
    return storage


def recording(name: str, job: str, rep: int = 0) -> dict[str, Any]:
    text = (KUBE / name).read_text()
    names = {
        "JOB": job,
        "NS": "bench",
        "EXP": EXP,
        "TRIAL": "t000",
        "REP": str(rep),
        "WF": WF,
        "WFUID": WFUID,
    }
    for key, value in names.items():
        text = text.replace("${" + key + "}", value)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def listing(*items: dict[str, Any], version: str = "48231") -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "metadata": {"resourceVersion": version},
            "items": list(items)}  # fmt: skip


def launch(
    storage: Storage, server: ApiServer, rep: int = 0, timeout_s: float = 30.0, **kwargs: Any
) -> LaunchDoc:
    kwargs.setdefault("workflow_namespace", "bench")  # the Workflow's namespace is the jobs' (job.namespace)
    return launch_run(storage, EXP, "t000", rep, workflow_name=WF, workflow_uid=WFUID, timeout_s=timeout_s,
                      api=server.api(), **kwargs)  # fmt: skip


# ------------------------------------------------------------------------------------------- tests


def test_retried_step_adopts_its_job_and_resumes_after_watch_expiry(
    tmp_path: Path, server: ApiServer
) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("watch-expired.json", name)
    server.script = Script(
        create=(409, rec["create_conflict"]),
        existing=rec["existing"],
        lists=rec["lists"],
        watches=[rec["watch"]],
        pods=lambda job: rec["pods"] if job is not None and finished(job) else rec["pods_running"],
    )
    doc = launch(storage, server, volume_claim="kaliper-results", mount_path="/results")

    assert (doc.status, doc.reason, doc.executor, doc.job_name) == (
        "succeeded",
        "PyTorchJobSucceeded",
        "kubernetes",
        name,
    )
    assert doc.message == f"PyTorchJob bench/{name} successfully completed."
    phases = {k: v.isoformat() if v else None for k, v in doc.phases.items()}
    assert phases == {
        "created": "2025-03-04T10:00:00+00:00",
        "scheduled": "2025-03-04T10:00:03+00:00",
        "running": "2025-03-04T10:00:09+00:00",
        "finished": "2025-03-04T10:00:41+00:00",
    }
    assert [(r.replica_type, r.index, r.pod, r.exit_code, r.reason) for r in doc.replicas] == [
        ("Master", 0, f"{name}-master-0", 0, "Completed"),
        ("Worker", 0, f"{name}-worker-0", 0, "Completed"),
    ]
    assert doc.replicas[0].image_id is not None and "@sha256:" in doc.replicas[0].image_id
    assert doc.failure is None
    key = layout.launch_key(EXP, "t000", 0)
    assert storage.get_json(key) == to_document(doc)

    # The create request carried the identity, the owner and the results volume.
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")
    body = create.body
    assert body["metadata"]["name"] == name and body["metadata"]["namespace"] == "bench"
    labels = {
        "kaliper.dev/experiment": EXP,
        "kaliper.dev/trial": "t000",
        "kaliper.dev/repetition": "0",
        WORKFLOW_LABEL: WF,
    }
    assert labels.items() <= body["metadata"]["labels"].items()
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "name": WF, "uid": WFUID, "controller": True, "blockOwnerDeletion": False}]  # fmt: skip
    for rtype, spec in body["spec"]["pytorchReplicaSpecs"].items():
        assert labels.items() <= spec["template"]["metadata"]["labels"].items(), rtype
        pod = spec["template"]["spec"]
        assert {"name": RESULTS_VOLUME, "persistentVolumeClaim": {"claimName": "kaliper-results"}} in pod[
            "volumes"
        ]
        assert all(
            {"name": RESULTS_VOLUME, "mountPath": "/results"} in c["volumeMounts"] for c in pod["containers"]
        )

    # 409 → GET; list; watch from the list's resourceVersion; the 410 ERROR → list again (Succeeded).
    jobs = "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs"
    calls = [(r.method, r.path, r.watch, r.query.get("resourceVersion")) for r in server.requests
             if "/pods" not in r.path]  # fmt: skip
    assert calls == [
        ("POST", jobs, False, None),
        ("GET", f"{jobs}/{name}", False, None),
        ("GET", jobs, False, None),
        ("GET", jobs, True, "48231"),
        ("GET", jobs, False, None),
    ]
    (watch,) = [r for r in server.requests if r.watch]
    assert watch.query["fieldSelector"] == f"metadata.name={name}"
    assert 1 <= int(watch.query["timeoutSeconds"]) <= 30
    pods = server.received("GET", "/api/v1/namespaces/bench/pods")
    assert pods and all(r.query["labelSelector"] == f"training.kubeflow.org/job-name={name}" for r in pods)

    # A second try of the step finds launch.json and asks the cluster nothing.
    seen = len(server.requests)
    assert launch(storage, server) == doc
    assert len(server.requests) == seen


def test_error_event_without_message_and_closed_streams_are_survived(
    tmp_path: Path, server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}` event, then a
    stream the server closes at once: both end in a new list (after a short pause), and the run
    still completes."""
    monkeypatch.setattr(launch_module, "RETRY_MIN_S", 0.05)
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 1)
    rec = recording("watch-expired.json", name, rep=1)
    bare = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    running = rec["watch"][0]["object"]
    server.script = Script(
        lists=[listing(running, version="48260"), listing(running, version="48300"), *rec["lists"][1:]],
        watches=[[rec["watch"][0], bare], []],
        pods=lambda job: rec["pods"] if job is not None and finished(job) else rec["pods_running"],
    )
    doc = launch(storage, server, rep=1)
    assert (doc.status, doc.reason) == ("succeeded", "PyTorchJobSucceeded")
    versions = [r.query.get("resourceVersion") for r in server.requests if r.watch]
    assert versions == ["48260", "48300"]


def test_failed_job_names_the_failing_replica_with_its_log_tail(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH_2)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("pytorchjob-failed-worker.json", name)
    server.script = Script(lists=[listing(rec["job"])], pods=lambda job: rec["pods"],
                           logs={f"{name}-worker-1": rec["log"], f"{name}-master-0": "master log\n"})  # fmt: skip
    doc = launch(storage, server)

    assert (doc.status, doc.reason) == ("failed", "PyTorchJobFailed")
    assert doc.failure is not None
    assert doc.failure.replica == "Worker-1"
    assert (
        doc.failure.message
        == doc.message
        == (
            f"PyTorchJob bench/{name} has failed because 1 Worker replica(s) failed. "
            f"Worker-1 ({name}-worker-1): Error, exit code 1."
        )
    )
    tail = doc.failure.log_tail.splitlines()
    assert len(tail) == 50
    assert tail[-1].startswith(
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed"
    )
    # The failing container's tail first, then each replica without a record read once (bounded) for a
    # record it printed because storing failed (kaliper.execution.recorder: the same rule as locally).
    tail_read, *whole = server.received("GET", "/log")
    assert tail_read.path == f"/api/v1/namespaces/bench/pods/{name}-worker-1/log"
    assert (tail_read.query["container"], tail_read.query["tailLines"]) == ("pytorch", "50")
    assert sorted(r.path.rsplit("/", 2)[-2] for r in whole) == [
        f"{name}-{r}" for r in ("master-0", "worker-0", "worker-1")
    ]
    assert all(r.query.get("limitBytes") == str(MAX_LOG_BYTES) for r in whole)
    assert not any(r.watch for r in server.requests)  # already Failed when first listed
    assert (
        doc.phases["finished"] is not None
        and doc.phases["finished"].isoformat() == "2025-03-04T10:00:31+00:00"
    )
    assert storage.exists(layout.launch_key(EXP, "t000", 0))
    # Stand-in records, made as the local executor makes them (kaliper.results.protocol): one per replica
    # that stored none, saying why; the failing replica's carries its log tail.
    stand_ins = {
        rtype: load_record(storage.get(key), key)
        for rtype, key in (
            ("Master", layout.record_key(EXP, "t000", 0, "Master", 0)),
            ("Worker", layout.record_key(EXP, "t000", 0, "Worker", 1)),
            ("Worker-0", layout.record_key(EXP, "t000", 0, "Worker", 0)),
        )
    }
    for record in stand_ins.values():
        assert (record.status, record.recorded_by) == ("failed", "launcher")
        assert record.error is not None and record.error.startswith("PyTorchJobFailed: PyTorchJob bench/")
        assert record.ids.experiment == EXP and record.samples is None and not record.metrics
    assert "--- log tail ---" in (stand_ins["Worker"].error or "")
    assert "--- log tail ---" not in (stand_ins["Master"].error or "")
    assert (stand_ins["Worker"].ids.replica_type, stand_ins["Worker"].ids.replica_index) == ("Worker", 1)


def test_unreadable_log_does_not_fail_the_step(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, TENSORFLOW)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("tfjob-failed-oomkilled.json", name)
    server.script = Script(lists=[listing(rec["job"])], pods=lambda job: rec["pods"])  # no logs: 404
    doc = launch(storage, server)
    assert doc.failure is not None
    assert (doc.failure.replica, doc.failure.reason) == ("Worker-1", "TFJobFailed")
    assert doc.message.endswith(f"Worker-1 ({name}-worker-1): OOMKilled, exit code 137.")
    assert doc.failure.log_tail.startswith("(log unavailable: ") and "404" in doc.failure.log_tail
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/tfjobs")
    assert "volumes" not in create.body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]


def test_deadline_exceeded_is_recorded_without_a_culprit(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("pytorchjob-deadline-exceeded.json", name)
    server.script = Script(lists=[listing(rec["job"])], pods=lambda job: rec["pods_after_cleanup"])
    doc = launch(storage, server)
    assert (doc.status, doc.reason) == ("failed", "DeadlineExceeded")
    assert doc.failure is not None and doc.failure.replica is None and doc.failure.log_tail == ""
    assert {r.reason for r in doc.replicas} == {"PodNotFound"}
    assert doc.message == (
        f"Job {name} has failed because it was active longer than specified deadline. "
        "Not started: Master-0: no pod seen; Worker-0: no pod seen."
    )
    assert not server.received("GET", "/log")


def test_timeout_records_launch_timeout_and_deletes_nothing(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("watch-expired.json", name)
    server.script = Script(lists=[listing(rec["watch"][0]["object"])], pods=lambda job: rec["pods_running"])
    started = time.monotonic()
    doc = launch(storage, server, timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert (doc.status, doc.reason) == ("failed", "LaunchTimeout")
    assert doc.message.startswith(f"PyTorchJob bench/{name} reached neither Succeeded nor Failed within 1s")
    assert "last condition: Running" in doc.message
    assert doc.phases["finished"] is None and doc.phases["running"] is not None
    assert doc.failure is not None and doc.failure.replica is None
    assert {r.method for r in server.requests} == {"POST", "GET"}  # nothing deleted
    assert storage.get_json(layout.launch_key(EXP, "t000", 0))["reason"] == "LaunchTimeout"


def test_a_foreign_job_with_our_name_is_refused(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("watch-expired.json", name)
    foreign = rec["existing"]
    foreign["metadata"]["labels"]["kaliper.dev/trial"] = "t007"
    server.script = Script(create=(409, rec["create_conflict"]), existing=foreign, lists=[listing(foreign)])
    with pytest.raises(ExecutionError, match=f"PyTorchJob {name} already exists in namespace bench.*t007"):
        launch(storage, server)
    assert not storage.exists(layout.launch_key(EXP, "t000", 0))


def test_api_refusal_names_the_job_and_namespace(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    message = (
        'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:bench:default" cannot create '
        'resource "pytorchjobs" in API group "kubeflow.org" in the namespace "bench"'
    )
    server.script = Script(create=(403, status(403, "Forbidden", message)))
    with pytest.raises(ExecutionError) as raised:
        launch(storage, server)
    text = str(raised.value)
    assert text.startswith(f"creating PyTorchJob {name} in namespace bench: 403 Forbidden: ")
    assert "cannot create resource" in text
    assert not storage.exists(layout.launch_key(EXP, "t000", 0))


def test_credentials_from_kubeconfig_outside_a_cluster(
    tmp_path: Path, server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_kubeconfig(tmp_path, server.url, monkeypatch)
    server.script = Script(lists=[listing(version="777")])
    assert JobApi.from_environment().list_job("bench", "pytorchjobs", "nothing") == (None, "777")
    assert server.requests[-1].authorization == "Bearer t0ken"


def test_the_kfp_launch_step_makes_its_own_pod_the_jobs_owner(
    tmp_path: Path, server: ApiServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`kaliper step launch` as the KFP pipeline runs it: no --workflow-uid (KFP has none), its pod's name,
    uid and namespace in the env (the downward API, kaliper.workflows.kfp): the job is created with that
    pod as its owner, so the garbage collector deletes it with the run's pods."""
    storage = write_experiment(tmp_path, PYTORCH)
    name = job_name("ddp-t000", WF, EXP, "t000", 0)
    rec = recording("watch-expired.json", name)
    server.script = Script(lists=rec["lists"][1:], pods=lambda job: rec["pods"])
    use_kubeconfig(tmp_path, server.url, monkeypatch)
    pod, uid = "kaliper-ddp-8xk2p-system-container-impl-2718281828", "9b2c7e10-4f3a-4d5e-8a6b-7c8d9e0f1a2b"
    monkeypatch.setenv("KALIPER_POD_NAME", pod)
    monkeypatch.setenv("KALIPER_POD_UID", uid)
    monkeypatch.setenv("KALIPER_POD_NAMESPACE", "bench")
    digest = hashlib.sha256(storage.get(layout.job_key(EXP, "t000"))).hexdigest()

    def step_launch(rep: int) -> subprocess.CompletedProcess[str]:
        return in_process("step", "launch", "--spec-text", SPEC.format(**PYTORCH), "--storage", storage.url,
                          "--experiment", EXP, "--trial", "t000", "--repetition", str(rep), "--job-sha256",
                          digest, "--workflow-name", WF, "--timeout", "30", cwd=tmp_path)  # fmt: skip

    done = step_launch(0)
    assert done.returncode == 0, done.stderr
    assert f"job: {name}: succeeded" in done.stdout
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")
    assert create.body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": pod,
        "uid": uid, "controller": False, "blockOwnerDeletion": False}]  # fmt: skip
    assert create.authorization == "Bearer t0ken"

    # The launch pod in another namespace than the job's: no owner (the garbage collector would take it
    # as absent and delete the job at once), and the step says that the job will stay.
    monkeypatch.setenv("KALIPER_POD_NAMESPACE", "kubeflow-user")
    server.script = Script(lists=[listing()])  # the job is gone at once; only the create matters here
    step_launch(1)
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")[1:]
    assert create.body["metadata"]["name"] == job_name("ddp-t000", WF, EXP, "t000", 1)
    assert "ownerReferences" not in create.body["metadata"]
    assert "an owner must be in its dependent's namespace" in caplog.text


def test_an_argo_workflow_in_another_namespace_than_the_job_is_not_its_owner(
    tmp_path: Path, server: ApiServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`kaliper step launch` as Argo runs it, the spec's `job.namespace: bench`, the Workflow submitted into
    `argo` (`{{workflow.namespace}}`, passed as --workflow-namespace): the job is created without an owner
    (the garbage collector would delete it at once), with a warning; in the Workflow's own namespace the
    Workflow owns it."""
    storage = write_experiment(tmp_path, PYTORCH)
    use_kubeconfig(tmp_path, server.url, monkeypatch)
    server.script = Script(lists=[listing()])  # the job is gone at once; only the create matters here
    digest = hashlib.sha256(storage.get(layout.job_key(EXP, "t000"))).hexdigest()

    def step_launch(rep: int, namespace: str) -> None:
        in_process("step", "launch", "--spec-text", SPEC.format(**PYTORCH), "--storage", storage.url,
                   "--experiment", EXP, "--trial", "t000", "--repetition", str(rep), "--job-sha256", digest,
                   "--workflow-name", WF, "--timeout", "30", "--workflow-uid", WFUID,
                   "--workflow-namespace", namespace, cwd=tmp_path)  # fmt: skip

    step_launch(0, "argo")
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")
    assert "ownerReferences" not in create.body["metadata"]
    assert f"the job goes to namespace bench, its Workflow {WF} is in argo" in caplog.text
    step_launch(1, "bench")
    (create,) = server.received("POST", "/apis/kubeflow.org/v1/namespaces/bench/pytorchjobs")[1:]
    assert [(o["kind"], o["uid"]) for o in create.body["metadata"]["ownerReferences"]] == [
        ("Workflow", WFUID)
    ]


def test_no_credentials_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ExecutionError, match="no Kubernetes credentials: not in a pod"):
        JobApi.from_environment()


def _tamper(storage: Storage, edit: Callable[[dict[str, Any]], None]) -> str:
    """Rewrite t000's job.yaml as a benchmark pod could (it can write to storage); the digest before."""
    key = layout.job_key(EXP, "t000")
    original = storage.get(key)
    manifest = yaml.safe_load(original)
    edit(manifest)
    path = Path(storage.location(key).removeprefix("file://"))
    path.write_text(yaml.safe_dump(manifest))
    return hashlib.sha256(original).hexdigest()


def _host_path(manifest: dict[str, Any]) -> None:
    pod = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]


def test_a_tampered_job_yaml_is_refused_before_anything_is_created(tmp_path: Path, server: ApiServer) -> None:
    storage = write_experiment(tmp_path, PYTORCH)
    digest = _tamper(storage, _host_path)
    server.script = Script(create=(500, status(500, "InternalError", "must not be reached")))
    with pytest.raises(InputError, match=f"sha256: expected {digest}.*job.yaml was changed") as raised:
        launch(storage, server, job_sha256=digest)
    assert raised.value.exit_code == 2
    assert server.received("POST", "") == [] and server.requests == []
    assert not storage.exists(layout.launch_key(EXP, "t000", 0))


def test_launch_rechecks_the_manifest_even_without_a_digest(tmp_path: Path, server: ApiServer) -> None:
    """Defence in depth: no hostPath, no other service account, whatever the digest said."""
    storage = write_experiment(tmp_path, PYTORCH)
    _tamper(storage, _host_path)
    with pytest.raises(
        InputError, match=r"Worker\.template\.spec\.volumes\[0\]\.hostPath: expected no hostPath"
    ):
        launch(storage, server)
    assert server.requests == []
    sa = JobExpectations("PyTorchJob", {"Master": 1, "Worker": 1}, service_account=None)
    _tamper(storage, lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"].update(
        serviceAccountName="cluster-admin", volumes=[]))  # fmt: skip
    with pytest.raises(InputError, match=r"serviceAccountName: expected absent .*found 'cluster-admin'"):
        launch(storage, server, expect=sa)


# ------------------------------------------------------------------ unwrapped images: records from logs

UNWRAPPED = """\
name: own
workload:
  command: [python, train_cnn.py, --batch-size, "{batch_size}", --steps, "30"]
  framework: pytorch
  wrap: false
  params: {batch_size: 8}
  metrics:
    - {name: images_per_s, pattern: '([0-9.]+) images/sec', unit: images/s, better: higher, skip_first: 1}
repetitions: 1
sampling: {target_rel_ci: 0.05, min_samples: 10}
job:
  kind: PyTorchJob
  namespace: bench
  replicas: {Master: 1, Worker: 1}
  image: registry.example.com/ml-team/train-cnn:1.0
  timeout: 10m
"""
DIGEST = "sha256:9b2f4c1d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c"
PRINTED = [512.5, *(800.0 + (i * 7 % 11) * 0.25 for i in range(24))]  # a slow first step, then ~800


def training_log(values: list[float]) -> str:
    """What an unmodified training script prints (stderr lines interleaved, as the kubelet keeps them)."""
    lines = ["Using device cpu", "WARNING: torch.compile is not available"]
    for step, value in enumerate(values, 1):
        lines.append(f"step {step}/{len(values)} | loss 2.30{step} | {value} images/sec | 9.8 ms/step")
    return "\n".join([*lines, "Training finished"]) + "\n"


def unwrapped_run(
    tmp_path: Path, server: ApiServer, master_log: str | None
) -> tuple[Storage, LaunchDoc, str]:
    storage = open_storage("file://" + str(tmp_path / "results"))
    loaded = spec_from_text(UNWRAPPED, "own.yaml", tmp_path)
    write_plan(configure(loaded, experiment_id=EXP, storage_url=storage.url), storage)
    name = job_name("own-t000", WF, EXP, "t000", 0)
    rec = recording("pytorchjob-unwrapped-succeeded.json", name)
    logs = {f"{name}-worker-0": "worker up\n"}
    if master_log is not None:  # None: the API answers 404 (the pod was deleted)
        logs[f"{name}-master-0"] = master_log
    server.script = Script(lists=[listing(rec["job"])], pods=lambda job: rec["pods"], logs=logs)
    return storage, launch(storage, server), name


def test_unwrapped_replicas_get_records_read_from_their_pod_logs(tmp_path: Path, server: ApiServer) -> None:
    storage, doc, name = unwrapped_run(tmp_path, server, training_log(PRINTED))
    assert doc.status == "succeeded"
    key = layout.record_key(EXP, "t000", 0, "Master", 0)
    master = load_record(storage.get(key), key)
    assert (master.ids.experiment, master.ids.trial, master.ids.repetition) == (EXP, "t000", 0)
    assert (master.ids.replica_type, master.ids.replica_index) == ("Master", 0)
    assert (master.status, master.recorded_by, master.error) == ("ok", "launcher", None)
    metric = master.metrics["images_per_s"]
    assert metric.values == PRINTED[1:]  # skip_first: 1
    assert metric.summary.median == statistics.median(PRINTED[1:])
    assert (metric.unit, metric.direction) == ("images/s", "more_is_better")
    assert master.metrics["wall_time"].values == [33.0]  # startedAt 10:00:08 → finishedAt 10:00:41
    assert master.stack.image == "registry.example.com/ml-team/train-cnn:1.0"
    assert master.stack.image_digest == DIGEST
    assert (master.hardware.hostname, master.hardware.arch) == ("gke-bench-pool-a-7f3c", "amd64")
    assert master.hardware.cpu_quota_cores == 1.0 and master.hardware.cpu_model is None
    worker_key = layout.record_key(EXP, "t000", 0, "Worker", 0)
    worker = load_record(storage.get(worker_key), worker_key)
    assert (worker.status, worker.hardware.hostname) == ("ok", "gke-bench-pool-a-2d9e")
    assert "images_per_s" not in worker.metrics  # the metric is read from the primary only

    # Each log read whole (bounded by limitBytes) from the replica's own pod and main container.
    logs = sorted(
        (r.path, r.query["container"], r.query.get("limitBytes")) for r in server.received("GET", "/log")
    )
    assert logs == [
        (f"/api/v1/namespaces/bench/pods/{name}-master-0/log", "pytorch", str(MAX_LOG_BYTES)),
        (f"/api/v1/namespaces/bench/pods/{name}-worker-0/log", "pytorch", str(MAX_LOG_BYTES)),
    ]
    assert all("tailLines" not in r.query for r in server.received("GET", "/log"))
    # launch.json comes last, so a retried step does not read the logs again
    seen = len(server.requests)
    assert launch(storage, server) == doc and len(server.requests) == seen


def test_an_unwrapped_log_without_a_match_gives_a_failed_record_with_the_reason(
    tmp_path: Path, server: ApiServer
) -> None:
    storage, doc, _ = unwrapped_run(tmp_path, server, "Using device cpu\nloss 2.3\nTraining finished\n")
    assert doc.status == "succeeded"  # the job did; the benchmark run did not
    key = layout.record_key(EXP, "t000", 0, "Master", 0)
    master = load_record(storage.get(key), key)
    assert (master.status, master.recorded_by) == ("failed", "launcher")
    assert master.error is not None
    assert master.error.startswith("pattern '([0-9.]+) images/sec' never matched in master-0's output")
    assert '"Training finished"' in master.error  # the last lines the pod printed
    assert master.stack.image_digest == DIGEST


def test_an_unreadable_log_says_so_in_the_record(tmp_path: Path, server: ApiServer) -> None:
    storage, doc, name = unwrapped_run(tmp_path, server, None)
    assert doc.status == "succeeded"
    key = layout.record_key(EXP, "t000", 0, "Master", 0)
    master = load_record(storage.get(key), key)
    assert master.status == "failed" and master.error is not None
    assert f"the log of pod {name}-master-0 is unavailable: " in master.error and "404" in master.error


def test_a_wrapper_record_printed_in_the_log_is_stored_as_printed(tmp_path: Path, server: ApiServer) -> None:
    """A wrapped replica whose storage failed printed its record as a KALIPER_RESULT line: that one wins."""
    storage, _, _ = unwrapped_run(tmp_path, server, "placeholder")
    key = layout.record_key(EXP, "t000", 0, "Master", 0)
    printed = load_record(storage.get(key), key).model_copy(update={"recorded_by": "workload"})
    (tmp_path / "again").mkdir()
    storage2, doc, _ = unwrapped_run(tmp_path / "again", server, result_line(printed.to_json_bytes()))
    again = load_record(storage2.get(key), key)
    assert again.recorded_by == "workload" and again == printed
    assert doc.recovered == {"master-0": "bench/Master-0 log"}  # launch.json says where it came from
