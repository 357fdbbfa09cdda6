"""The configurator in-process: jsonnet rendering (confined imports, exact numbers), configure(), for_repetition()."""

from __future__ import annotations

import copy
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.configurator.experiment import dump_manifest
from kaliper.configurator.render import BUILTIN_TEMPLATES, LIBRARY_DIR, render_template
from kaliper.errors import SpecError, TemplateError
from kaliper.jobs.kubeflow import LABEL_EXPERIMENT, LABEL_REPETITION, LABEL_TRIAL
from kaliper.jobs.manifest import for_repetition, replica_specs
from kaliper.spec import LoadedSpec, spec_from_text

NOW = datetime(2026, 11, 21, 10, 15, 0, tzinfo=UTC)
SECRET = "KALIPER-SECRET-c0ffee"
# The arguments every template function takes; the confinement tests below only need them to exist.
ARGUMENTS: dict[str, Any] = {"run": {}, "job": {}, "workload": {}, "params": {}, "sampling": {}}

SPEC = """\
name: bench
workload:
  name: pi-matmul
  params: {device: cpu}
matrix:
  matrix_size: [64, 128, 256]
  dtype: [float32, float64]
repetitions: 2
sampling: {warmup: 1, min_samples: 6, max_samples: 50, max_time: 2s}
job:
  kind: PyTorchJob
  replicas: {Master: 1, Worker: 2}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  resources: {cpu: "2", memory: 4Gi}
  timeout: 90s
stacks:
  - {name: torch-a, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"}
  - {name: torch-b, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.1"}
storage: file:///results
"""


def load(text: str, base_dir: Path, source: str = "spec.yaml") -> LoadedSpec:
    return spec_from_text(text, source, base_dir)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for spec in replica_specs(manifest).values() for c in spec["template"]["spec"]["containers"]]


def option(args: list[str], name: str) -> str:
    """The value after `name` in an argv list."""
    assert args.count(name) == 1, (name, args)
    return args[args.index(name) + 1]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


# --- user templates and confined imports ---------------------------------------------------------------

USER_TEMPLATE = """\
local kaliper = import 'kaliper.libsonnet';
local site = import 'site.libsonnet';
local banner = importstr 'banner.txt';

function(run, job, workload, params, sampling)
  local container = kaliper.container(
    'pytorch', { name: 'pytorchjob-port', containerPort: 23456 }, run, job, workload, params, sampling
  ) + { env+: [{ name: 'SITE', value: site.name }] };
  {
    apiVersion: 'kubeflow.org/v1',
    kind: 'PyTorchJob',
    metadata: kaliper.metadata(run) + { annotations: { banner: banner } },
    spec: {
      runPolicy: kaliper.runPolicy(job),
      pytorchReplicaSpecs: kaliper.replicaSpecs(container, run, job),
    },
  }
"""


def test_user_template_imports_sibling_and_library(tmp_path: Path) -> None:
    write(tmp_path / "tpl" / "site.libsonnet", "{ name: 'lab-7' }\n")
    write(tmp_path / "tpl" / "banner.txt", "hello from the banner")
    write(tmp_path / "tpl" / "job.jsonnet", USER_TEMPLATE)
    text = SPEC.replace("  name: pi-matmul\n", "  name: pi-matmul\n  template: tpl/job.jsonnet\n")
    plan = configure(load(text, tmp_path), experiment_id="bench-x", now=NOW)

    assert len(plan.trials) == 12
    for trial in plan.trials:
        manifest = trial.manifest
        assert manifest["kind"] == "PyTorchJob"
        assert manifest["metadata"]["annotations"] == {"banner": "hello from the banner"}
        # kaliper.libsonnet did its part: labels, run policy, the workload's argv
        assert manifest["metadata"]["labels"] == {LABEL_EXPERIMENT: "bench-x", LABEL_TRIAL: trial.doc.id}
        assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 90
        for container in containers(manifest):
            assert env_of(container)["SITE"] == "lab-7"
            assert container["args"][:2] == ["workload", "pi-matmul"]
            assert f"matrix_size={trial.doc.params['matrix_size']}" in container["args"]


