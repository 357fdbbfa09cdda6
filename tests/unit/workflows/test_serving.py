"""A serving spec (`server:`) on a cluster: the compiled workflow's shape (create, wait, load generator,
teardown in the exit handler), the server's objects against the upstream schemas (Kubernetes v1.31,
KServe v0.15.0), the URL the load generator gets on each path, and least-privilege RBAC for the new kinds."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from kaliper.configurator import configure
from kaliper.configurator.server_objects import server_objects
from kaliper.errors import SpecError
from kaliper.jobs.objects import owner_reference
from kaliper.spec import LoadedSpec, load_spec, spec_from_text
from kaliper.workflows.argo import workflow_document
from kaliper.workflows.compile import compile_spec
from kaliper.workflows.plan import cluster_plan
from kaliper.workflows.serving import RBAC_RULES, SERVICE_ACCOUNTS
from tests.support.k8s_schemas import argo_problems, kserve_problems, kubernetes_problems
from tests.support.paths import EXAMPLES, REPO

EXAMPLE = EXAMPLES / "serve-llm-cluster.yaml"
EXPERIMENT = "serve-llm-cluster-20260101T000000Z-abcd"
SUBSTITUTIONS = {
    "{{inputs.parameters.experiment}}": EXPERIMENT,
    "{{workflow.name}}": "kaliper-serve-llm-cluster-x7k2p",
    "{{workflow.uid}}": "6f1c2a3e-0000-4000-8000-000000000000",
}


OWNER = owner_reference("w", "6f1c2a3e-0000-4000-8000-000000000000")


def _spec(tmp_path: Path, text: str) -> LoadedSpec:
    return spec_from_text(text, str(tmp_path / "spec.yaml"), tmp_path)


def _kserve_text() -> str:
    return EXAMPLE.read_text().replace("  kind: deployment\n", "  kind: kserve\n")


def templates(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in document["spec"]["templates"]}


def created_objects(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifests of the workflow's `create` resource templates, as Argo sends them at run time."""
    found = []
    for template in document["spec"]["templates"]:
        resource = template.get("resource")
        if resource and resource["action"] == "create":
            text = resource["manifest"]
            for placeholder, value in SUBSTITUTIONS.items():
                text = text.replace(placeholder, value)
            found.append(yaml.safe_load(text))
    return found


# --- the workflow's shape ------------------------------------------------------------------------


def test_workflow_creates_waits_runs_the_load_generator_and_deletes_on_exit() -> None:
    document = workflow_document(cluster_plan(load_spec(EXAMPLE)), "WorkflowTemplate")
    spec = document["spec"]
    by_name = templates(document)
    (configure_step,), create, (ready,), (launch,) = by_name["main"]["steps"]
    assert configure_step["template"] == "configure"
    assert {s["template"] for s in create} == {"server-create-deployment", "server-create-service"}
    for step in create:  # labelled with the experiment the configure step made
        (argument,) = step["arguments"]["parameters"]
        assert argument == {
            "name": "experiment",
            "value": "{{steps.configure.outputs.parameters.experiment}}",
        }
    assert ready["template"] == "server-ready"
    assert launch["template"] == "launch"
    # the exit handler deletes every object it created, beside the report, whatever happened
    assert spec["onExit"] == "exit"
    (exit_group,) = by_name["exit"]["steps"]
    assert {s["template"] for s in exit_group} == {
        "server-delete-deployment",
        "server-delete-service",
        "report",
    }
    for kind in ("deployment", "service"):
        resource = by_name[f"server-delete-{kind}"]["resource"]
        assert resource["action"] == "delete" and resource["flags"] == ["--ignore-not-found"]
        assert yaml.safe_load(resource["manifest"])["metadata"] == {
            "name": "kaliper-serve-llm-cluster-server"
        }
        assert by_name[f"server-create-{kind}"]["resource"]["action"] == "create"
    # the wait: Kaliper's step, as an argv list, with the spec's deadline
    container = by_name["server-ready"]["container"]
    assert container["command"] + container["args"] == [
        "kaliper", "step", "server-ready", "--kind", "deployment", "--name", "kaliper-serve-llm-cluster-server",
        "--namespace", "{{workflow.namespace}}", "--replicas", "1", "--timeout", "300",
    ]  # fmt: skip
    assert by_name["server-ready"]["timeout"] == "600s"
    # one run of the spec at a time (one server name per spec), under the serving account
    assert spec["synchronization"] == {"mutexes": [{"name": "kaliper-serve-llm-cluster-server"}]}
    assert spec["serviceAccountName"] == "kaliper-serving"


