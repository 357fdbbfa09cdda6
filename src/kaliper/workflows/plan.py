"""What every cluster front-end (Argo WorkflowTemplate/Workflow/CronWorkflow, KFP pipeline) needs from a
spec, and the step command lines they all run: one place, so Argo and KFP call the same image the same way.

No Hera or kfp import here: the builders in `argo.py` and `kfp.py` import those lazily.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Final

from kaliper.configurator.podenv import EnvVar, step_env
from kaliper.configurator.server_objects import server_placement
from kaliper.errors import SpecError
from kaliper.spec import LoadedSpec
from kaliper.spec.server import ServerSpec
from kaliper.spec.services import S3Spec
from kaliper.storage import file_path
from kaliper.workflows.chunking import CHUNK_THRESHOLD, Chunking, chunking_for, run_count
from kaliper.workflows.serving import SERVICE_ACCOUNTS

# Where the configure step writes its outputs inside its pod (an emptyDir-free path every image has).
OUTPUT_DIR: Final = "/tmp/kaliper"
RUNS_OUTPUT: Final = f"{OUTPUT_DIR}/runs.json"
CHUNKS_OUTPUT: Final = f"{OUTPUT_DIR}/chunks.json"  # the chunked shape's fan-out list
EXPERIMENT_OUTPUT: Final = f"{OUTPUT_DIR}/experiment"
# Where file:// storage lives inside a cluster unless the spec says otherwise: a PVC mounted there.
CLUSTER_STORAGE_DEFAULT: Final = "file:///kaliper-results"
# Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); the spec travels as one argument.
MAX_SPEC_ARG_BYTES: Final = 100_000
# Slack on top of the job's own deadline: the operator marks a job Failed shortly after its
# activeDeadlineSeconds, and image pulls count toward that deadline already.
LAUNCH_SLACK_S: Final = 300
# The steps only read/write small documents; the benchmark runs in the job's own pods.
STEP_RESOURCES: Final = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


@dataclass(frozen=True)
class Placeholders:
    """How a front-end spells the values only known when a run starts."""

    workflow_name: str
    workflow_created: str
    workflow_uid: str | None
    spec: str
    storage: str
    templates: str | None = None  # the `templates` parameter, for a spec with a custom template
    workflow_namespace: str | None = None  # where the Workflow of `workflow_uid` lives (its jobs' owner)


ARGO: Final = Placeholders(
    workflow_name="{{workflow.name}}",
    workflow_created="{{workflow.creationTimestamp}}",
    workflow_uid="{{workflow.uid}}",
    spec="{{workflow.parameters.spec}}",
    storage="{{workflow.parameters.storage}}",
    workflow_namespace="{{workflow.namespace}}",
)
ARGO_TEMPLATES: Final = "{{workflow.parameters.templates}}"


@dataclass(frozen=True)
class ClusterPlan:
    """A spec as the cluster front-ends see it."""

    template_name: str
    spec_name: str
    spec_text: str
    description: str | None
    image: str
    service_account: str
    namespace: str | None
    storage: str
    volume_claim: str | None
    mount_path: str | None
    parallelism: int
    job_timeout_s: int
    launch_timeout_s: int
    schedule: str | None
    timezone: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    s3: S3Spec
    prometheus: str | None
    templates: str | None = None  # workload.template and its imports as JSON (kaliper.steps.templates)
    chunking: Chunking | None = None  # the chunked shape of a large sweep (kaliper.workflows.chunking)
    server: ServerSpec | None = None  # a serving spec's server (kaliper.workflows.serving)
    placement: dict[str, Any] | None = None  # the jobs' nodeSelector/tolerations, for the server's pods

    @property
    def argo(self) -> Placeholders:
        """Argo's placeholders; `templates` only when the spec has a custom template."""
        return replace(ARGO, templates=ARGO_TEMPLATES) if self.templates is not None else ARGO

    @property
    def launch_deadline_s(self) -> int:
        """Deadline of the launch step's pod: its own wait plus time to start the pod."""
        return self.launch_timeout_s + 300

    @property
    def launch_template_timeout(self) -> str:
        """Argo `timeout` of the launch step."""
        return f"{self.launch_deadline_s}s"

    @property
    def chunk_size(self) -> int | None:
        """Runs per chunk in the chunked shape (the configure step's --chunk-size); None per run."""
        return self.chunking.size if self.chunking is not None else None

    @property
    def fan_out_parallelism(self) -> int:
        """Fan-out nodes at once: runs per run, chunk pods in the chunked shape (each running
        `chunking.concurrency` runs at once), so that runs at once stay within `parallelism`."""
        return self.chunking.parallelism if self.chunking is not None else self.parallelism

    @property
    def chunk_deadline_s(self) -> int:
        """Deadline of a launch-chunk pod: its runs one wave after another, each a launch step's deadline."""
        waves = self.chunking.waves if self.chunking is not None else 1
        return waves * self.launch_deadline_s

    def step_env(self, step: str) -> list[EnvVar]:
        """Env of a step's container (Kubernetes EnvVars): the S3 settings when the storage is s3://
        (credentials as secretKeyRefs to `s3.secret`), and for `report` also KALIPER_PROMETHEUS.

        Decided at compile time from `storage`: a run that overrides the `storage` parameter with an s3://
        URL needs a spec compiled for s3:// storage (e.g. `workflow.storage`)."""
        return step_env(self.storage, self.s3, self.prometheus if step == "report" else None)


