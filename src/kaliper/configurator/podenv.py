"""Environment variables the cluster pods need for the spec's storage and monitoring, as Kubernetes EnvVars.

One builder for every pod Kaliper makes on a cluster: the benchmark job's replicas (through the jsonnet
templates' `run.env`) and the configure/launch/report steps of the Argo and KFP front-ends.

- s3:// storage: `KALIPER_S3_ENDPOINT` (`s3.endpoint`), `AWS_REGION` (`s3.region`), and, unless
  `s3.secret` is null, `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and, optional, `AWS_SESSION_TOKEN`)
  as `secretKeyRef`s to the Secret `s3.secret`, key = variable name. A credential value never appears in
  a manifest: only the Secret's name and keys do.
- `monitoring.pushgateway` → `KALIPER_PUSHGATEWAY` (job pods: the replicas push live metrics);
  `monitoring.prometheus` → `KALIPER_PROMETHEUS` (the report step reads each run's resource use).

No Hera, kfp or minio import here: the step image and `kaliper run` import this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from kaliper.jobs import env
from kaliper.spec import BenchmarkSpec
from kaliper.spec.services import S3Spec

# The names kaliper.storage.s3 and kaliper.monitoring read (kaliper.jobs.env).
S3_ENDPOINT_ENV: Final = env.S3_ENDPOINT
REGION_ENV: Final = env.REGION
CREDENTIAL_ENVS: Final = env.CREDENTIALS
OPTIONAL_CREDENTIAL_ENVS: Final = env.OPTIONAL_CREDENTIALS
PUSHGATEWAY_ENV: Final = env.PUSHGATEWAY
PROMETHEUS_ENV: Final = env.PROMETHEUS

EnvVar = dict[str, Any]


def value_env(name: str, value: str) -> EnvVar:
    return {"name": name, "value": value}


def secret_env(name: str, secret: str, *, optional: bool = False) -> EnvVar:
    """`name` from the key of the same name in Secret `secret`; `optional`: absent key or Secret → unset."""
    ref: dict[str, Any] = {"name": secret, "key": name}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def is_s3(storage_url: str) -> bool:
    return storage_url.startswith("s3://")


def storage_env(storage_url: str, s3: S3Spec) -> list[EnvVar]:
    """What a pod needs to reach `storage_url`: nothing for file:// (a mounted PVC), the S3 settings for s3://."""
    if not is_s3(storage_url):
        return []
    env: list[EnvVar] = []
    if s3.endpoint is not None:
        env.append(value_env(S3_ENDPOINT_ENV, s3.endpoint))
    if s3.region is not None:
        env.append(value_env(REGION_ENV, s3.region))
    if s3.secret is not None:
        env += [secret_env(name, s3.secret) for name in CREDENTIAL_ENVS]
        env += [secret_env(name, s3.secret, optional=True) for name in OPTIONAL_CREDENTIAL_ENVS]
    return env


def job_env(spec: BenchmarkSpec, storage_url: str) -> list[EnvVar]:
    """The benchmark job's replicas: the Pushgateway they push to, and their storage's settings."""
    env: list[EnvVar] = []
    if spec.monitoring.pushgateway is not None:
        env.append(value_env(PUSHGATEWAY_ENV, spec.monitoring.pushgateway))
    return env + storage_env(storage_url, spec.s3)


def stack_env(variables: dict[str, str]) -> list[EnvVar]:
    """A stack's `env` (kaliper.spec.stack checked the names), and their names for provenance; nothing
    when the stack sets none, so manifests of stacks without env keep their bytes."""
    if not variables:
        return []
    return [*(value_env(k, v) for k, v in variables.items()), value_env(env.STACK_ENV, ",".join(variables))]


def workload_env(variables: Sequence[tuple[str, str]], stack: Mapping[str, str]) -> list[EnvVar]:
    """A built-in workload's own variables (kaliper.benchmarks.catalog `env`), except those the stack sets:
    its env is what is being compared, so it wins."""
    return [value_env(k, v) for k, v in variables if k not in stack]


def step_env(storage_url: str, s3: S3Spec, prometheus: str | None = None) -> list[EnvVar]:
    """A configure/launch/report step pod: its storage's settings; the report step also gets Prometheus."""
    env = storage_env(storage_url, s3)
    if prometheus is not None:
        env.append(value_env(PROMETHEUS_ENV, prometheus))
    return env
