"""The `server:` section: the inference server a `serve` spec benchmarks, described once for both paths.

On a cluster the server runs as a Deployment + Service (or a KServe InferenceService, `kind: kserve`) that
the workflow creates before the load generator and deletes in its exit handler (kaliper.workflows.serving);
with `kaliper run` the same section starts it as a process beside the load generator. Either way the serve
workload's `url`, `command`, `ready_url` and `startup_deadline` are derived from it (`serve_params`), so one
spec runs both ways and the two paths cannot disagree about the port or the paths.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from kaliper.spec.job import Duration, ResourcesSpec, check_image
from kaliper.spec.kubenames import check_dns1123_subdomain, require
from kaliper.spec.services import StrictModel

ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_KEY: Final = re.compile(r"[-._a-zA-Z0-9]{1,253}")
URL_PATH: Final = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{0,200}")
# The serve workload's parameters the section decides; a spec that also sets them says two things.
DERIVED_PARAMS: Final = ("url", "command", "ready_url", "startup_deadline")
Where = Literal["local", "cluster"]


class SecretEnv(StrictModel):
    """An environment variable read from a Secret's key: the value never appears in the spec or the
    compiled objects, only the Secret's name and key."""

    secret: str = Field(description="the Secret's name (in the namespace the server runs in)")
    key: str = Field(description="the key inside the Secret")

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        require(check_dns1123_subdomain(value))
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not SECRET_KEY.fullmatch(value):
            raise ValueError("expected a Secret key: letters, digits, '-', '_' and '.', at most 253")
        return value


def _words(value: list[str], what: str) -> list[str]:
    if any(not w or "\x00" in w or len(w) > 4096 for w in value) or len(value) > 256:
        raise ValueError(f"expected a list of at most 256 non-empty {what} words (an argv, not a shell line)")
    return value


class ServerSpec(StrictModel):
    """The server under test. Its container image runs on a cluster; `command` + `args` run locally."""

    kind: Literal["deployment", "kserve"] = Field(
        "deployment",
        description="on a cluster: a Deployment + Service, or a KServe InferenceService (serving.kserve.io/"
        "v1beta1) with a custom predictor container",
    )
    image: str = Field(description="the server's container image, pinned (a version tag or a digest)")
    command: list[str] = Field(
        min_length=1, description="the server's argv (the container's command; run without a shell locally)"
    )
    args: list[str] = Field(default_factory=list, description="more argv words, both paths")
    cluster_args: list[str] = Field(
        default_factory=list,
        description="argv words only on a cluster, e.g. `--host 0.0.0.0`: a pod's server must listen beyond "
        "loopback for its Service, while `kaliper run` keeps it on 127.0.0.1",
    )
    port: int = Field(8080, ge=1, le=65535, strict=True, description="the port the server listens on")
    path: str = Field("/v1/completions", description="the endpoint the load generator sends requests to")
    readiness_path: str = Field(
        "/health", description="ready when a GET of this path returns 2xx (the readiness probe on a cluster)"
    )
    ready_timeout: Duration = Field(
        600.0,
        description="how long the server may take to become ready (a Deployment Available, an "
        "InferenceService Ready; locally the serve workload's startup_deadline)",
    )
    replicas: int = Field(1, ge=1, le=64, strict=True, description="server pods on a cluster")
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="each server pod's requests = limits (as `job.resources`)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="plain environment variables")
    secret_env: dict[str, SecretEnv] = Field(
        default_factory=dict, description="environment variables from Secret keys (secretKeyRef)"
    )

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value)

    @field_validator("command", "args", "cluster_args")
    @classmethod
    def _argv(cls, value: list[str]) -> list[str]:
        return _words(value, "argv")

    @field_validator("path", "readiness_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not URL_PATH.fullmatch(value):
            raise ValueError("expected a URL path starting with '/' (at most 200 characters, no spaces)")
        return value

    @field_validator("env", "secret_env")
    @classmethod
    def _env_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not ENV_NAME.fullmatch(name) or len(name) > 128:
                raise ValueError(f"{name!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return value

    def object_name(self, spec_name: str) -> str:
        """The Deployment, Service or InferenceService name: one per spec (the workflow holds a mutex of
        the same name, so two runs of a spec never share or delete each other's server). A DNS-1035 label:
        a spec name has at most 30 characters."""
        return f"kaliper-{spec_name}-server"

    def cluster_url(self, spec_name: str, namespace: str | None) -> str:
        """Where the load generator reaches the server inside the cluster: the Service's DNS name (KServe
        names the predictor's Service `<name>-predictor`)."""
        host = self.object_name(spec_name) + ("-predictor" if self.kind == "kserve" else "")
        if namespace is not None:
            host += f".{namespace}.svc"
        port = "" if self.kind == "kserve" else f":{self.port}"  # KServe's Service listens on port 80
        return f"http://{host}{port}{self.path}"

    def serve_params(self, spec_name: str, namespace: str | None, where: Where) -> dict[str, str]:
        """The serve workload's parameters this section decides, for `kaliper run` (start the server from
        `command` + `args` on 127.0.0.1 and wait for its readiness path) or a cluster (the server is the
        workflow's; the load generator only sends to its Service)."""
        if where == "cluster":
            return {"url": self.cluster_url(spec_name, namespace), "command": "", "ready_url": ""}
        base = f"http://127.0.0.1:{self.port}"
        # `env` as env(1) in front of the argv (still no shell); secret_env's variables come from the
        # user's own environment, which the started server inherits (a Secret exists only on a cluster)
        assignments = ["env", *(f"{k}={v}" for k, v in sorted(self.env.items()))] if self.env else []
        return {
            "url": base + self.path,
            "command": shlex.join([*assignments, *self.command, *self.args]),
            "ready_url": base + self.readiness_path,
            "startup_deadline": f"{self.ready_timeout:g}s",
        }
