"""A serving spec's server under KFP: `kaliper step server-create` and the report step's teardown, through
the real `kubernetes` client against a loopback HTTP server that keeps objects as the API server does
(create → 201 or 409 AlreadyExists, get → 200 or 404, delete with a uid precondition → 200, 404 or 409),
and records every request. What the step POSTs is validated against the Kubernetes v1.31 OpenAPI and
KServe's CRD; the teardown's DELETEs are what the API saw.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator.server_objects import LABEL_SERVER
from kaliper.jobs.kubeflow import LABEL_EXPERIMENT
from tests.support.cli import in_process
from tests.support.k8s_schemas import kserve_problems, kubernetes_problems
from tests.support.kubeconfig import use_kubeconfig
from tests.support.paths import EXAMPLES

NAME = "kaliper-serve-llm-cluster-server"
EXPERIMENT = "serve-llm-cluster-20260101T000000Z-abcd"
POD, POD_UID = (
    "kaliper-serve-llm-cluster-x7k2p-system-container-impl-31415",
    "2f0c4e6a-1b3d-4f5a-8c7e-9d0b1a2c3e4f",
)
DEPLOYMENTS = "/apis/apps/v1/namespaces/bench/deployments"
SERVICES = "/api/v1/namespaces/bench/services"
ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/bench/inferenceservices"
WORKFLOW, CREATED = "kaliper-serve-llm-cluster-x7k2p", "2026-01-01T00:00:00Z"


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


class ObjectServer(ThreadingHTTPServer):
    """Objects by path; `fail` maps "METHOD path" to an HTTP status answered instead."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.fail: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def seen(self, method: str) -> list[tuple[str, Any]]:
        return [(path, body) for m, path, body in self.requests if m == method]


class Handler(BaseHTTPRequestHandler):
    server: ObjectServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, document: Any) -> None:
        data = json.dumps(document).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _answer(self, body: Any) -> int | None:
        path = self.path.split("?")[0]
        self.server.requests.append((self.command, path, copy.deepcopy(body)))
        failure = self.server.fail.get(f"{self.command} {path}")
        if failure is not None:
            self._send(failure, status(failure, "InternalError", "scripted failure"))
        return failure

    def do_POST(self) -> None:
        body = self._body()
        if self._answer(body) is not None:
            return
        path = f"{self.path.split('?')[0]}/{body['metadata']['name']}"
        if path in self.server.objects:
            self._send(409, status(409, "AlreadyExists", f'"{body["metadata"]["name"]}" already exists'))
            return
        created = copy.deepcopy(body)
        created["metadata"]["uid"] = str(uuid.uuid4())
        self.server.objects[path] = created
        self._send(201, created)

    def do_GET(self) -> None:
        if self._answer(None) is not None:
            return
        found = self.server.objects.get(self.path.split("?")[0])
        if found is None:
            self._send(404, status(404, "NotFound", "not found"))
        else:
            self._send(200, found)

    def do_DELETE(self) -> None:
        body = self._body()
        if self._answer(body) is not None:
            return
        path = self.path.split("?")[0]
        found = self.server.objects.get(path)
        if found is None:
            self._send(404, status(404, "NotFound", "not found"))
            return
        wanted = ((body or {}).get("preconditions") or {}).get("uid")
        if wanted and wanted != found["metadata"]["uid"]:
            self._send(409, status(409, "Conflict", "Precondition failed: UID in precondition"))
            return
        del self.server.objects[path]
        self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectServer]:
    """The loopback API server, named by a kubeconfig; this pod (the downward API) in namespace bench."""
    server = ObjectServer()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    use_kubeconfig(tmp_path, server.url, monkeypatch)
    monkeypatch.setenv("KALIPER_POD_NAME", POD)
    monkeypatch.setenv("KALIPER_POD_UID", POD_UID)
    monkeypatch.setenv("KALIPER_POD_NAMESPACE", "bench")
    yield server
    server.shutdown()
    server.server_close()


def spec_text(kind: str = "deployment") -> str:
    text = (EXAMPLES / "serve-llm-cluster.yaml").read_text()
    text = text.replace("  kind: PyTorchJob\n", "  kind: PyTorchJob\n  namespace: bench\n")
    return text.replace("  kind: deployment\n", f"  kind: {kind}\n")


def server_create(tmp_path: Path, text: str, experiment: str = EXPERIMENT) -> Any:
    return in_process("step", "server-create", "--spec-text", text, "--experiment", experiment, cwd=tmp_path)


