"""`kaliper submit`: the real `kubernetes` client, driven by a kubeconfig, against a loopback HTTP server
that answers like the Kubernetes API (no kube-apiserver can be installed on these machines)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.errors import ClusterError
from kaliper.spec import load_spec, spec_from_text
from kaliper.workflows.argo import workflow_document
from kaliper.workflows.plan import cluster_plan
from kaliper.workflows.submit import submit_workflow
from tests.support.cli import CliRunner
from tests.support.paths import EXAMPLES


class FakeApi:
    """Records requests; answers POSTs of Workflows with the object named as Argo's generateName would."""

    def __init__(self, status: int = 201) -> None:
        self.status = status
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.requests.append(("POST", self.path, copy.deepcopy(body)))
                if api.status == 201:
                    body["metadata"]["name"] = body["metadata"]["generateName"] + "abcde"
                    payload = body
                else:
                    payload = {
                        "kind": "Status",
                        "status": "Failure",
                        "code": api.status,
                        "reason": "Forbidden",
                    }
                data = json.dumps(payload).encode()
                self.send_response(api.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path, namespace: str = "team-a") -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": "t0ken"}}],
                    "contexts": [
                        {"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": namespace}}
                    ],
                    "current-context": "ctx",
                }
            )
        )
        return path


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi()
    yield api
    api.server.shutdown()


def client_for(url: str) -> Any:
    from kubernetes import client

    configuration = client.Configuration(host=url)
    return client.CustomObjectsApi(client.ApiClient(configuration))


def test_submit_creates_the_compiled_workflow(fake_api: FakeApi) -> None:
    loaded = load_spec(EXAMPLES / "nightly-stacks.yaml")
    name, namespace = submit_workflow(loaded, api=client_for(fake_api.url))
    assert (name, namespace) == ("kaliper-nightly-stacks-abcde", "kaliper")  # the spec's job.namespace
    ((method, path, body),) = fake_api.requests
    assert (method, path) == ("POST", "/apis/argoproj.io/v1alpha1/namespaces/kaliper/workflows")
    expected = workflow_document(cluster_plan(loaded), "Workflow")
    assert body == expected


def test_submit_into_another_namespace_drops_the_server_objects_owner(
    fake_api: FakeApi, tmp_path: Path
) -> None:
    """A serving spec with `job.namespace: bench` submitted with -n argo: the server's objects stay in bench
    and do not name the Workflow (in argo) as owner, or the garbage collector would delete them at once."""
    text = (EXAMPLES / "serve-llm-cluster.yaml").read_text()
    text = text.replace("  kind: PyTorchJob\n", "  kind: PyTorchJob\n  namespace: bench\n")
    loaded = spec_from_text(text, str(tmp_path / "spec.yaml"), tmp_path)
    submit_workflow(loaded, namespace="argo", api=client_for(fake_api.url))
    ((_, path, body),) = fake_api.requests
    assert path == "/apis/argoproj.io/v1alpha1/namespaces/argo/workflows"
    creates = [
        t["resource"] for t in body["spec"]["templates"] if t.get("resource", {}).get("action") == "create"
    ]
    assert len(creates) == 2
    for resource in creates:
        metadata = yaml.safe_load(resource["manifest"])["metadata"]
        assert metadata["namespace"] == "bench" and "ownerReferences" not in metadata
    submit_workflow(loaded, api=client_for(fake_api.url))  # into the spec's namespace: owned
    body = fake_api.requests[-1][2]
    for template in body["spec"]["templates"]:
        if template.get("resource", {}).get("action") == "create":
            assert "ownerReferences" in yaml.safe_load(template["resource"]["manifest"])["metadata"]


def test_submit_cli_uses_the_kubeconfig_namespace(
    fake_api: FakeApi, kaliper: CliRunner, tmp_path: Path
) -> None:
    config = fake_api.kubeconfig(tmp_path / "kubeconfig")
    out = kaliper("submit", str(EXAMPLES / "quickstart.yaml"), env={"KUBECONFIG": str(config)})
    assert out.returncode == 0, out.stderr
    assert "workflow: kaliper-quickstart-abcde" in out.stdout
    assert "argo -n team-a watch kaliper-quickstart-abcde" in out.stdout
    ((_, path, body),) = fake_api.requests
    assert path == "/apis/argoproj.io/v1alpha1/namespaces/team-a/workflows"
    assert body["metadata"]["namespace"] == "team-a"
    override = kaliper(
        "submit", str(EXAMPLES / "quickstart.yaml"), "-n", "bench", env={"KUBECONFIG": str(config)}
    )
    assert override.returncode == 0, override.stderr
    assert fake_api.requests[-1][1] == "/apis/argoproj.io/v1alpha1/namespaces/bench/workflows"


def test_submit_says_why_the_api_refused(tmp_path: Path) -> None:
    api = FakeApi(status=403)
    try:
        with pytest.raises(
            ClusterError, match="HTTP 403: you may not create workflows in namespace 'default'"
        ):
            submit_workflow(load_spec(EXAMPLES / "quickstart.yaml"), api=client_for(api.url))
    finally:
        api.server.shutdown()


def test_submit_refuses_a_bad_spec_before_calling_the_api(
    fake_api: FakeApi, kaliper: CliRunner, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad_Name\nworkload: {name: pi-matmul}\n")
    config = fake_api.kubeconfig(tmp_path / "kubeconfig")
    out = kaliper("submit", str(bad), env={"KUBECONFIG": str(config)})
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert fake_api.requests == []


def test_submit_without_a_kubeconfig_is_a_clear_error(kaliper: CliRunner, tmp_path: Path) -> None:
    out = kaliper(
        "submit",
        str(EXAMPLES / "quickstart.yaml"),
        env={"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)},
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error: no usable kubeconfig")