def test_a_training_spec_compiles_as_before() -> None:
    document = workflow_document(cluster_plan(load_spec(EXAMPLES / "quickstart.yaml")), "WorkflowTemplate")
    spec = document["spec"]
    assert spec["onExit"] == "report" and spec["serviceAccountName"] == "kaliper"
    assert "synchronization" not in spec
    assert not [t for t in spec["templates"] if "resource" in t or t["name"].startswith("server")]


@pytest.mark.parametrize("target", ["workflow", "workflowtemplate"])
def test_serving_workflows_pass_the_argo_schema(target: str, schemas_dir: Path, tmp_path: Path) -> None:
    for loaded in (load_spec(EXAMPLE), _spec(tmp_path, _kserve_text())):
        document = yaml.safe_load(compile_spec(loaded, target))  # type: ignore[arg-type]
        assert argo_problems(document, schemas_dir) == []


def test_kfp_pipeline_creates_waits_launches_and_deletes_in_its_exit_task() -> None:
    """KFP: configure → server-create → server-ready → the launches, inside the one ExitHandler whose exit
    task (the report) deletes the server first; server-create runs with its pod's name, uid and namespace
    (the server's owner) and, as server-ready, without storage (no PVC, no S3 settings)."""
    ir, platform = list(yaml.safe_load_all(compile_spec(load_spec(EXAMPLE), "kfp")))
    (handler,) = [c for name, c in ir["components"].items() if name.startswith("comp-exit-handler")]
    tasks = handler["dag"]["tasks"]
    assert tasks["server-create"]["dependentTasks"] == ["configure"]
    assert tasks["server-create"]["inputs"]["parameters"]["experiment"] == {
        "taskOutputParameter": {"outputParameterKey": "experiment", "producerTask": "configure"}
    }
    assert tasks["server-ready"]["dependentTasks"] == ["server-create"]
    (loop,) = [t for name, t in tasks.items() if name.startswith("for-loop")]
    assert "server-ready" in loop["dependentTasks"]
    root = ir["root"]["dag"]["tasks"]
    assert root["report"]["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    executors = ir["deploymentSpec"]["executors"]
    report = executors["exec-report"]["container"]
    assert report["args"][-4:] == [
        "--server-kind",
        "deployment",
        "--server-name",
        "kaliper-serve-llm-cluster-server",
    ]
    ready = executors["exec-server-ready"]["container"]
    assert ready["command"] + ready["args"] == [
        "kaliper",
        "step",
        "server-ready",
        "--kind",
        "deployment",
        "--name",
        "kaliper-serve-llm-cluster-server",
        "--replicas",
        "1",
        "--timeout",
        "300",
    ]  # fmt: skip  (no --namespace: the step's pod's, the run's)
    assert executors["exec-server-create"]["container"]["command"] == ["kaliper", "step", "server-create"]
    settings = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    fields = [e["fieldPath"] for e in settings["exec-server-create"]["fieldPathAsEnv"]]
    assert fields == ["metadata.name", "metadata.uid", "metadata.namespace"]
    for name in ("exec-server-create", "exec-server-ready"):
        assert "pvcMount" not in settings[name] and "secretAsEnv" not in settings[name]
    assert settings["exec-server-ready"]["activeDeadlineSeconds"] == "600"


# --- the server's objects against the upstream schemas --------------------------------------------


def test_deployment_and_service_pass_the_kubernetes_schema(schemas_dir: Path) -> None:
    document = workflow_document(cluster_plan(load_spec(EXAMPLE)), "WorkflowTemplate")
    deployment, service = created_objects(document)
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    for obj in (deployment, service):
        assert kubernetes_problems(obj, schemas_dir) == [], obj["kind"]
        assert obj["metadata"]["labels"]["kaliper.dev/experiment"] == EXPERIMENT
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["kind"] == "Workflow" and owner["blockOwnerDeletion"] is False
    # the Service selects the Deployment's pods and reaches their named port
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    (container,) = pod["spec"]["containers"]
    assert container["ports"][0]["name"] == service["spec"]["ports"][0]["targetPort"] == "http"
    assert container["command"] == ["python", "-m", "kaliper.benchmarks.serve.demo_server"]
    assert container["args"] == ["--port", "18080", "--model", "transformer", "--host", "0.0.0.0"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 18080}
    assert (
        container["resources"]["requests"]
        == container["resources"]["limits"]
        == {"cpu": "2", "memory": "4Gi"}
    )
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_server_objects_in_another_namespace_than_the_workflow_have_no_owner(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`job.namespace: bench`, the Workflow made in `argo` (`kaliper submit -n argo`): the objects still go to
    bench (the load generator's URL names it), without the Workflow as owner (the garbage collector would
    take it as absent there and delete them at once), and compiling says so. The exit handler still deletes
    them. In the spec's own namespace, or with no namespace (the objects follow the Workflow), it owns them."""
    text = EXAMPLE.read_text().replace("  kind: PyTorchJob\n", "  kind: PyTorchJob\n  namespace: bench\n")
    plan = cluster_plan(_spec(tmp_path, text))
    elsewhere = workflow_document(plan, "Workflow", namespace="argo")
    assert elsewhere["metadata"]["namespace"] == "argo"
    for obj in created_objects(elsewhere):
        assert obj["metadata"]["namespace"] == "bench" and "ownerReferences" not in obj["metadata"]
    assert "the server goes to namespace bench, its Workflow {{workflow.name}} is in argo" in caplog.text
    deletes = [
        t["resource"]
        for t in elsewhere["spec"]["templates"]
        if t.get("resource", {}).get("action") == "delete"
    ]
    assert [yaml.safe_load(r["manifest"])["metadata"]["namespace"] for r in deletes] == ["bench", "bench"]
    for document in (
        workflow_document(plan, "Workflow", namespace="bench"),
        workflow_document(cluster_plan(load_spec(EXAMPLE)), "Workflow", namespace="argo"),
    ):
        for obj in created_objects(document):
            assert [o["kind"] for o in obj["metadata"]["ownerReferences"]] == ["Workflow"]


def test_inference_service_passes_kserves_crd(schemas_dir: Path, tmp_path: Path) -> None:
    plan = cluster_plan(_spec(tmp_path, _kserve_text()))
    document = workflow_document(plan, "WorkflowTemplate")
    (isvc,) = created_objects(document)
    assert kserve_problems(isvc, schemas_dir) == []
    predictor = isvc["spec"]["predictor"]
    assert predictor["containers"][0]["name"] == "kserve-container"
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 1
    assert document["spec"]["serviceAccountName"] == "kaliper-serving-kserve"
    exit_steps = {s["template"] for s in templates(document)["exit"]["steps"][0]}
    assert exit_steps == {"server-delete-inferenceservice", "report"}


def test_the_schema_checks_catch_wrong_objects(schemas_dir: Path, tmp_path: Path) -> None:
    server = load_spec(EXAMPLE).spec.server
    assert server is not None
    deployment, service = server_objects(server, "s", None, "e", OWNER)
    deployment["spec"]["replicas"] = "1"
    deployment["spec"]["template"]["spec"]["containers"][0]["portz"] = []
    del service["spec"]["ports"][0]["port"]
    assert len(kubernetes_problems(deployment, schemas_dir)) == 2
    assert kubernetes_problems(service, schemas_dir) == ["spec.ports.0: 'port' is a required property"]
    (isvc,) = server_objects(server.model_copy(update={"kind": "kserve"}), "s", None, "e", OWNER)
    isvc["spec"]["predictor"]["minReplica"] = 1
    assert kserve_problems(isvc, schemas_dir) == ["spec.predictor.minReplica: unknown field, would be pruned"]


def test_secrets_reach_the_server_as_references_only(tmp_path: Path, schemas_dir: Path) -> None:
    text = EXAMPLE.read_text().replace(
        '  env: {OMP_NUM_THREADS: "1"}\n',
        '  env: {OMP_NUM_THREADS: "1"}\n  secret_env: {HF_TOKEN: {secret: hf-credentials, key: token}}\n',
    )
    document = workflow_document(cluster_plan(_spec(tmp_path, text)), "WorkflowTemplate")
    deployment, _ = created_objects(document)
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[-1] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-credentials", "key": "token"}},
    }
    assert kubernetes_problems(deployment, schemas_dir) == []


# --- one spec, two paths -------------------------------------------------------------------------


def test_the_load_generator_targets_the_service_on_a_cluster_and_a_process_locally() -> None:
    loaded = load_spec(EXAMPLE)
    (cluster,) = configure(loaded, "e", "file:///x", dump=False, server_at="cluster").trials
    # the jobs run in the workflow's namespace (no job.namespace): the Service's short name resolves there
    assert cluster.doc.params["url"] == "http://kaliper-serve-llm-cluster-server:18080/v1/completions"
    assert cluster.doc.params["command"] == "" and cluster.doc.params["ready_url"] == ""
    (local,) = configure(loaded, "e", "file:///x", dump=False).trials
    assert local.doc.params["url"] == "http://127.0.0.1:18080/v1/completions"
    assert shlex.split(str(local.doc.params["command"])) == [
        "env",
        "OMP_NUM_THREADS=1",
        "python",
        "-m",
        "kaliper.benchmarks.serve.demo_server",
        "--port",
        "18080",
        "--model",
        "transformer",
    ]  # fmt: skip  (no cluster_args: locally the server stays on 127.0.0.1)
    assert local.doc.params["ready_url"] == "http://127.0.0.1:18080/health"
    assert local.doc.params["startup_deadline"] == "300s"


def test_kserve_url_is_the_predictor_service(tmp_path: Path) -> None:
    text = _kserve_text().replace("  kind: PyTorchJob\n", "  kind: PyTorchJob\n  namespace: bench\n")
    (trial,) = configure(_spec(tmp_path, text), "e", "file:///x", dump=False, server_at="cluster").trials
    assert (
        trial.doc.params["url"]
        == "http://kaliper-serve-llm-cluster-server-predictor.bench.svc/v1/completions"
    )
    (isvc,) = server_objects(_spec(tmp_path, text).spec.server, "s", "bench", "e", OWNER)  # type: ignore[arg-type]
    assert isvc["metadata"]["namespace"] == "bench"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("    sut: http\n", "    sut: http\n    url: http://x:1/v1/completions\n"),
            "server: decides the serve parameter url",
        ),
        (("    sut: http\n", "    sut: builtin-cnn\n"), "needs workload.name serve with params.sut http"),
        (("kaliper-pytorch:0.1.0\n  command", "kaliper-pytorch:latest\n  command"), "server.image"),
        (("  port: 18080\n", "  port: 0\n"), "server.port"),
        (("  env: {OMP", "  env: {1BAD: x, OMP"), "server.env"),
        (("  kind: deployment\n", "  kind: statefulset\n"), "server.kind"),
    ],
)
def test_bad_server_sections_are_refused_naming_the_field(
    change: tuple[str, str], message: str, tmp_path: Path
) -> None:
    text = EXAMPLE.read_text()
    assert change[0] in text
    with pytest.raises(SpecError, match=message):
        _spec(tmp_path, text.replace(change[0], change[1], 1))