def test_server_create_posts_valid_objects_owned_by_its_pod(
    tmp_path: Path, api: ObjectServer, schemas_dir: Path
) -> None:
    done = server_create(tmp_path, spec_text())
    assert done.returncode == 0, done.stderr
    (deployment_path, deployment), (service_path, service) = api.seen("POST")
    assert (deployment_path, service_path) == (DEPLOYMENTS, SERVICES)
    pod_owner = {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID, "controller": False,
                 "blockOwnerDeletion": False}  # fmt: skip
    for obj in (deployment, service):
        assert kubernetes_problems(obj, schemas_dir) == [], obj["kind"]
        metadata = obj["metadata"]
        assert (metadata["name"], metadata["namespace"]) == (NAME, "bench")
        assert metadata["labels"][LABEL_EXPERIMENT] == EXPERIMENT and metadata["labels"][LABEL_SERVER] == NAME
        assert metadata["ownerReferences"] == [pod_owner]
    assert deployment["spec"]["template"]["metadata"]["labels"][LABEL_EXPERIMENT] == EXPERIMENT
    assert f"created Deployment bench/{NAME}" in done.stdout

    # a retried step finds its own objects (409) and keeps them
    again = server_create(tmp_path, spec_text())
    assert again.returncode == 0, again.stderr
    assert f"kept Service bench/{NAME}: already created by this run" in again.stdout
    # another run's objects of that name are refused, naming them, never adopted
    other = server_create(tmp_path, spec_text(), "serve-llm-cluster-20260102T000000Z-ef01")
    assert other.returncode == 1
    assert f"Deployment bench/{NAME} already exists and is not this run's" in other.stderr


def test_server_create_of_a_kserve_spec_posts_a_valid_inference_service(
    tmp_path: Path, api: ObjectServer, schemas_dir: Path
) -> None:
    done = server_create(tmp_path, spec_text("kserve"))
    assert done.returncode == 0, done.stderr
    ((path, isvc),) = api.seen("POST")
    assert path == ISVCS
    assert kserve_problems(isvc, schemas_dir) == []
    assert [o["kind"] for o in isvc["metadata"]["ownerReferences"]] == ["Pod"]


def test_a_server_outside_the_pods_namespace_gets_no_owner(
    tmp_path: Path, api: ObjectServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KALIPER_POD_NAMESPACE", "kubeflow-user")
    done = server_create(tmp_path, spec_text())
    assert done.returncode == 0, done.stderr
    assert all("ownerReferences" not in body["metadata"] for _, body in api.seen("POST"))
    assert "the server goes to namespace bench, its pod" in caplog.text


def configured(tmp_path: Path, text: str) -> tuple[list[str], str]:
    """The experiment configured into file storage as the configure step does; the report step's options."""
    common = ["--spec-text", text, "--storage", f"file://{tmp_path / 'results'}", "--workflow-name", WORKFLOW,
              "--workflow-created", CREATED]  # fmt: skip
    out = in_process("step", "configure", *common, "--runs-out", str(tmp_path / "runs.json"),
                     "--experiment-out", str(tmp_path / "exp"), cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return common, (tmp_path / "exp").read_text()


def report(tmp_path: Path, common: list[str], kind: str = "deployment") -> Any:
    teardown = ["--server-kind", kind, "--server-name", NAME, "--server-namespace", "bench"]
    return in_process("step", "report", *common, *teardown, cwd=tmp_path)


def test_the_report_step_deletes_the_server_first(tmp_path: Path, api: ObjectServer) -> None:
    text = spec_text()
    common, experiment = configured(tmp_path, text)
    assert server_create(tmp_path, text, experiment).returncode == 0
    done = report(tmp_path, common)
    assert done.returncode == 0, done.stderr
    deleted = [path for path, _ in api.seen("DELETE")]
    assert deleted == [f"{DEPLOYMENTS}/{NAME}", f"{SERVICES}/{NAME}"]
    assert not api.objects
    for _, body in api.seen("DELETE"):
        assert body["propagationPolicy"] == "Background" and body["preconditions"]["uid"]
    assert "report.md" in done.stdout
    # the exit task retried, or a run that failed before creating them: already gone is no error
    again = report(tmp_path, common)
    assert again.returncode == 0, again.stderr
    assert f"server: Deployment bench/{NAME}: already gone" in again.stdout


def test_the_report_is_written_when_a_delete_fails_and_the_step_fails(
    tmp_path: Path, api: ObjectServer
) -> None:
    text = spec_text("kserve")
    common, experiment = configured(tmp_path, text)
    assert server_create(tmp_path, text, experiment).returncode == 0
    api.fail[f"DELETE {ISVCS}/{NAME}"] = 500
    done = report(tmp_path, common, "kserve")
    assert done.returncode == 1
    assert "report.md" in done.stdout  # written anyway
    assert (tmp_path / "results" / "experiments" / experiment / "report" / "report.md").is_file()
    assert "the report is written, but deleting the server failed" in done.stderr
    assert [path for path, _ in api.seen("DELETE")] == [f"{ISVCS}/{NAME}"]


def test_the_report_step_leaves_another_runs_server(tmp_path: Path, api: ObjectServer) -> None:
    """KFP has no mutex: an object of the server's name labelled with another experiment is not deleted."""
    text = spec_text()
    common, _ = configured(tmp_path, text)
    assert server_create(tmp_path, text, "serve-llm-cluster-20260102T000000Z-ef01").returncode == 0
    done = report(tmp_path, common)
    assert done.returncode == 0, done.stderr
    assert api.seen("DELETE") == [] and len(api.objects) == 2
    assert "kept, it belongs to experiment 'serve-llm-cluster-20260102T000000Z-ef01'" in done.stdout
