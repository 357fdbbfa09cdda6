"""What the launch step reads of a job's pods for its records (kaliper.execution.recorder stores them).

When: a run whose job Succeeded, of a workload with extraction rules (a command workload, or a template
with declared `metrics` / `metrics_format`), for each replica that stored no record itself. That is the
unwrapped image (`workload.wrap: false`: the container runs the user's argv, nothing of Kaliper inside),
and also a wrapped replica whose record never reached storage. A replica whose log carries a
`KALIPER_RESULT` line (the wrapper's fallback when storing failed) gets that record back as it printed
it (kaliper.execution.recorder, for every run); every other one gets a record built from its log by the shared `records_from_logs`
(kaliper.execution.fromlogs: the same extraction and verdict as `kaliper exec` and the local runner),
`recorded_by: launcher`. A failed job's replicas keep their stand-in records (results.protocol), which
carry the failing replica's log tail.

What a pod tells about where it ran, and so what such a record says: the image as the trial named it,
its digest as the kubelet resolved it (containerStatuses[].imageID, `sha256:...`), the node's name as
the hardware's hostname, the CPU limit of the container as its quota; everything else (CPU model, cores,
memory, Python, packages) is unknown: the launch step's own machine is not where the job ran. The
primary's wall time is its container's startedAt → finishedAt, its exit code the container's.

The log: stdout and stderr as the kubelet stores them, interleaved, read as one stream ("output"), at
most `MAX_LOG_BYTES` from its start (the API's `limitBytes`), so the step's memory stays bounded. The
kubelet rotates container logs (containerLogMaxSize, 10 MiB by default) and pods/log serves only the
current file, so a job that prints more than that loses its early lines here: wrap it (an image with
Kaliper) to read every line as it is printed.

Pure decisions (digest, hardware, which record) are functions of the pod JSON; the I/O is `LogReader`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kaliper.execution.kubernetes.api import JobApi
from kaliper.execution.kubernetes.jobstate import PodView, main_container_status
from kaliper.jobs.kubeflow import CONTAINER_NAME, replica_name
from kaliper.results.provenance import stack_id
from kaliper.results.record import Hardware, Stack

MAX_LOG_BYTES: Final = 64 << 20  # per replica; the launch step's pod has a 1 GiB memory limit
UNKNOWN: Final = "unknown"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CPU = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")

log = logging.getLogger(__name__)


def image_digest(image_id: str | None) -> str | None:
    """`sha256:...` of a containerStatuses[].imageID (`docker-pullable://repo@sha256:...`,
    `repo@sha256:...`, or a bare `sha256:...`); None when it names none."""
    if not image_id:
        return None
    found = _DIGEST.findall(image_id.rsplit("@", 1)[-1])
    return found[-1] if found else None


def pod_stack(image: str | None, image_id: str | None) -> Stack:
    """What a pod says of the software it ran: the image and its resolved digest, nothing more."""
    digest = image_digest(image_id)
    python = {"implementation": UNKNOWN, "version": UNKNOWN}
    pinned = f"{image.split('@', 1)[0]}@{digest}" if image and digest else image
    return Stack(
        id=stack_id(python, [], pinned), python=python, packages=[], image=image, image_digest=digest
    )


def _cpu_cores(quantity: Any) -> float | None:
    """A Kubernetes CPU quantity ("2", "500m", 1.5) in cores; None when absent or not plain."""
    match = _CPU.match(str(quantity).strip()) if quantity is not None else None
    if match is None:
        return None
    value = float(match.group(1))
    return value / 1000 if match.group(2) else value


def pod_hardware(pod: dict[str, Any] | None, kind: str) -> Hardware:
    """What a pod says of the machine: the node's name (hostname), the arch its nodeSelector pins, the
    container's CPU limit as its quota; the rest is unknown (nodes are not readable with the step's Role)."""
    spec = (pod or {}).get("spec") or {}
    container = _main_container_spec(spec, kind)
    limits = (container.get("resources") or {}).get("limits") or {}
    selector = spec.get("nodeSelector") or {}
    return Hardware(
        cpu_model=None,
        arch=str(selector.get("kubernetes.io/arch") or UNKNOWN),
        logical_cores=None,
        physical_cores=None,
        usable_cores=None,
        cpu_quota_cores=_cpu_cores(limits.get("cpu")),
        flags=[],
        memory_bytes=None,
        kernel=UNKNOWN,
        hostname=str(spec.get("nodeName") or UNKNOWN),
    )


def _main_container_spec(spec: dict[str, Any], kind: str) -> dict[str, Any]:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    name = CONTAINER_NAME.get(kind)
    return next((c for c in containers if c.get("name") == name), containers[0] if containers else {})


@dataclass
class LogReader:
    """Each replica's log read once (at most MAX_LOG_BYTES); an unreadable one becomes one line saying so,
    which the verdict's "last lines" then show."""

    api: JobApi
    namespace: str
    pods: PodView
    texts: dict[tuple[str, int], str] = field(default_factory=dict)
    by_pod: dict[str, str] = field(default_factory=dict)

    def __call__(self, rtype: str, index: int) -> str:
        key = (rtype, index)
        if key not in self.texts:
            self.texts[key] = self._read(rtype, index)
        return self.texts[key]

    def _read(self, rtype: str, index: int) -> str:
        """A replica's pod log: a TrainJob's ranks share their node's, read once (each rank's record
        there is found by its record key, kaliper.results.protocol.printed_record)."""
        pod = self.pods.pod_for(rtype, index)
        if pod is None:
            return f"(kaliper: no pod of {replica_name(rtype, index)} was seen, so no log to read)"
        name = pod["metadata"]["name"]
        if name not in self.by_pod:
            self.by_pod[name] = self._read_pod(pod, name)
        return self.by_pod[name]

    def _read_pod(self, pod: dict[str, Any], name: str) -> str:
        container = main_container_status(pod, self.pods.kind).get("name") or CONTAINER_NAME[self.pods.kind]
        try:
            text, cut = self.api.read_full_log(self.namespace, name, container, MAX_LOG_BYTES)
        except Exception as exc:  # never fail the step over a log: the record says why it has nothing
            log.warning("could not read the log of %s: %s", name, exc)
            return f"(kaliper: the log of pod {name} is unavailable: {exc})"
        if cut:
            log.warning("the log of %s is longer than %d bytes; only its start was read", name, MAX_LOG_BYTES)
            text = text.rsplit("\n", 1)[0] + f"\n(kaliper: log cut at {MAX_LOG_BYTES} bytes)\n"
        return text


def cluster_provenance(pods: PodView, image: str | None) -> Callable[[str, int], tuple[Stack, Hardware]]:
    """Stack and hardware of each replica, from its pod as last seen."""

    def provenance(rtype: str, index: int) -> tuple[Stack, Hardware]:
        pod = pods.pod_for(rtype, index)
        status = main_container_status(pod, pods.kind) if pod is not None else {}
        return pod_stack(image, status.get("imageID")), pod_hardware(pod, pods.kind)

    return provenance
