"""The S3 and monitoring settings of a spec reach the benchmark job's pods (real jsonnet rendering).

s3:// storage → KALIPER_S3_ENDPOINT, AWS_REGION and the credentials as secretKeyRefs to `s3.secret` (never a
value); monitoring.pushgateway → KALIPER_PUSHGATEWAY; file:// storage → no S3 env at all. Also the `s3:` and
`monitoring:` sections' validation in-process (the CLI cases live in test_spec_errors.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.configurator.experiment import dump_manifest
from kaliper.configurator.render import BUILTIN_TEMPLATES, render_template
from kaliper.errors import SpecError
from kaliper.jobs.manifest import replica_specs
from kaliper.jobs.objects import prepare_job
from kaliper.spec import spec_from_text
from kaliper.spec.services import S3Spec
from tests.support.k8s_schemas import crd_problems

SECRET_VALUES = {
    "AWS_ACCESS_KEY_ID": "AKIA-KALIPER-MARKER-1",
    "AWS_SECRET_ACCESS_KEY": "KALIPER-MARKER-SECRET-2",
    "AWS_SESSION_TOKEN": "KALIPER-MARKER-TOKEN-3",
}
CREDENTIAL_NAMES = set(SECRET_VALUES)
S3_NAMES = {"KALIPER_S3_ENDPOINT", "AWS_REGION", *CREDENTIAL_NAMES}

PYTORCH = """\
name: envtest
workload: {name: pi-matmul, params: {device: cpu}}
matrix: {matrix_size: [64, 128]}
repetitions: 1
job:
  kind: PyTorchJob
  replicas: {Master: 1, Worker: 2}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  resources: {cpu: "1", memory: 1Gi}
"""
TFJOB = """\
name: envtest-tf
workload: {name: pi-matmul, framework: tensorflow, params: {device: cpu}}
repetitions: 1
job:
  kind: TFJob
  replicas: {Chief: 1, PS: 1, Worker: 2}
  image: ghcr.io/kaliper-dev/kaliper-tensorflow:0.1.0
"""
S3_SECTION = "s3: {endpoint: 'http://minio.kaliper.svc:9000', region: eu-west-1}\n"
S3 = "storage: s3://kaliper-results/nightly\n" + S3_SECTION
PUSHGATEWAY = "monitoring: {pushgateway: 'http://pushgateway.kaliper.svc:9091'}\n"


def secret_ref(name: str, secret: str = "kaliper-s3", optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": name}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


EXPECTED_S3_ENV = [
    {"name": "KALIPER_S3_ENDPOINT", "value": "http://minio.kaliper.svc:9000"},
    {"name": "AWS_REGION", "value": "eu-west-1"},
    secret_ref("AWS_ACCESS_KEY_ID"),
    secret_ref("AWS_SECRET_ACCESS_KEY"),
    secret_ref("AWS_SESSION_TOKEN", optional=True),
]


def manifests(text: str, base_dir: Path, storage_url: str | None = None) -> list[dict[str, Any]]:
    plan = configure(spec_from_text(text, "spec.yaml", base_dir), "envtest-x", storage_url)
    return [t.manifest for t in plan.trials]


def containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for spec in replica_specs(manifest).values() for c in spec["template"]["spec"]["containers"]]


def envs(manifest: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [c["env"] for c in containers(manifest)]


def names(env: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in env]


@pytest.fixture
def credentials_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in this process's environment: rendering must never copy them into a manifest."""
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("credentials_in_environment")
@pytest.mark.parametrize("base", [PYTORCH, TFJOB], ids=["PyTorchJob", "TFJob"])
def test_s3_storage_gives_every_replica_the_s3_env_as_secret_refs(tmp_path: Path, base: str) -> None:
    rendered = manifests(base + S3, tmp_path)
    assert rendered
    for manifest in rendered:
        for env in envs(manifest):
            s3_part = [e for e in env if e["name"] in S3_NAMES]
            assert s3_part == EXPECTED_S3_ENV
            # the workload's own env is still there, and nothing is given twice
            assert {"KALIPER_STORAGE", "KALIPER_EXPERIMENT", "KALIPER_REPLICA_TYPE"} <= set(names(env))
            assert len(names(env)) == len(set(names(env)))
            assert not any("value" in e for e in env if e["name"] in CREDENTIAL_NAMES)
        text = dump_manifest(manifest)
        for value in SECRET_VALUES.values():
            assert value not in text


def test_s3_secret_null_gives_no_credential_env(tmp_path: Path) -> None:
    text = PYTORCH + "storage: s3://bucket/p\ns3: {secret: null}\n"
    for manifest in manifests(text, tmp_path):
        for env in envs(manifest):
            assert not set(names(env)) & S3_NAMES, env  # no endpoint, no region, no credentials: all defaults
            assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in env)