def test_render_template_returns_the_function_value(tmp_path: Path) -> None:
    template = write(
        tmp_path / "t.jsonnet",
        "local k = import 'kaliper.libsonnet';\n"
        "function(run, job, workload, params, sampling) { name: run.name, arg: k.arg(params.n), s: sampling }\n",
    )
    arguments = {**ARGUMENTS, "run": {"name": "r1"}, "params": {"n": 512}, "sampling": {"a": [1, "b"]}}
    assert render_template(template, arguments) == {"name": "r1", "arg": "512", "s": {"a": [1, "b"]}}


def confinement_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """tmp/tpl (the template directory) and tmp/outside, holding a secret file each form may try to read."""
    tpl, outside = tmp_path / "tpl", tmp_path / "outside"
    write(outside / "secret.libsonnet", f"{{ token: '{SECRET}' }}\n")
    write(tpl / "inside.libsonnet", f"{{ token: '{SECRET}' }}\n")
    return tpl, outside


@pytest.mark.parametrize("form", ["import", "importstr", "importbin"])
@pytest.mark.parametrize("how", ["parent-dir", "symlink-to-file", "symlink-to-dir", "absolute"])
def test_imports_outside_the_template_dir_are_refused(tmp_path: Path, form: str, how: str) -> None:
    tpl, outside = confinement_dirs(tmp_path)
    target = {
        "parent-dir": "../outside/secret.libsonnet",
        "symlink-to-file": "link.libsonnet",
        "symlink-to-dir": "linkdir/secret.libsonnet",
        "absolute": str(outside / "secret.libsonnet"),
    }[how]
    (tpl / "link.libsonnet").symlink_to(outside / "secret.libsonnet")
    (tpl / "linkdir").symlink_to(outside, target_is_directory=True)
    template = write(
        tpl / "job.jsonnet", f"function(run, job, workload, params, sampling) {{ x: {form} '{target}' }}\n"
    )

    with pytest.raises(TemplateError) as excinfo:
        render_template(template, ARGUMENTS)
    message = str(excinfo.value)
    assert str(template.resolve()) in message
    assert ("absolute paths are not allowed" if how == "absolute" else "outside") in message
    assert "confined" in message
    assert SECRET not in message


@pytest.mark.parametrize("form", ["import", "importstr"])
def test_imports_inside_the_template_dir_are_served(tmp_path: Path, form: str) -> None:
    """Control for the refusals above: the same forms, reading a file that lies inside (also via a symlink)."""
    tpl, _ = confinement_dirs(tmp_path)
    (tpl / "sub").mkdir()
    (tpl / "sub" / "link.libsonnet").symlink_to(tpl / "inside.libsonnet")
    for target in ("inside.libsonnet", "sub/link.libsonnet", "sub/../inside.libsonnet"):
        template = write(
            tpl / "job.jsonnet", f"function(run, job, workload, params, sampling) {form} '{target}'\n"
        )
        expected: Any = {"token": SECRET} if form == "import" else f"{{ token: '{SECRET}' }}\n"
        assert render_template(template, ARGUMENTS) == expected, target


def test_library_files_are_importable_but_not_beyond_the_library(tmp_path: Path) -> None:
    template = write(
        tmp_path / "t.jsonnet",
        "function(run, job, workload, params, sampling) std.length(importstr 'kaliper.libsonnet')\n",
    )
    assert render_template(template, ARGUMENTS) == len((LIBRARY_DIR / "kaliper.libsonnet").read_text())
    # the library directory's parent holds Kaliper's Python source: not reachable through the fallback
    write(template, "function(run, job, workload, params, sampling) importstr '../render.py'\n")
    with pytest.raises(TemplateError, match="outside"):
        render_template(template, ARGUMENTS)


