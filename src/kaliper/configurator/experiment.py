"""Spec → experiment → trials → rendered job manifests, planned in memory, then written whole.

Planning renders every trial before anything is written, so a bad template or parameter leaves storage
untouched.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from kaliper._version import __version__
from kaliper.benchmarks import get_workload
from kaliper.configurator.command import render_command
from kaliper.configurator.jobcheck import JobExpectations, manifest_problem
from kaliper.configurator.manifest_yaml import dump_manifest as dump_manifest
from kaliper.configurator.podenv import job_env, stack_env, workload_env
from kaliper.configurator.render import BUILTIN_TEMPLATES, LIBRARY_DIR, TemplateEvaluator
from kaliper.errors import SpecError, TemplateError
from kaliper.jobs.kubeflow import LABEL_EXPERIMENT, LABEL_TRIAL
from kaliper.jobs.manifest import replica_counts
from kaliper.results.documents import ExperimentDoc, JobRef, StackRef, TrialDoc, to_document
from kaliper.spec import BenchmarkSpec, LoadedSpec, StackSpec
from kaliper.spec.server import Where
from kaliper.storage import Storage, layout
from kaliper.storage.base import dump_json


@dataclass(frozen=True)
class TrialPlan:
    doc: TrialDoc
    manifest: dict[str, Any]
    # job.yaml as dumped while the template workers rendered other trials (configure), if it was
    dumped: str | None = field(default=None, repr=False, compare=False)

    @cached_property
    def job_yaml(self) -> str:
        """job.yaml as stored (once: dumping YAML is most of the cost of writing a big sweep)."""
        return self.dumped if self.dumped is not None else dump_manifest(self.manifest)

    @cached_property
    def job_sha256(self) -> str:
        """What the launch step checks job.yaml against before creating the job."""
        return hashlib.sha256(self.job_yaml.encode()).hexdigest()


@dataclass(frozen=True)
class ExperimentPlan:
    experiment: ExperimentDoc
    trials: list[TrialPlan]
    spec_text: str
    # A workload's input files read beside the spec (a serve dataset, a tokenizer): {stored name: bytes},
    # kept with the experiment (kaliper.storage.layout.input_key) for its replicas to read.
    inputs: dict[str, bytes] = field(default_factory=dict)


def new_experiment_id(name: str, now: datetime | None = None) -> str:
    """`<name>-<yyyymmddThhmmssZ>-<4 hex>`: sortable by time, unique across concurrent runs."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}-{secrets.token_hex(2)}"


def experiment_id_for_workflow(spec_name: str, workflow_name: str, created: datetime) -> str:
    """The experiment id of a cluster run: a pure function of the workflow, so every step (and a retried
    one) derives the same id without passing it around: `<name>-<workflow creation time>-<4 hex of its name>`."""
    stamp = created.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{spec_name}-{stamp}-{hashlib.sha256(workflow_name.encode()).hexdigest()[:4]}"


