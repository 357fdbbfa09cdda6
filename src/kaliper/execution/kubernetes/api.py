"""The few Kubernetes API calls the launch step makes, behind one small class.

Everything comes back as the plain JSON the API server sent (dicts in camelCase), never as the
client's model objects, so the decisions in `jobstate` work on exactly what a recording shows.
Failures of any call become `KubeApiError` carrying the HTTP status (0: no HTTP answer at all).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any, Final

from kaliper import settings
from kaliper.errors import ExecutionError
from kaliper.jobs.kubeflow import GROUP_VERSION, JOB_NAME_LABEL, PLURALS

REQUEST_TIMEOUT_S: Final = 30.0
CONNECT_TIMEOUT_S: Final = 10.0
# A watch sends nothing while the job is unchanged; the server closes it after timeout_seconds.
WATCH_READ_SLACK_S: Final = 15.0
LOG_READ_TIMEOUT_S: Final = 120.0  # a whole log of up to limit_bytes (tens of MiB)
# plural → (group, version): kubeflow.org/v1 for TFJob and PyTorchJob, trainer.kubeflow.org/v1alpha1 for TrainJob
_GROUP_VERSION: Final = {PLURALS[kind]: group_version for kind, group_version in GROUP_VERSION.items()}


def _api_of(plural: str) -> tuple[str, str]:
    found = _GROUP_VERSION.get(plural)
    if found is None:
        raise ExecutionError(f"no job kind has the plural {plural!r} (known: {', '.join(_GROUP_VERSION)})")
    return found


class KubeApiError(ExecutionError):
    """A Kubernetes API call failed; `status` is the HTTP status, 0 when the server gave no answer."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, throttled, a server-side error, or an expired watch."""
        return self.status in (0, 410, 429) or self.status >= 500