def test_template_errors_name_the_template(tmp_path: Path) -> None:
    template = write(tmp_path / "broken.jsonnet", "function(run, job, workload, params, sampling) { a: }\n")
    with pytest.raises(TemplateError, match=r"broken\.jsonnet.*jsonnet evaluation failed"):
        render_template(template, ARGUMENTS)
    with pytest.raises(TemplateError, match="no such template file"):
        render_template(tmp_path / "missing.jsonnet", ARGUMENTS)


def test_template_rendering_the_wrong_kind_is_refused_by_configure(tmp_path: Path) -> None:
    write(tmp_path / "job.jsonnet", USER_TEMPLATE.replace("kind: 'PyTorchJob'", "kind: 'TFJob'"))
    write(tmp_path / "site.libsonnet", "{ name: 'x' }\n")
    write(tmp_path / "banner.txt", "")
    text = SPEC.replace("  name: pi-matmul\n", "  name: pi-matmul\n  template: job.jsonnet\n")
    with pytest.raises(
        TemplateError, match=r"\(trial t000\): kind: expected PyTorchJob \(job.kind\), found 'TFJob'"
    ):
        configure(load(text, tmp_path), experiment_id="bench-x")


# --- numbers on the command line ----------------------------------------------------------------------


def sampling_spec(target_rel_ci: float, confidence: float, max_time: float = 4.0) -> str:
    return (
        "name: nums\nworkload: {name: pi-matmul}\nrepetitions: 1\n"
        f"sampling: {{target_rel_ci: {target_rel_ci!r}, confidence: {confidence!r}, max_time: {max_time!r}}}\n"
    )


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob"])
def test_builtin_templates_render_sampling_args_exactly(tmp_path: Path, kind: str) -> None:
    text = sampling_spec(1 / 3, 0.95, 2.5)
    if kind == "TFJob":
        # pi-matmul has no tensorflow implementation, so the built-in TFJob template is named explicitly
        # (a copy beside the spec: templates must lie in the spec's directory).
        shutil.copy(BUILTIN_TEMPLATES[kind], tmp_path / "tfjob.libsonnet")
        text = text.replace("{name: pi-matmul}", "{name: pi-matmul, template: tfjob.libsonnet}")
        text += "job: {kind: TFJob, replicas: {Worker: 1}, image: 'ghcr.io/kaliper-dev/kaliper-tensorflow:0.1.0'}\n"
    plan = configure(load(text, tmp_path), experiment_id="nums-x")
    (container,) = containers(plan.trials[0].manifest)
    args = container["args"]
    assert option(args, "--confidence") == "0.95"
    assert float(option(args, "--target-rel-ci")) == 1 / 3
    assert option(args, "--max-time") == "2.5"
    assert option(args, "--warmup") == "5"
    assert option(args, "--min-samples") == "10"
    assert option(args, "--max-samples") == "2000"
    assert all(isinstance(a, str) for a in args)


ROUND_TRIP = [
    0.95,
    0.02,
    0.1,
    1 / 3,
    2 / 3,
    -1 / 3,
    3.141592653589793,
    1e-7,
    5e-324,
    1e20,
    1e308,
    2.5,
    0.1 + 0.2,  # 0.30000000000000004: 17 significant digits needed
    0.12345678901234568,
    1.2345678901234567e19,
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=[repr(v) for v in ROUND_TRIP])
def test_arg_round_trips_every_double(tmp_path: Path, value: float) -> None:
    """kaliper.arg(x): the text parses back to the same double (what the workload measures is what was asked)."""
    template = write(
        tmp_path / "t.jsonnet",
        "local k = import 'kaliper.libsonnet';\nfunction(run, job, workload, params, sampling) k.arg(params.x)\n",
    )
    text = render_template(template, {**ARGUMENTS, "params": {"x": value}})
    assert float(text) == value, text
    assert re.fullmatch(r"-?[0-9.]+(e[-+]?[0-9]+)?", text), text