def matrix_points(matrix: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Cartesian product in the order the spec lists keys and values."""
    keys = list(matrix)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(matrix[k] for k in keys))]


def _stacks(spec: BenchmarkSpec) -> list[StackSpec]:
    return spec.stacks or [StackSpec(name="default", image=spec.job.image)]


def _trial_params(spec: BenchmarkSpec, point: dict[str, Any], server_at: Where = "local") -> dict[str, Any]:
    """`server_at`: where the spec's `server:` runs (kaliper.spec.server), which decides the serve
    workload's url and whether it starts the server itself."""
    server = {} if spec.server is None else spec.server.serve_params(spec.name, spec.job.namespace, server_at)
    given = {**spec.workload.params, **point, **server}
    if spec.workload.name is None:
        return given
    definition = get_workload(spec.workload.name)
    return definition.params.resolve(given, definition.name, "params")


def configure(
    loaded: LoadedSpec,
    experiment_id: str | None = None,
    storage_url: str | None = None,
    now: datetime | None = None,
    dump: bool = True,
    server_at: Where = "local",
) -> ExperimentPlan:
    """Expand the spec into trials and render each trial's job; nothing is written. `dump`: job.yaml of
    each trial is made while the template workers render the next ones (for a plan that is written;
    `kaliper validate` writes nothing, and leaves the CPU to the workers)."""
    spec = loaded.spec
    created = now or datetime.now(UTC)
    experiment_id = experiment_id or new_experiment_id(spec.name, created)
    storage = storage_url or spec.storage
    template, roots = template_location(loaded)
    rules = spec.workload.rules()
    workload: dict[str, Any] = {
        "name": spec.workload.name or "custom",
        "framework": spec.workload.framework,
        # a command workload: its argv (rendered per trial below), whether `kaliper exec` wraps it, and
        # the extraction rules the wrapper (or the executor reading logs) applies
        "command": None,
        "wrap": spec.workload.wrap,
        "rules": None if rules is None else rules.to_json(),
    }
    workload_vars = get_workload(spec.workload.name).env if spec.workload.name is not None else ()
    sampling = spec.sampling.model_dump(exclude={"interference"})  # what the templates get: unchanged
    sampling["max_time_s"] = sampling.pop("max_time")
    documented = dict(sampling)  # experiment.json: the interference section only when not the default,
    if not spec.sampling.interference.is_default():  # so documents of specs without one stay as they were
        documented["interference"] = spec.sampling.interference.document()

    pending: list[tuple[int, StackSpec, dict[str, Any], dict[str, Any], dict[str, Any]]] = []
    definition = get_workload(spec.workload.name) if spec.workload.name is not None else None
    inputs: dict[str, bytes] = {}
    for index, (stack, point) in enumerate(itertools.product(_stacks(spec), matrix_points(spec.matrix))):
        trial_id = f"t{index:03d}"
        params = _trial_params(spec, point, server_at)
        if definition is not None and definition.inputs:
            inputs |= definition.configure_inputs(
                params, loaded.base_dir, f"{loaded.source}: workload.params", server_at == "cluster"
            )
        image = stack.image or spec.job.image
        run: dict[str, Any] = {
            "experiment": experiment_id,
            "trial": trial_id,
            "storage": storage,
            "name": f"{spec.name}-{trial_id}",
            "namespace": spec.job.namespace,
            "labels": {LABEL_EXPERIMENT: experiment_id, LABEL_TRIAL: trial_id},
            # Pushgateway and s3:// settings (secretKeyRefs, never credential values), appended by kaliper.env
            "env": job_env(spec, storage) + workload_env(workload_vars, stack.env) + stack_env(stack.env),
        }
        job = {
            "kind": spec.job.kind,
            "replicas": spec.job.replicas,
            "image": image,
            "resources": spec.job.resources.model_dump(),
            "timeout_seconds": math.ceil(spec.job.timeout),
            "service_account": spec.job.service_account,
            "node_selector": spec.job.node_selector,
            "tolerations": [t.to_kubernetes() for t in spec.job.tolerations],
            "success_policy": spec.job.success_policy,
            "runtime": spec.job.runtime.model_dump(),
            "nodes": spec.job.nodes,
            "procs_per_node": spec.job.procs_per_node,
            "queue": spec.job.queue,
            "priority_class": spec.job.priority_class,
        }
        command = None if spec.workload.command is None else render_command(spec.workload.command, params)
        arguments = {
            "run": run,
            "job": job,
            "workload": {**workload, "command": command},
            "params": params,
            "sampling": sampling,
        }
        pending.append((index, stack, point, params, arguments))

    # One bounded worker renders every trial (kaliper.configurator.render), then every manifest is checked:
    # all before anything is written.
    dumped: dict[int, str] = {}

    def dump_each(start: int, values: list[Any]) -> None:
        """job.yaml of each manifest as it arrives, while the workers evaluate the next batches (at 10,000
        trials it shares the cores with them: configure took 0.4 s longer, configure + write about 1 s
        less). One that cannot be dumped is left to the checks below, which name the problem."""
        for offset, manifest in enumerate(values):
            try:
                dumped[start + offset] = dump_manifest(manifest)
            except Exception:
                continue

    with TemplateEvaluator() as evaluator:
        rendered = evaluator.render(
            template,
            roots,
            [p[4] for p in pending],
            [p[4]["run"]["trial"] for p in pending],
            dump_each if dump else None,
        )
    expect = JobExpectations.of(spec)
    trials: list[TrialPlan] = []
    for (index, stack, point, params, arguments), manifest in zip(pending, rendered, strict=True):
        run = arguments["run"]
        problem = manifest_problem(manifest, expect)
        if problem is not None:
            raise TemplateError(f"{_describe(loaded, template)} (trial {run['trial']}): {problem}")
        if definition is not None and definition.job_check:
            definition.check_job(params, replica_counts(manifest), storage, loaded.source)
        doc = TrialDoc(
            experiment=experiment_id,
            id=run["trial"],
            index=index,
            params=params,
            matrix_point=point,
            stack=StackRef(
                name=stack.name,
                image=arguments["job"]["image"],
                requirements=stack.requirements,
                requirements_file=stack.requirements_file,
                env=stack.env,
                python=stack.python,
            ),
            job=JobRef(kind=spec.job.kind, name=run["name"], replicas=replica_counts(manifest)),
        )
        trials.append(TrialPlan(doc=doc, manifest=manifest, dumped=dumped.get(len(trials))))

    experiment = ExperimentDoc(
        id=experiment_id,
        spec_name=spec.name,
        created=created,
        kaliper_version=__version__,
        storage=storage,
        workload={
            "name": spec.workload.name,
            "template": spec.workload.template,
            "framework": spec.workload.framework,
            "params": spec.workload.params,
            **_own_job(spec, workload["rules"]),
        },
        repetitions=spec.repetitions,
        sampling=documented,
        matrix=spec.matrix,
        trials=[t.doc.id for t in trials],
        monitoring=spec.monitoring.model_dump(),
        report=spec.report.model_dump(),
    )
    return ExperimentPlan(experiment=experiment, trials=trials, spec_text=loaded.text, inputs=inputs)


def _own_job(spec: BenchmarkSpec, rules: str | None) -> dict[str, Any]:
    """What experiment.json says of the user's own job (nothing for a built-in workload, whose documents
    stay as they were): the command, whether it is wrapped, the extraction rules (JSON) runners apply."""
    if spec.workload.command is None and rules is None:
        return {}
    return {
        "command": spec.workload.command,
        "wrap": spec.workload.wrap,
        "rules": rules,
    }


def _describe(loaded: LoadedSpec, template: Path) -> str:
    """How errors name the template: the spec's `workload.template` and where it led, or the built-in."""
    if loaded.spec.workload.template is None:
        return f"{loaded.source}: built-in template {template.name}"
    return f"{loaded.source}: workload.template {loaded.spec.workload.template!r} ({template})"


def write_plan(plan: ExperimentPlan, storage: Storage) -> None:
    """Store spec.yaml, experiment.json and every trial's trial.json and job.yaml.

    The trials' objects go through `put_many` (file://: one file-system sync for all of them instead of
    an fsync each); each object is still written whole, and experiment.json only after all."""
    exp = plan.experiment.id
    storage.put(layout.spec_key(exp), plan.spec_text.encode())
    objects = (
        (key, data)
        for trial in plan.trials
        for key, data in (
            (layout.trial_key(exp, trial.doc.id), dump_json(to_document(trial.doc))),
            (layout.job_key(exp, trial.doc.id), trial.job_yaml.encode()),
        )
    )
    storage.put_many(objects)
    storage.put_many((layout.input_key(exp, name), data) for name, data in sorted(plan.inputs.items()))
    # experiment.json last: its presence means the experiment is fully configured.
    storage.put_json(layout.experiment_key(exp), to_document(plan.experiment))


def template_location(loaded: LoadedSpec) -> tuple[Path, list[Path]]:
    """The template to evaluate and its import roots.

    A custom template must be a relative path that, symlinks resolved, lies inside the spec's directory;
    that directory is then the import root (with Kaliper's library). So neither an absolute path nor a
    symlink can move the boundary of what a template may read.
    """
    spec = loaded.spec
    if spec.workload.template is None:
        return BUILTIN_TEMPLATES[spec.job.kind], [LIBRARY_DIR]
    given = spec.workload.template
    root = loaded.base_dir.resolve()
    where = f"{loaded.source}: workload.template"
    if Path(given).is_absolute():
        raise SpecError(f"{where}: expected a path relative to the spec's directory {root}, found {given!r}")
    resolved = (loaded.base_dir / given).resolve()
    if not resolved.is_relative_to(root):
        raise SpecError(
            f"{where}: expected a file inside the spec's directory {root}, found {given!r} -> {resolved} "
            "(templates and their imports are confined to the spec's directory; copy the file there)"
        )
    if not resolved.is_file():
        raise SpecError(f"{where}: no such file {str(loaded.base_dir / given)!r}")
    return resolved, [root]


def template_path(loaded: LoadedSpec) -> Path:
    return template_location(loaded)[0]