def _describe(exc: BaseException) -> tuple[int, str, str]:
    """(status, reason, message) of an ApiException or a lower-level (urllib3, socket) error."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status:
        reason = str(getattr(exc, "reason", "") or "")
        message = reason
        body = getattr(exc, "body", None)
        if body:
            try:
                document = json.loads(body)
            except (TypeError, ValueError):
                document = None
            if isinstance(document, dict):
                reason = str(document.get("reason") or reason)
                message = str(document.get("message") or message)
        return status, reason, f"{status} {reason}: {message}" if message != reason else f"{status} {reason}"
    return 0, type(exc).__name__, f"{type(exc).__name__}: {exc}"


class JobApi:
    """CustomObjectsApi (kubeflow.org/v1 and trainer.kubeflow.org/v1alpha1 jobs, by plural) and CoreV1Api
    (pods, logs) over one ApiClient."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @classmethod
    def from_configuration(cls, configuration: Any) -> JobApi:
        from kubernetes import client

        return cls(client.ApiClient(configuration))

    @classmethod
    def from_environment(cls) -> JobApi:
        """The pod's service account in a cluster, else the local kubeconfig (for a person's laptop)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as in_cluster:
            try:
                # KUBECONFIG read now (the client reads it once, at import), a ':'-list included
                config.load_kube_config(
                    settings.current()[settings.KUBECONFIG], client_configuration=configuration
                )
            except Exception as exc:  # ConfigException, or a missing/unreadable kubeconfig file
                raise ExecutionError(
                    f"no Kubernetes credentials: not in a pod ({in_cluster}) and no usable kubeconfig ({exc})"
                ) from None
        return cls.from_configuration(configuration)

    def _fail(self, what: str, exc: BaseException) -> KubeApiError:
        status, reason, message = _describe(exc)
        return KubeApiError(f"{what}: {message}", status, reason)

    # ------------------------------------------------------------------------------------- jobs

    def create_job(self, namespace: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        try:
            created: dict[str, Any] = self.custom.create_namespaced_custom_object(
                *_api_of(plural), namespace, plural, body, _request_timeout=REQUEST_TIMEOUT_S
            )
        except Exception as exc:
            raise self._fail(f"creating {body.get('kind')} {name} in namespace {namespace}", exc) from None
        return created

    def get_job(self, namespace: str, plural: str, name: str) -> dict[str, Any]:
        try:
            job: dict[str, Any] = self.custom.get_namespaced_custom_object(
                *_api_of(plural), namespace, plural, name, _request_timeout=REQUEST_TIMEOUT_S
            )
        except Exception as exc:
            raise self._fail(f"reading {plural} {name} in namespace {namespace}", exc) from None
        return job

    def list_job(self, namespace: str, plural: str, name: str) -> tuple[dict[str, Any] | None, str]:
        """The job (None when gone) and the list's resourceVersion: a fresh point to watch from."""
        try:
            listing: dict[str, Any] = self.custom.list_namespaced_custom_object(
                *_api_of(plural),
                namespace,
                plural,
                field_selector=f"metadata.name={name}",
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except Exception as exc:
            raise self._fail(f"listing {plural} {name} in namespace {namespace}", exc) from None
        items = [i for i in listing.get("items") or [] if i.get("metadata", {}).get("name") == name]
        version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        return (items[0] if items else None), version

    def watch_job(
        self, namespace: str, plural: str, name: str, resource_version: str, timeout_seconds: int
    ) -> Generator[dict[str, Any], None, None]:
        """Watch events ({"type", "object"}) for one job until the server ends the stream.

        An ERROR event (410 Expired above all) ends the stream with a KubeApiError, as does a broken
        connection; the caller lists again and resumes.
        """
        from kubernetes import watch

        watcher = watch.Watch()
        try:
            stream = watcher.stream(
                self.custom.list_namespaced_custom_object,
                *_api_of(plural),
                namespace,
                plural,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                _request_timeout=(CONNECT_TIMEOUT_S, timeout_seconds + WATCH_READ_SLACK_S),
            )
            for event in stream:
                yield {"type": event["type"], "object": event["raw_object"]}
        except KubeApiError:
            raise
        except KeyError as exc:  # the client reads obj["message"] of an ERROR event that has none
            raise KubeApiError(
                f"watching {plural} {name} in namespace {namespace}: malformed ERROR event (no {exc})"
            ) from None
        except Exception as exc:  # ApiException (ERROR event, HTTP error), urllib3/socket errors, bad JSON
            raise self._fail(f"watching {plural} {name} in namespace {namespace}", exc) from None
        finally:
            watcher.stop()

    # ------------------------------------------------------------------------------------- pods

    def list_pods(self, namespace: str, job_name: str, label: str = JOB_NAME_LABEL) -> list[dict[str, Any]]:
        """The pods whose `label` (jobs.kubeflow.POD_SELECTOR_LABEL of the job's kind) names the job."""
        try:
            response = self.core.list_namespaced_pod(
                namespace,
                label_selector=f"{label}={job_name}",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
            try:
                listing = json.loads(response.data)
            finally:
                response.release_conn()
        except Exception as exc:
            raise self._fail(f"listing the pods of {job_name} in namespace {namespace}", exc) from None
        items = listing.get("items") if isinstance(listing, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    def _pod_log(self, namespace: str, pod: str, container: str, most: int | None, **query: Any) -> bytes:
        """A container's log as bytes (at most `most` read from the response), the connection released."""
        try:
            response = self.core.read_namespaced_pod_log(
                pod, namespace, container=container, _preload_content=False, **query
            )
            try:
                data: bytes = response.data if most is None else response.read(most)
            finally:
                response.release_conn()
        except Exception as exc:
            raise self._fail(f"reading the log of {pod}/{container} in namespace {namespace}", exc) from None
        return data

    def read_log(self, namespace: str, pod: str, container: str, tail_lines: int) -> str:
        """The last lines of a container's log, as text (never parsed: a JSON log line stays text)."""
        data = self._pod_log(
            namespace, pod, container, None, tail_lines=tail_lines, _request_timeout=REQUEST_TIMEOUT_S
        )
        return data.decode("utf-8", errors="replace")

    def read_full_log(self, namespace: str, pod: str, container: str, limit_bytes: int) -> tuple[str, bool]:
        """A container's whole log from its start, at most `limit_bytes` (the API's `limitBytes`, so the
        server stops there), and whether it was cut. Text as the kubelet stores it: stdout and stderr
        interleaved; bytes that are not UTF-8 replaced."""
        data = self._pod_log(
            namespace,
            pod,
            container,
            limit_bytes + 1,
            limit_bytes=limit_bytes,
            _request_timeout=(CONNECT_TIMEOUT_S, LOG_READ_TIMEOUT_S),
        )
        return data[:limit_bytes].decode("utf-8", errors="replace"), len(data) >= limit_bytes