@pytest.mark.parametrize(
    ("value", "text"), [(0.95, "0.95"), (0.02, "0.02"), (512, "512"), (2.0, "2"), (1e-7, "1e-07")]
)
def test_arg_prefers_the_short_spelling(tmp_path: Path, value: float, text: str) -> None:
    template = write(
        tmp_path / "t.jsonnet",
        "local k = import 'kaliper.libsonnet';\nfunction(run, job, workload, params, sampling) k.arg(params.x)\n",
    )
    assert render_template(template, {**ARGUMENTS, "params": {"x": value}}) == text


def test_target_rel_ci_that_needs_17_digits_reaches_the_workload_unchanged(tmp_path: Path) -> None:
    value = 0.1 + 0.2
    plan = configure(load(sampling_spec(value, 0.95), tmp_path), experiment_id="nums-x")
    (container,) = containers(plan.trials[0].manifest)
    assert plan.experiment.sampling["target_rel_ci"] == value
    assert float(option(container["args"], "--target-rel-ci")) == value


# --- configure() ----------------------------------------------------------------------------------------


def test_configure_one_trial_per_stack_and_matrix_point_in_order(tmp_path: Path) -> None:
    plan = configure(load(SPEC, tmp_path), experiment_id="bench-20261121T101500Z-abcd", now=NOW)
    expected = [
        (stack, image, {"matrix_size": n, "dtype": dtype})
        for stack, image in (
            ("torch-a", "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"),
            ("torch-b", "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.1"),
        )
        for n in (64, 128, 256)
        for dtype in ("float32", "float64")
    ]
    assert len(plan.trials) == len(expected) == 12
    assert plan.experiment.trials == [f"t{i:03d}" for i in range(12)]
    assert plan.experiment.repetitions == 2
    assert plan.experiment.created == NOW
    for index, (trial, (stack, image, point)) in enumerate(zip(plan.trials, expected, strict=True)):
        doc = trial.doc
        assert (doc.id, doc.index, doc.experiment) == (f"t{index:03d}", index, "bench-20261121T101500Z-abcd")
        assert doc.matrix_point == point
        # every parameter the workload gets, defaults included
        assert doc.params == {**point, "device": "cpu", "threads": 0, "calls_per_sample": 0}
        assert (doc.stack.name, doc.stack.image) == (stack, image)
        assert doc.job.kind == "PyTorchJob"
        assert doc.job.name == f"bench-{doc.id}" == trial.manifest["metadata"]["name"]
        assert doc.job.replicas == {"Master": 1, "Worker": 2}
        labels = {LABEL_EXPERIMENT: doc.experiment, LABEL_TRIAL: doc.id}
        assert trial.manifest["metadata"]["labels"] == labels
        for spec in replica_specs(trial.manifest).values():
            assert spec["template"]["metadata"]["labels"] == labels
        for container in containers(trial.manifest):
            assert container["image"] == image
            params = [container["args"][i + 1] for i, a in enumerate(container["args"]) if a == "--param"]
            assert params == [f"{k}={doc.params[k]}" for k in sorted(doc.params)]
            env = env_of(container)
            assert env["KALIPER_EXPERIMENT"] == doc.experiment
            assert env["KALIPER_TRIAL"] == doc.id
            assert env["KALIPER_STORAGE"] == "file:///results"


def test_configure_without_matrix_or_stacks_is_one_default_trial(tmp_path: Path) -> None:
    plan = configure(load("name: one\nworkload: {name: pi-matmul}\n", tmp_path), now=NOW)
    assert [t.doc.id for t in plan.trials] == ["t000"]
    assert plan.trials[0].doc.stack.name == "default"
    assert plan.trials[0].doc.matrix_point == {}
    assert re.fullmatch(r"one-20261121T101500Z-[0-9a-f]{4}", plan.experiment.id)
    assert plan.experiment.storage == "file://./kaliper-results"


