"""The KFP v2 pipeline: golden IR per example, valid for the KFP backend (PipelineSpec/PlatformSpec protos),
the same step command lines as plan.py, configure → ParallelFor(launch) inside an exit handler whose exit
task is the report, no caching, safe retries, pod settings, and the same bytes on every compile.

Regenerate the golden files after a deliberate change: KALIPER_REGENERATE=1 pytest tests/unit/workflows/test_kfp_pipeline.py
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp.components import load_component_from_text
from kfp.kubernetes import kubernetes_executor_config_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

from kaliper.spec import S3Spec, load_spec
from kaliper.workflows.chunking import Chunking
from kaliper.workflows.kfp import pipeline_yaml
from kaliper.workflows.plan import (
    EXPERIMENT_OUTPUT,
    RUNS_OUTPUT,
    STEP_RESOURCES,
    ClusterPlan,
    Placeholders,
    cluster_plan,
    configure_argv,
    launch_argv,
    report_argv,
)
from tests.support.paths import EXAMPLES, FIXTURES, GOLDEN, REPO

# protobuf ships no type stubs (it comes with kfp): imported so that mypy does not follow it.
json_format: Any = importlib.import_module("google.protobuf.json_format")
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
GOLDEN_DIR = REPO / "manifests" / "kfp"
REGENERATE = os.environ.get("KALIPER_REGENERATE") == "1"
HOW_TO_REGENERATE = "KALIPER_REGENERATE=1 pytest tests/unit/workflows/test_kfp_pipeline.py"


def _input(name: str) -> str:
    return f"{{{{$.inputs.parameters['{name}']}}}}"


def _output_file(name: str) -> str:
    return f"{{{{$.outputs.parameters['{name}'].output_file}}}}"


# How the components see the run-time values: their own input parameters.
COMPONENT_INPUTS = Placeholders(
    workflow_name=_input("workflow_name"),
    workflow_created=_input("workflow_created"),
    workflow_uid=None,
    spec=_input("spec"),
    storage=_input("storage"),
)


def _plan(path: Path = EXAMPLES / "quickstart.yaml") -> ClusterPlan:
    return cluster_plan(load_spec(path))


def _documents(text: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert 1 <= len(docs) <= 2, (
        f"expected the PipelineSpec and at most a PlatformSpec, found {len(docs)} documents"
    )
    return docs


def _ir(plan: ClusterPlan) -> dict[str, Any]:
    return _documents(pipeline_yaml(plan))[0]


def _platform_executors(plan: ClusterPlan) -> dict[str, Any]:
    docs = _documents(pipeline_yaml(plan))
    assert len(docs) == 2, "no platform spec (kfp-kubernetes settings) in the compiled pipeline"
    executors: dict[str, Any] = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return executors


def _all_tasks(ir: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every task by name, with the name of the DAG (component, or "root") that holds it."""
    dags = {"root": ir["root"]["dag"]}
    dags.update({name: comp["dag"] for name, comp in ir["components"].items() if "dag" in comp})
    tasks: dict[str, tuple[str, dict[str, Any]]] = {}
    for dag_name, dag in dags.items():
        for task_name, task in dag["tasks"].items():
            assert task_name not in tasks, f"task name {task_name} used twice"
            tasks[task_name] = (dag_name, task)
    return tasks


def _executor_of(ir: dict[str, Any], task: dict[str, Any]) -> str:
    label: str = ir["components"][task["componentRef"]["name"]]["executorLabel"]
    return label