def check_cluster_stacks(loaded: LoadedSpec) -> None:
    """A cluster runs images: a stack described by requirements or an interpreter but no image would run
    the job's image under its name, a comparison of nothing. Refused, with how to make the image. (A
    stack with an image and requirements runs the image; the requirements then only describe it.)"""
    for i, stack in enumerate(loaded.spec.stacks):
        if stack.image is None and stack.needs_environment():
            pins = (
                f"-r {stack.requirements_file}"
                if stack.requirements_file
                else " ".join(repr(r) for r in stack.requirements[:3]) or "<the stack's requirements>"
            )
            raise SpecError(
                f"{loaded.source}: stacks[{i}] ({stack.name}): requirements or python without an image; on a "
                "cluster a stack is an image. Build one from the Kaliper step image with the stack's "
                f"requirements (e.g. a Dockerfile `FROM {loaded.spec.workflow.image}` then `RUN pip install "
                f"{pins}`), push it with a digest, and set stacks[{i}].image; `kaliper run` builds the "
                "environment on one machine instead"
            )


def cluster_plan(loaded: LoadedSpec, chunk_threshold: int = CHUNK_THRESHOLD) -> ClusterPlan:
    """`chunk_threshold`: most runs (trials × repetitions) fanned out one node each; above, in chunks."""
    spec = loaded.spec
    if len(loaded.text.encode()) > MAX_SPEC_ARG_BYTES:
        raise SpecError(
            f"{loaded.source}: the spec is {len(loaded.text.encode())} bytes; a workflow passes it as one "
            f"command-line argument, which must stay under {MAX_SPEC_ARG_BYTES} bytes"
        )
    check_cluster_stacks(loaded)
    templates = bundled_templates(loaded)
    storage = spec.workflow.storage or _cluster_storage(spec.storage)
    mount = file_path(storage)
    job_timeout = math.ceil(spec.job.timeout)
    # A queued job's deadline counts from Kueue's admission, so the launch step also waits for that.
    admission = math.ceil(spec.job.admission_timeout) if spec.job.queue is not None else 0
    service_account = spec.workflow.service_account
    if spec.server is not None and "service_account" not in spec.workflow.model_fields_set:
        # the Role that may create the server's kind (manifests/serving/); training specs keep `kaliper`
        service_account = SERVICE_ACCOUNTS[spec.server.kind]
    return ClusterPlan(
        template_name=f"kaliper-{spec.name}",
        spec_name=spec.name,
        spec_text=loaded.text,
        description=spec.description,
        image=spec.workflow.image,
        service_account=service_account,
        namespace=spec.job.namespace,
        storage=storage,
        volume_claim=spec.workflow.volume_claim if mount else None,
        mount_path=mount,
        parallelism=spec.workflow.parallelism,
        job_timeout_s=job_timeout,
        launch_timeout_s=job_timeout + admission + LAUNCH_SLACK_S,
        schedule=spec.schedule,
        timezone=spec.workflow.timezone,
        node_selector=dict(spec.workflow.node_selector),
        tolerations=[t.to_kubernetes() for t in spec.workflow.tolerations],
        s3=spec.s3,
        prometheus=spec.monitoring.prometheus,
        templates=templates,
        chunking=chunking_for(run_count(spec), spec.workflow.parallelism, threshold=chunk_threshold),
        server=spec.server,
        placement=server_placement(spec),
    )