# --- RBAC ----------------------------------------------------------------------------------------


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _grants(rules: list[dict[str, list[str]]]) -> set[tuple[str, str, str]]:
    return _rules({"rules": rules})


def test_serving_roles_grant_exactly_what_the_server_steps_need() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "manifests/serving/roles.yaml").read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs}
    assert _rules(roles["kaliper-serving"]) == _grants(RBAC_RULES["deployment"])
    assert _rules(roles["kaliper-serving-kserve"]) == _grants(RBAC_RULES["kserve"])
    # nothing beyond create/get/delete of the server's own kinds
    assert {v for _, _, v in _rules(roles["kaliper-serving"]) | _rules(roles["kaliper-serving-kserve"])} == {
        "create", "get", "delete",
    }  # fmt: skip
    bindings = [
        d for d in yaml.safe_load_all((REPO / "manifests/serving/rolebindings.yaml").read_text()) if d
    ]
    bound = {(b["subjects"][0]["name"], b["roleRef"]["name"]) for b in bindings}
    assert bound == {
        ("kaliper-serving", "kaliper"),
        ("kaliper-serving", "kaliper-serving"),
        ("kaliper-serving-kserve", "kaliper"),
        ("kaliper-serving-kserve", "kaliper-serving-kserve"),
    }
    accounts = [
        d for d in yaml.safe_load_all((REPO / "manifests/serving/serviceaccounts.yaml").read_text()) if d
    ]
    assert sorted(a["metadata"]["name"] for a in accounts) == sorted(SERVICE_ACCOUNTS.values())