def test_configure_storage_url_override(tmp_path: Path) -> None:
    plan = configure(load(SPEC, tmp_path), experiment_id="bench-x", storage_url="file:///elsewhere")
    assert plan.experiment.storage == "file:///elsewhere"
    assert all(
        env_of(c)["KALIPER_STORAGE"] == "file:///elsewhere"
        for t in plan.trials
        for c in containers(t.manifest)
    )


def test_configure_is_deterministic(tmp_path: Path) -> None:
    loaded = load(SPEC, tmp_path)
    first = configure(loaded, experiment_id="bench-x", now=NOW)
    second = configure(load(SPEC, tmp_path), experiment_id="bench-x", now=NOW)
    assert [t.manifest for t in first.trials] == [t.manifest for t in second.trials]
    assert [dump_manifest(t.manifest) for t in first.trials] == [
        dump_manifest(t.manifest) for t in second.trials
    ]
    assert [t.doc for t in first.trials] == [t.doc for t in second.trials]
    assert first.experiment == second.experiment
    # Another experiment id changes the identity and nothing else.
    other = configure(loaded, experiment_id="bench-y", now=NOW)
    for a, b in zip(first.trials, other.trials, strict=True):
        assert a.manifest != b.manifest
        assert dump_manifest(b.manifest).replace("bench-y", "bench-x") == dump_manifest(a.manifest)


def test_spec_from_text_gates_parameters_before_configure(tmp_path: Path) -> None:
    """spec_from_text is the gate: a parameter the workload does not take never reaches configure()."""
    with pytest.raises(SpecError, match=r"matrix\.bogus"):
        load(SPEC.replace("  dtype: [float32, float64]\n", "  bogus: [1]\n"), tmp_path)


# --- for_repetition() --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job",
    [
        "{kind: PyTorchJob, replicas: {Master: 1, Worker: 2}, image: 'ghcr.io/k/p:1.0'}",
        "{kind: TFJob, replicas: {Chief: 1, PS: 1, Worker: 2}, image: 'ghcr.io/k/t:1.0'}",
    ],
)
def test_for_repetition_instantiates_without_mutating(tmp_path: Path, job: str) -> None:
    kind = "TFJob" if "TFJob" in job else "PyTorchJob"
    shutil.copy(BUILTIN_TEMPLATES[kind], tmp_path / "job.libsonnet")
    text = f"name: reps\nworkload: {{name: pi-matmul, template: job.libsonnet}}\njob: {job}\n"
    manifest = configure(load(text, tmp_path), experiment_id="reps-x").trials[0].manifest
    original = copy.deepcopy(manifest)

    rep = for_repetition(manifest, 2)

    assert manifest == original  # the stored job.yaml stays the trial's, not one repetition's
    assert rep["metadata"]["name"] == "reps-t000-r2"
    assert rep["metadata"]["labels"] == {**original["metadata"]["labels"], LABEL_REPETITION: "2"}
    expected = copy.deepcopy(original)
    expected["metadata"]["name"] = "reps-t000-r2"
    expected["metadata"]["labels"][LABEL_REPETITION] = "2"
    for spec in replica_specs(expected).values():
        spec["template"]["metadata"]["labels"][LABEL_REPETITION] = "2"
        for container in spec["template"]["spec"]["containers"]:
            container["env"].append({"name": "KALIPER_REPETITION", "value": "2"})
    assert rep == expected
    assert len(replica_specs(rep)) == (2 if kind == "PyTorchJob" else 3)

    # Instantiating again replaces KALIPER_REPETITION instead of adding a second one.
    again = for_repetition(rep, 3)
    for container in containers(again):
        assert [e["value"] for e in container["env"] if e["name"] == "KALIPER_REPETITION"] == ["3"]
    assert containers(rep)[0]["env"][-1] == {"name": "KALIPER_REPETITION", "value": "2"}