def _step_tasks(ir: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    tasks = _all_tasks(ir)
    steps = {name: tasks[name] for name in ("configure", "launch", "report")}
    # No other container task: the steps are the whole pipeline.
    containers = {
        n for n, (_, t) in tasks.items() if "executorLabel" in ir["components"][t["componentRef"]["name"]]
    }
    assert containers == set(steps)
    return steps


# --- golden files -----------------------------------------------------------------------------------


def test_there_are_examples() -> None:
    assert EXAMPLE_FILES


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_compiled_pipeline_matches_golden_file(path: Path) -> None:
    loaded = load_spec(path)
    text = pipeline_yaml(cluster_plan(loaded))
    golden = GOLDEN_DIR / f"{loaded.spec.name}.yaml"
    if REGENERATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        return
    if not golden.exists():
        pytest.fail(f"{golden.relative_to(REPO)} is missing; write it with: {HOW_TO_REGENERATE}")
    assert text == golden.read_text(encoding="utf-8"), (
        f"{golden.relative_to(REPO)} differs from the compiled pipeline; if the change is intended: {HOW_TO_REGENERATE}"
    )


def test_no_golden_file_without_an_example() -> None:
    names = {load_spec(path).spec.name for path in EXAMPLE_FILES}
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.yaml") if p.stem not in names)
    assert not stale, f"golden files of no example spec (delete them): {stale}"


# --- valid for the KFP backend ------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_ir_is_a_valid_pipeline_spec_and_platform_spec(path: Path) -> None:
    plan = _plan(path)
    text = pipeline_yaml(plan)
    docs = _documents(text)
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    assert spec.schema_version == "2.1.0"
    assert spec.pipeline_info.name == plan.template_name == f"kaliper-{plan.spec_name}"
    assert len(docs) == 2
    platform = json_format.ParseDict(docs[1], pipeline_spec_pb2.PlatformSpec(), ignore_unknown_fields=False)
    executors = platform.platforms["kubernetes"].deployment_spec.executors
    # deploymentSpec is a Struct in PipelineSpec; the backend reads it as a PipelineDeploymentConfig.
    deployment = json_format.ParseDict(
        docs[0]["deploymentSpec"], pipeline_spec_pb2.PipelineDeploymentConfig(), ignore_unknown_fields=False
    )
    assert set(executors) == set(deployment.executors)
    for config in executors.values():
        # What the KFP driver reads: each executor's settings must be a KubernetesExecutorConfig.
        json_format.ParseDict(
            json_format.MessageToDict(config),
            kubernetes_executor_config_pb2.KubernetesExecutorConfig(),
            ignore_unknown_fields=False,
        )
    component = load_component_from_text(text)
    assert component.name == plan.template_name
    assert set(component.component_spec.inputs) == {"spec", "storage"}


def test_pipeline_parameters_default_to_the_spec_and_its_storage() -> None:
    plan = _plan()
    ir = _ir(plan)
    params = ir["root"]["inputDefinitions"]["parameters"]
    assert params["spec"]["defaultValue"] == plan.spec_text
    assert params["storage"]["defaultValue"] == plan.storage
    assert ir["pipelineInfo"] == {"name": plan.template_name, "description": plan.description}


# --- the step command lines -----------------------------------------------------------------------------


def test_executors_run_the_step_image_and_command_lines_of_plan_py() -> None:
    plan = _plan()
    ir = _ir(plan)
    steps = _step_tasks(ir)
    containers = {
        name: ir["deploymentSpec"]["executors"][_executor_of(ir, t)]["container"]
        for name, (_, t) in steps.items()
    }
    expected = {
        "configure": [
            {RUNS_OUTPUT: _output_file("runs"), EXPERIMENT_OUTPUT: _output_file("experiment")}.get(a, a)
            for a in configure_argv(COMPONENT_INPUTS)
        ],
        "launch": launch_argv(
            plan,
            COMPONENT_INPUTS,
            _input("experiment"),
            _input("trial"),
            _input("repetition"),
            _input("sha256"),
        ),
        "report": report_argv(COMPONENT_INPUTS),
    }
    for name, container in containers.items():
        assert container["image"] == plan.image
        assert container["command"] == ["kaliper", "step", name]
        assert container["command"] + container["args"] == expected[name]
    # KFP writes configure's outputs where it reads them back, not to the Argo front-end's fixed files.
    assert RUNS_OUTPUT not in containers["configure"]["args"]
    assert "--workflow-uid" not in containers["launch"]["args"]  # KFP: the launch pod owns the jobs


def test_run_time_values_come_from_kfp_placeholders_and_pipeline_parameters() -> None:
    ir = _ir(_plan())
    for name, (_, task) in _step_tasks(ir).items():
        params = task["inputs"]["parameters"]
        # The run's unique Kubernetes name, not its display name (a recurring run repeats that one).
        assert params["workflow_name"] == {"runtimeValue": {"constant": "{{$.pipeline_job_resource_name}}"}}
        if name != "launch":
            assert params["workflow_created"] == {
                "runtimeValue": {"constant": "{{$.pipeline_job_create_time_utc}}"}
            }
            assert params["spec"]["componentInputParameter"].endswith("spec")
        assert params["storage"]["componentInputParameter"].endswith("storage")


# --- shape: fan-out, exit handler -----------------------------------------------------------------------


def test_launch_fans_out_over_configures_runs_with_the_specs_parallelism() -> None:
    plan = dataclasses.replace(_plan(), parallelism=7)
    ir = _ir(plan)
    tasks = _all_tasks(ir)
    configure_dag, _ = tasks["configure"]
    loop_component, launch = tasks["launch"]
    loops = [(name, t) for name, (dag, t) in tasks.items() if t["componentRef"]["name"] == loop_component]
    assert len(loops) == 1, "launch is not inside one ParallelFor group"
    loop_name, loop = loops[0]
    assert tasks[loop_name][0] == configure_dag
    assert loop["iteratorPolicy"] == {"parallelismLimit": 7}
    items = loop["parameterIterator"]["items"]["inputParameter"]
    assert loop["inputs"]["parameters"][items] == {
        "taskOutputParameter": {"outputParameterKey": "runs", "producerTask": "configure"}
    }
    configure_outputs = ir["components"][tasks["configure"][1]["componentRef"]["name"]]["outputDefinitions"]
    assert configure_outputs["parameters"] == {
        "experiment": {"parameterType": "STRING"},
        "runs": {"parameterType": "LIST"},
    }
    # Each run's trial and repetition are fields of the list's items (configure writes
    # [{"trial": "t000", "repetition": 0}, ...]); the experiment is configure's other output.
    item = loop["parameterIterator"]["itemInput"]
    params = launch["inputs"]["parameters"]
    for field in ("trial", "repetition"):
        assert params[field] == {
            "componentInputParameter": item,
            "parameterExpressionSelector": f'parseJson(string_value)["{field}"]',
        }
    assert loop["inputs"]["parameters"][params["experiment"]["componentInputParameter"]] == {
        "taskOutputParameter": {"outputParameterKey": "experiment", "producerTask": "configure"}
    }


def test_report_is_the_exit_task_of_a_group_holding_configure_and_the_runs() -> None:
    ir = _ir(_plan())
    tasks = _all_tasks(ir)
    report_dag, report = tasks["report"]
    assert report_dag == "root"
    assert report["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    (group_name,) = report["dependentTasks"]
    group_dag, group = tasks[group_name]
    assert group_dag == "root"
    assert tasks["configure"][0] == group["componentRef"]["name"]
    assert set(ir["root"]["dag"]["tasks"]) == {group_name, "report"}


# --- task settings ---------------------------------------------------------------------------------------


def test_caching_is_off_for_every_step() -> None:
    for name, (_, task) in _step_tasks(_ir(_plan())).items():
        assert "cachingOptions" in task, name
        assert not task["cachingOptions"].get("enableCache", False), f"{name} may be served from KFP's cache"


def test_configure_and_report_retry_and_launch_does_not() -> None:
    steps = _step_tasks(_ir(_plan()))
    for name in ("configure", "report"):
        assert steps[name][1]["retryPolicy"]["maxRetryCount"] == 2, name
    assert "retryPolicy" not in steps["launch"][1]


def test_steps_request_the_step_resources() -> None:
    ir = _ir(_plan())
    expected = {
        f"resource{name.capitalize()}{kind.removesuffix('s').capitalize()}": value
        for kind, values in STEP_RESOURCES.items()
        for name, value in values.items()
    }
    assert expected  # e.g. resourceCpuRequest: 100m
    for name, (_, task) in _step_tasks(ir).items():
        resources = ir["deploymentSpec"]["executors"][_executor_of(ir, task)]["container"]["resources"]
        assert {k: v for k, v in resources.items() if k.startswith("resource")} == expected, name


def test_file_storage_mounts_the_claim_in_every_step() -> None:
    plan = _plan()
    assert plan.storage.startswith("file://") and plan.volume_claim and plan.mount_path
    executors = _platform_executors(plan)
    assert set(executors) == {"exec-configure", "exec-launch", "exec-report"}
    for name, config in executors.items():
        (mount,) = config["pvcMount"]
        assert mount["mountPath"] == plan.mount_path, name
        assert mount["pvcNameParameter"] == {"runtimeValue": {"constant": plan.volume_claim}}, name


def test_other_storage_mounts_no_claim() -> None:
    plan = dataclasses.replace(_plan(), storage="s3://bench/results", volume_claim=None, mount_path=None)
    for name, config in _platform_executors(plan).items():
        assert "pvcMount" not in config, name


def _container_envs(plan: ClusterPlan) -> dict[str, list[dict[str, Any]]]:
    ir = _ir(plan)
    return {
        name: ir["deploymentSpec"]["executors"][_executor_of(ir, task)]["container"].get("env", [])
        for name, (_, task) in _step_tasks(ir).items()
    }


def _secret_as_env(secret: str) -> list[dict[str, Any]]:
    """What kfp-kubernetes writes for the S3 credentials: the Secret's name and keys, never a value."""
    name = {"secretName": secret, "secretNameParameter": {"runtimeValue": {"constant": secret}}}
    return [
        {
            "keyToEnv": [
                {"envVar": "AWS_ACCESS_KEY_ID", "secretKey": "AWS_ACCESS_KEY_ID"},
                {"envVar": "AWS_SECRET_ACCESS_KEY", "secretKey": "AWS_SECRET_ACCESS_KEY"},
            ],
            "optional": False,
            **name,
        },
        {
            "keyToEnv": [{"envVar": "AWS_SESSION_TOKEN", "secretKey": "AWS_SESSION_TOKEN"}],
            "optional": True,
            **name,
        },
    ]


def test_s3_storage_gives_every_step_the_endpoint_and_the_secret_as_env() -> None:
    plan = _plan(EXAMPLES / "nightly-stacks.yaml")
    assert plan.storage.startswith("s3://")
    executors = _platform_executors(plan)
    assert set(executors) == {"exec-configure", "exec-launch", "exec-report"}
    for name, config in executors.items():
        assert config["secretAsEnv"] == _secret_as_env("kaliper-s3"), name
    endpoint = {"name": "KALIPER_S3_ENDPOINT", "value": "http://minio.kaliper.svc:9000"}
    prometheus = {"name": "KALIPER_PROMETHEUS", "value": "http://prometheus-operated.monitoring.svc:9090"}
    assert _container_envs(plan) == {
        "configure": [endpoint],
        "launch": [endpoint],
        "report": [endpoint, prometheus],
    }


def test_s3_secret_name_region_and_no_secret() -> None:
    plan = dataclasses.replace(
        _plan(),
        storage="s3://bench/results",
        volume_claim=None,
        mount_path=None,
        s3=S3Spec(region="eu-west-1", secret="team-keys"),
    )
    for name, config in _platform_executors(plan).items():
        assert config["secretAsEnv"] == _secret_as_env("team-keys"), name
    region = [{"name": "AWS_REGION", "value": "eu-west-1"}]
    assert _container_envs(plan) == {"configure": region, "launch": region, "report": region}
    anonymous = dataclasses.replace(plan, s3=S3Spec(secret=None))
    for name, config in _platform_executors(anonymous).items():
        assert "secretAsEnv" not in config, name
    assert _container_envs(anonymous) == {"configure": [], "launch": [], "report": []}


def test_file_storage_gives_the_steps_no_s3_env() -> None:
    plan = dataclasses.replace(
        _plan(),
        s3=S3Spec(endpoint="http://minio:9000", region="eu-west-1"),
        prometheus="http://prometheus:9090",
    )
    assert plan.storage.startswith("file://")
    for name, config in _platform_executors(plan).items():
        assert "secretAsEnv" not in config, name
    assert _container_envs(plan) == {
        "configure": [],
        "launch": [],
        "report": [{"name": "KALIPER_PROMETHEUS", "value": "http://prometheus:9090"}],
    }


def test_node_selector_tolerations_and_launch_deadline_reach_the_pods() -> None:
    tolerations: list[dict[str, Any]] = [
        {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    plan = dataclasses.replace(_plan(), node_selector={"pool": "bench", "zone": "a"}, tolerations=tolerations)
    executors = _platform_executors(plan)
    for name, config in executors.items():
        assert config["nodeSelector"] == {"labels": {"pool": "bench", "zone": "a"}}, name
        got = [
            {k: int(v) if k == "tolerationSeconds" else v for k, v in t.items()}
            for t in config["tolerations"]
        ]
        assert got == tolerations, name
        assert config["imagePullPolicy"] == "IfNotPresent", name
    # The launch pod gets the Argo launch template's budget: the step's own wait plus time to start.
    assert int(executors["exec-launch"]["activeDeadlineSeconds"]) == plan.launch_timeout_s + 300
    assert "activeDeadlineSeconds" not in executors["exec-configure"]


def test_the_launch_pod_learns_its_own_name_uid_and_namespace_to_own_its_jobs() -> None:
    """KFP gives no Workflow uid, so the launch step names its own pod as the jobs' owner: the downward API
    fields reach the launch container only (the KFP driver sets fieldPathAsEnv on the main container), in
    the per-run and in the chunked shape."""
    wanted = [
        {"name": "KALIPER_POD_NAME", "fieldPath": "metadata.name"},
        {"name": "KALIPER_POD_UID", "fieldPath": "metadata.uid"},
        {"name": "KALIPER_POD_NAMESPACE", "fieldPath": "metadata.namespace"},
    ]
    plan = _plan()
    executors = _platform_executors(plan)
    assert executors["exec-launch"]["fieldPathAsEnv"] == wanted
    for name in ("exec-configure", "exec-report"):
        assert "fieldPathAsEnv" not in executors[name], name
    chunked = dataclasses.replace(
        plan, chunking=Chunking(runs=30, size=10, chunks=3, concurrency=1, parallelism=1)
    )
    chunk_executors = _platform_executors(chunked)
    assert chunk_executors["exec-launch-chunk"]["fieldPathAsEnv"] == wanted
    assert {n for n, c in chunk_executors.items() if "fieldPathAsEnv" in c} == {"exec-launch-chunk"}


# --- determinism, lazy import -------------------------------------------------------------------------


def test_same_plan_gives_the_same_bytes_in_this_and_another_process() -> None:
    path = EXAMPLES / "quickstart.yaml"
    first = pipeline_yaml(_plan(path))
    assert pipeline_yaml(_plan(path)) == first
    code = (
        "import sys; from kaliper.spec import load_spec; from kaliper.workflows.plan import cluster_plan; "
        "from kaliper.workflows.kfp import pipeline_yaml; "
        "sys.stdout.write(pipeline_yaml(cluster_plan(load_spec(sys.argv[1]))))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=REPO.parent,
        timeout=300,
    )
    assert other.stdout == first


def test_header_comment_stays_a_comment() -> None:
    """kfp 2.16 writes the multi-line spec default into its header unescaped; every header line is '#'."""
    text = pipeline_yaml(_plan())
    header = text[: text.index("\ncomponents:")].splitlines()
    assert header[0] == "# PIPELINE DEFINITION"
    assert len(header) > 5  # the spec's lines are there, commented
    assert all(line.startswith("#") for line in header)


def test_module_imports_without_kfp() -> None:
    code = "import sys; sys.modules['kfp'] = None; import kaliper.workflows.kfp"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_ir_is_the_same_after_hera_patched_pyyaml(tmp_path: Path) -> None:
    """Hera registers a global PyYAML string representer on import; the IR must not depend on it."""
    code = (
        "import sys\n"
        "from kaliper.spec import load_spec\n"
        "from kaliper.workflows.plan import cluster_plan\n"
        "from kaliper.workflows.kfp import pipeline_yaml\n"
        "if sys.argv[1] == 'hera':\n"
        "    import hera.workflows\n"
        "sys.stdout.write(pipeline_yaml(cluster_plan(load_spec(sys.argv[2]))))\n"
    )
    spec = str(EXAMPLES / "import.yaml")
    outputs = [
        subprocess.run(
            [sys.executable, "-c", code, mode, spec], capture_output=True, text=True, check=True
        ).stdout
        for mode in ("plain", "hera")
    ]
    assert outputs[0] == outputs[1]


def test_a_custom_template_travels_in_the_kfp_pipeline(tmp_path: Path) -> None:
    """The template spec of tests/unit/fixtures/own compiles to a pipeline whose `templates` input (a
    pipeline parameter, default: the bundle) reaches every step's command line."""
    own = FIXTURES / "own" / "template.yaml"
    plan = cluster_plan(load_spec(own))
    text = pipeline_yaml(plan)
    path = GOLDEN / "own-template.kfp.yaml"
    if REGENERATE:
        path.write_text(text)
    assert path.read_text() == text, f"{path} drifted; {HOW_TO_REGENERATE}"
    spec = _documents(text)[0]
    root = spec["root"]["inputDefinitions"]["parameters"]
    assert root["templates"]["defaultValue"] == plan.templates
    for name in ("configure", "launch", "report"):
        executor = spec["deploymentSpec"]["executors"][f"exec-{name}"]["container"]
        args = executor["args"]
        assert args[args.index("--templates-json") + 1] == _input("templates"), name