def bundled_templates(loaded: LoadedSpec) -> str | None:
    """The `templates` parameter of a spec with `workload.template` (None without one), size-checked and
    proven sufficient: the spec is configured from the materialized bundle, as the configure step will."""
    from kaliper.configurator import configure
    from kaliper.spec import spec_from_text
    from kaliper.steps.templates import check_bundle_size, materialized, template_bundle

    bundle = template_bundle(loaded)
    if not bundle:
        return None
    text = check_bundle_size(bundle, loaded.source)
    with materialized(bundle) as root:
        configure(
            spec_from_text(loaded.text, loaded.source, root),
            "compile-check",
            "file:///compile-check",
            dump=False,
            server_at="cluster",
        )
    return text


def _cluster_storage(url: str) -> str:
    """A relative file:// path means "this machine": inside a cluster that becomes the default PVC path."""
    path = file_path(url)
    if path is not None and not path.startswith("/"):
        return CLUSTER_STORAGE_DEFAULT
    return url


def _templates(ph: Placeholders) -> list[Any]:
    return ["--templates-json", ph.templates] if ph.templates is not None else []


def _spec_and_workflow(ph: Placeholders) -> list[Any]:
    """What configure and report both need to derive the same experiment id."""
    return [
        "--spec-text",
        ph.spec,
        *_templates(ph),
        "--storage",
        ph.storage,
        "--workflow-name",
        ph.workflow_name,
        "--workflow-created",
        ph.workflow_created,
    ]


def configure_argv(
    ph: Placeholders,
    runs_out: Any = RUNS_OUTPUT,
    experiment_out: Any = EXPERIMENT_OUTPUT,
    chunk_size: int | None = None,
) -> list[Any]:
    """The configure step; KFP passes its own output-file placeholders for the two outputs. With
    `chunk_size` (the chunked shape) it stores the runs in chunks and `runs_out` gets the chunk list."""
    chunked = ["--chunk-size", str(chunk_size)] if chunk_size is not None else []
    return [
        "kaliper",
        "step",
        "configure",
        *_spec_and_workflow(ph),
        "--runs-out",
        runs_out,
        "--experiment-out",
        experiment_out,
        *chunked,
    ]


def launch_argv(
    plan: ClusterPlan, ph: Placeholders, experiment: str, trial: str, repetition: str, sha256: str
) -> list[str]:
    """The launch step: it checks job.yaml against the sha256 from the configure step's runs list and
    against the workflow's spec (not the copy in storage, which benchmark pods can rewrite)."""
    run = ["--trial", trial, "--repetition", repetition, "--job-sha256", sha256]
    return _launch_argv(plan, ph, "launch", experiment, run)


def launch_chunk_argv(
    plan: ClusterPlan, ph: Placeholders, experiment: str, chunk: str, sha256: str
) -> list[str]:
    """The chunked shape's launch step: the runs of chunk `chunk`, read from storage and trusted by the
    chunk's sha256 from the configure step's chunk list, `chunking.concurrency` at once."""
    if plan.chunking is None:
        raise ValueError("launch-chunk is for the chunked shape; this plan fans out per run")
    concurrency = str(plan.chunking.concurrency)
    selection = ["--chunk", chunk, "--chunk-sha256", sha256, "--concurrency", concurrency]
    return _launch_argv(plan, ph, "launch-chunk", experiment, selection)


def _launch_argv(
    plan: ClusterPlan, ph: Placeholders, command: str, experiment: str, selection: list[str]
) -> list[str]:
    argv = [
        "kaliper",
        "step",
        command,
        "--spec-text",
        ph.spec,
        *_templates(ph),
        "--storage",
        ph.storage,
        "--experiment",
        experiment,
        *selection,
        "--workflow-name",
        ph.workflow_name,
        "--timeout",
        str(plan.launch_timeout_s),
    ]
    if ph.workflow_uid is not None:
        argv += ["--workflow-uid", ph.workflow_uid]
    if ph.workflow_namespace is not None:
        argv += ["--workflow-namespace", ph.workflow_namespace]
    if plan.volume_claim is not None and plan.mount_path is not None:
        argv += ["--volume-claim", plan.volume_claim, "--mount-path", plan.mount_path]
    return argv


def report_argv(ph: Placeholders, server: list[str] | None = None) -> list[Any]:
    """`server`: the options that make it delete the run's server first (KFP, serving.server_teardown_args)."""
    return ["kaliper", "step", "report", *_spec_and_workflow(ph), *(server or [])]


def server_create_argv(ph: Placeholders, experiment: Any) -> list[Any]:
    """`kaliper step server-create` (KFP): the objects rebuilt from the spec, labelled with `experiment`."""
    return [
        "kaliper",
        "step",
        "server-create",
        "--spec-text",
        ph.spec,
        *_templates(ph),
        "--experiment",
        experiment,
    ]