def test_s3_secret_name_and_missing_endpoint(tmp_path: Path) -> None:
    text = PYTORCH + "storage: s3://bucket/p\ns3: {secret: team-a.s3-keys}\n"
    for manifest in manifests(text, tmp_path):
        for env in envs(manifest):
            assert [e for e in env if e["name"] in S3_NAMES] == [
                secret_ref("AWS_ACCESS_KEY_ID", "team-a.s3-keys"),
                secret_ref("AWS_SECRET_ACCESS_KEY", "team-a.s3-keys"),
                secret_ref("AWS_SESSION_TOKEN", "team-a.s3-keys", optional=True),
            ]


@pytest.mark.usefixtures("credentials_in_environment")
def test_file_storage_gives_no_s3_env_even_with_an_s3_section(tmp_path: Path) -> None:
    for manifest in manifests(PYTORCH + "storage: file:///results\n" + S3_SECTION, tmp_path):
        for env in envs(manifest):
            assert not set(names(env)) & S3_NAMES, env


def test_storage_url_given_to_configure_decides(tmp_path: Path) -> None:
    """The cluster's storage (what the configure step is given) counts, not the spec's own."""
    on_s3 = manifests(
        PYTORCH + S3.replace("s3://kaliper-results/nightly", "file://./local"), tmp_path, "s3://b/x"
    )
    assert [e for e in envs(on_s3[0])[0] if e["name"] in S3_NAMES] == EXPECTED_S3_ENV
    on_file = manifests(PYTORCH + S3, tmp_path, "file:///kaliper-results")
    assert not set(names(envs(on_file[0])[0])) & S3_NAMES


@pytest.mark.parametrize("storage", ["file:///results", "s3://bucket/p"])
def test_pushgateway_env_iff_configured(tmp_path: Path, storage: str) -> None:
    base = PYTORCH + f"storage: {storage}\n"
    for manifest in manifests(base + PUSHGATEWAY, tmp_path):
        for env in envs(manifest):
            assert [e for e in env if e["name"] == "KALIPER_PUSHGATEWAY"] == [
                {"name": "KALIPER_PUSHGATEWAY", "value": "http://pushgateway.kaliper.svc:9091"}
            ]
    for manifest in manifests(base + "monitoring: {prometheus: 'http://prometheus:9090'}\n", tmp_path):
        for env in envs(manifest):
            assert "KALIPER_PUSHGATEWAY" not in names(env)
            assert "KALIPER_PROMETHEUS" not in names(env)  # the reporter's, not the replicas'


CUSTOM_TEMPLATE = """\
local kaliper = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: kaliper.metadata(run),
    spec: {
      runPolicy: kaliper.runPolicy(job),
      pytorchReplicaSpecs: {
        Master: {
          replicas: 1,
          restartPolicy: 'Never',
          template: {
            spec: {
              containers: [{
                name: 'pytorch',
                image: job.image,
                command: ['kaliper'],
                args: kaliper.workloadArgs(workload, params, sampling),
                env: kaliper.env(run, job) + [{ name: 'SITE', value: 'lab-7' }],
              }],
            },
          },
        },
      },
    },
  }
"""


def test_custom_template_using_kaliper_env_gets_the_settings(tmp_path: Path) -> None:
    (tmp_path / "job.jsonnet").write_text(CUSTOM_TEMPLATE)
    text = PYTORCH.replace("name: pi-matmul,", "name: pi-matmul, template: job.jsonnet,").replace(
        "{Master: 1, Worker: 2}", "{Master: 1}"
    )
    for manifest in manifests(text + S3 + PUSHGATEWAY, tmp_path):
        (env,) = envs(manifest)
        assert env[-1] == {"name": "SITE", "value": "lab-7"}
        assert [e for e in env if e["name"] in S3_NAMES] == EXPECTED_S3_ENV
        assert "KALIPER_PUSHGATEWAY" in names(env)


def test_kaliper_env_appends_run_env_and_accepts_a_run_without_it(tmp_path: Path) -> None:
    """A user template called with the older `run` (no `env`) still renders; with it, run.env comes last."""
    template = tmp_path / "env.jsonnet"
    template.write_text(
        "local kaliper = import 'kaliper.libsonnet';\n"
        "function(run, job, workload, params, sampling) kaliper.env(run, job)\n"
    )
    run = {"experiment": "e", "trial": "t000", "storage": "s3://b/p"}
    job = {"image": "img:1", "resources": {"cpu": None}}
    args = {"job": job, "workload": {}, "params": {}, "sampling": {}}
    old = render_template(template, {"run": run, **args})
    extra = [secret_ref("AWS_ACCESS_KEY_ID")]
    new = render_template(template, {"run": {**run, "env": extra}, **args})
    assert "AWS_ACCESS_KEY_ID" not in names(old)
    assert new == old + extra