def test_the_training_role_gains_nothing() -> None:
    base = yaml.safe_load((REPO / "manifests/base/role.yaml").read_text())
    groups = {g for rule in base["rules"] for g in rule["apiGroups"]}
    assert not groups & {"apps", "serving.kserve.io"}
    assert not any(
        "services" in rule["resources"] or "deployments" in rule["resources"] for rule in base["rules"]
    )


def test_a_named_service_account_is_kept(tmp_path: Path) -> None:
    text = EXAMPLE.read_text() + "workflow: {service_account: my-serving}\n"
    assert cluster_plan(_spec(tmp_path, text)).service_account == "my-serving"


def test_the_configure_step_gives_the_load_generator_the_service_url(tmp_path: Path) -> None:
    """What the workflow's configure pod stores: the trial's job runs the load generator against the
    Service, and starts no server of its own."""
    import json

    from kaliper.steps.configure import configure_step

    done = configure_step(
        EXAMPLE.read_text(),
        f"file://{tmp_path}/results",
        "kaliper-serve-llm-cluster-x7k2p",
        "2026-01-01T00:00:00Z",
        tmp_path / "runs.json",
        tmp_path / "experiment",
    )
    trial = tmp_path / "results" / "experiments" / done.experiment / "trials" / "t000"
    params = json.loads((trial / "trial.json").read_text())["params"]
    assert params["url"] == "http://kaliper-serve-llm-cluster-server:18080/v1/completions"
    assert params["command"] == ""
    assert "kaliper-serve-llm-cluster-server:18080" in (trial / "job.yaml").read_text()