@pytest.mark.parametrize("base", [PYTORCH, TFJOB], ids=["PyTorchJob", "TFJob"])
def test_jobs_with_s3_env_pass_the_trainer_crds(tmp_path: Path, base: str, schemas_dir: Path) -> None:
    for manifest in manifests(base + S3 + PUSHGATEWAY, tmp_path):
        assert crd_problems(manifest, schemas_dir) == []
        job = prepare_job(
            manifest,
            "envtest-x",
            "t000",
            0,
            workflow_name="kaliper-envtest-abcde",
            owner=None,
            namespace="kaliper",
        )
        assert crd_problems(job, schemas_dir) == []
        assert any("secretKeyRef" in e.get("valueFrom", {}) for env in envs(job) for e in env)


def test_builtin_templates_use_kaliper_env() -> None:
    """The shipped templates build their containers with kaliper.container, hence kaliper.env (a
    TrainJob's trainer with kaliper.trainer, hence kaliper.trainerEnv, which appends run.env too)."""
    for kind, path in BUILTIN_TEMPLATES.items():
        builder = "kaliper.trainer(" if kind == "TrainJob" else "kaliper.container("
        assert builder in path.read_text(), path


def test_env_names_match_what_storage_and_monitoring_read() -> None:
    from kaliper.configurator import podenv
    from kaliper.monitoring import prometheus, push
    from kaliper.storage import s3

    assert podenv.S3_ENDPOINT_ENV == s3.ENDPOINT_ENV
    assert podenv.PUSHGATEWAY_ENV == push.ENV_URL
    assert podenv.PROMETHEUS_ENV == prometheus.ENV_URL


# --- the spec sections --------------------------------------------------------------------------------


def load(text: str, tmp_path: Path) -> Any:
    return spec_from_text(PYTORCH + text, "spec.yaml", tmp_path).spec


def test_s3_section_defaults(tmp_path: Path) -> None:
    assert load("", tmp_path).s3 == S3Spec(endpoint=None, region=None, secret="kaliper-s3")


@pytest.mark.parametrize(
    "endpoint",
    ["http://minio.kaliper.svc:9000", "https://s3.eu-west-1.amazonaws.com", "http://10.0.0.7:9000/"],
)
def test_valid_s3_endpoints_are_accepted_and_usable_by_the_client(tmp_path: Path, endpoint: str) -> None:
    from kaliper.storage.s3 import parse_endpoint

    assert load(f"s3: {{endpoint: '{endpoint}'}}\n", tmp_path).s3.endpoint == endpoint
    parse_endpoint(endpoint)  # the same URL is one the S3 client takes


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("s3: {endpoint: 'minio:9000'}", "s3.endpoint: expected an http(s)://host[:port] URL"),
        ("s3: {endpoint: 'http://minio:9000?x=1'}", "s3.endpoint: expected an http(s)://host[:port] URL"),
        ("s3: {endpoint: 'http://:9000'}", "it names no host"),
        ("s3: {region: 'eu west'}", "s3.region: expected an S3 region name"),
        ("s3: {secret: 'kaliper_s3'}", "s3.secret: expected the name of a Kubernetes Secret"),
        ("s3: {secret: '" + "a" * 254 + "'}", "s3.secret: expected the name of a Kubernetes Secret"),
        ("monitoring: {prometheus: 'http://prom:9090/x#frag'}", "monitoring.prometheus: expected an http(s)"),
        ("monitoring: {pushgateway: 'pushgateway:9091'}", "monitoring.pushgateway: expected an http(s)"),
    ],
)
def test_bad_s3_and_monitoring_settings_are_refused(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(SpecError) as caught:
        load(text + "\n", tmp_path)
    assert needle in str(caught.value)


def test_urls_with_credentials_are_refused_without_echoing_them(tmp_path: Path) -> None:
    for text, field in [
        ("s3: {endpoint: 'http://AKIAEXAMPLE:s3cr3t@minio:9000'}", "s3.endpoint"),
        ("monitoring: {prometheus: 'https://admin:s3cr3t@prom.example.com/prom'}", "monitoring.prometheus"),
    ]:
        with pytest.raises(SpecError) as caught:
            load(text + "\n", tmp_path)
        message = str(caught.value)
        assert f"{field}: expected an" in message and "it carries credentials" in message
        assert "s3cr3t" not in message and "AKIAEXAMPLE" not in message and "admin" not in message


def test_monitoring_urls_with_a_path_are_accepted(tmp_path: Path) -> None:
    spec = load(
        "monitoring: {prometheus: 'https://prom.example.com/prometheus', pushgateway: 'http://[::1]:9091'}\n",
        tmp_path,
    )
    assert spec.monitoring.prometheus == "https://prom.example.com/prometheus"
    assert spec.monitoring.pushgateway == "http://[::1]:9091"
