"""The fast configure path (native `kaliper.arg`, shared batch values, two workers, libyaml, concurrent
writes) produces exactly what the reference path produces, and keeps its errors and storage rules."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kaliper.configurator import configure, manifest_yaml, write_plan
from kaliper.configurator.render import REFERENCE_ENV, TemplateEvaluator, pool_arguments
from kaliper.errors import TemplateError
from kaliper.results.documents import to_document
from kaliper.spec import load_spec, spec_from_text
from kaliper.storage import Storage, open_storage
from tests.support.paths import EXAMPLES

NOW = datetime(2026, 11, 24, 5, 0, 0, tzinfo=UTC)


def python_yaml(manifest: dict[str, Any]) -> str:
    return yaml.dump(
        manifest, Dumper=manifest_yaml._ManifestDumper, sort_keys=False, default_flow_style=False
    )


def configured(path: Path, monkeypatch: pytest.MonkeyPatch, reference: bool) -> list[tuple[Any, str]]:
    """(trial.json document, job.yaml) of every trial; the reference path writes YAML with PyYAML alone."""
    monkeypatch.setenv(REFERENCE_ENV, "1" if reference else "0")
    loaded = load_spec(path)
    plan = configure(loaded, experiment_id=f"{loaded.spec.name}-x", storage_url="file:///results", now=NOW)
    dump = python_yaml if reference else manifest_yaml.dump_manifest
    return [(to_document(t.doc), dump(t.manifest)) for t in plan.trials]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_configures_the_same_on_both_paths(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured(path, monkeypatch, reference=False) == configured(path, monkeypatch, reference=True)


SWEEP = """\
name: sweep
workload: {name: pi-matmul, params: {device: cpu}}
matrix:
  matrix_size: [16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192]
  calls_per_sample: [1, 2, 3, 4, 5]
  threads: [1, 2, 3, 4, 5]
sampling: {warmup: 0, target_rel_ci: 0.015, min_samples: 6, max_samples: 10, max_time: 1.5s}
stacks:
  - {name: a, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0"}
  - {name: b, image: "ghcr.io/kaliper-dev/kaliper-pytorch:0.1.1"}
"""


def test_a_sweep_in_several_batches_and_workers_is_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 trials: batches on two workers (where there are two cores), values shared; the same manifests
    and the same stored bytes (concurrent writes, libyaml) as the reference path with sequential writes."""
    loaded = spec_from_text(SWEEP, "sweep.yaml", tmp_path)
    plans = {}
    for reference in (True, False):
        monkeypatch.setenv(REFERENCE_ENV, "1" if reference else "0")
        plans[reference] = configure(loaded, experiment_id="sweep-x", storage_url="file:///results", now=NOW)
    assert len(plans[False].trials) == 600
    assert [t.manifest for t in plans[False].trials] == [t.manifest for t in plans[True].trials]
    monkeypatch.setattr(manifest_yaml, "_FastDumper", None)  # the reference writes job.yaml with PyYAML alone
    monkeypatch.setattr(manifest_yaml, "BLOCK_WRITER", False)
    sequential = open_storage(f"file://{tmp_path / 'reference'}")
    monkeypatch.setattr(type(sequential), "put_many", Storage.put_many)  # one put (and fsync) after another
    write_plan(plans[True], sequential)
    monkeypatch.undo()
    write_plan(plans[False], open_storage(f"file://{tmp_path / 'fast'}"))
    files = {
        name: {
            p.relative_to(tmp_path / name): p.read_bytes()
            for p in (tmp_path / name).rglob("*")
            if p.is_file()
        }
        for name in ("reference", "fast")
    }
    assert len(files["fast"]) == 2 * 600 + 2
    assert files["fast"] == files["reference"]


FAILS_AT = """\
local k = import 'kaliper.libsonnet';
function(run, job, workload, params, sampling)
  if params.matrix_size == 160 && params.threads == 4 then error 'no such size: ' + params.matrix_size
  else (import 'pytorchjob.libsonnet')(run, job, workload, params, sampling)
"""


def test_a_failing_trial_in_a_later_batch_is_named(tmp_path: Path) -> None:
    """t228 (stack a, matrix_size 160, threads 4) is the first that fails, in a batch after the first ones."""
    (tmp_path / "job.jsonnet").write_text(FAILS_AT)
    spec = SWEEP.replace("workload: {name: pi-matmul,", "workload: {name: pi-matmul, template: job.jsonnet,")
    with pytest.raises(TemplateError) as caught:
        configure(spec_from_text(spec, "sweep.yaml", tmp_path), experiment_id="sweep-x", now=NOW)
    message = str(caught.value)
    assert "(trial t228)" in message and "no such size: 160" in message, message


def test_pool_arguments_sends_a_shared_value_once() -> None:
    sampling = {"warmup": 1}
    chunk = [{"run": {"trial": f"t{i}"}, "job": {"image": "x"}, "sampling": sampling} for i in range(3)]
    pooled = pool_arguments(chunk)
    assert pooled["values"] == [
        {"trial": "t0"},
        {"image": "x"},
        {"warmup": 1},
        {"trial": "t1"},
        {"trial": "t2"},
    ]
    assert pooled["calls"][2] == {"run": 4, "job": 1, "sampling": 2}
    assert len(pool_arguments(chunk, share=False)["values"]) == 9


def test_render_keeps_the_order_with_one_evaluator_for_many_calls(tmp_path: Path) -> None:
    template = tmp_path / "t.jsonnet"
    template.write_text("function(run, params) {n: params.n * 2, t: run.trial}\n")
    arguments = [{"run": {"trial": f"t{i:03d}"}, "params": {"n": i + 0.5}} for i in range(400)]
    with TemplateEvaluator() as evaluator:
        values = evaluator.render(template, [tmp_path], arguments, [f"t{i:03d}" for i in range(400)])
    assert values == [{"n": (i + 0.5) * 2, "t": f"t{i:03d}"} for i in range(400)]


def test_render_hands_each_batch_to_on_values_as_it_arrives(tmp_path: Path) -> None:
    template = tmp_path / "t.jsonnet"
    template.write_text("function(run, params) {n: params.n, t: run.trial}\n")
    arguments = [{"run": {"trial": f"t{i:03d}"}, "params": {"n": i}} for i in range(400)]
    seen: dict[int, Any] = {}

    def on_values(start: int, values: list[Any]) -> None:
        for offset, value in enumerate(values):
            assert start + offset not in seen
            seen[start + offset] = value

    with TemplateEvaluator() as evaluator:
        values = evaluator.render(
            template, [tmp_path], arguments, [a["run"]["trial"] for a in arguments], on_values
        )
    assert [seen[i] for i in range(400)] == values


def test_configure_dumps_job_yaml_while_rendering_and_validate_does_not(tmp_path: Path) -> None:
    """Each trial's job.yaml is made as its batch arrives (what write_plan then stores), and is the text
    dump_manifest makes of the trial's manifest; `dump=False` (validate) makes none."""
    loaded = spec_from_text(SWEEP, "sweep.yaml", tmp_path)
    plan = configure(loaded, experiment_id="sweep-x", storage_url="file:///results", now=NOW)
    assert all(t.dumped is not None for t in plan.trials)
    assert all(t.job_yaml == manifest_yaml.dump_manifest(t.manifest) for t in plan.trials[::37])
    checked = configure(loaded, experiment_id="sweep-x", storage_url="file:///results", now=NOW, dump=False)
    assert all(t.dumped is None for t in checked.trials)
    assert [t.job_yaml for t in checked.trials[::37]] == [t.job_yaml for t in plan.trials[::37]]


# --- libyaml writes what PyYAML writes, for the manifests it is used on --------------------------------

words = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30),
    st.sampled_from(["", "null", "~", "true", "no", "0x1F", "1e5", "0.5", ".inf", "-", "--param", "a:", ":a",
                     "#x", "x#y", "'q'", '"d"', "---", "...", "- x", "&a", "*a", "!t", "|", ">", "%", "@", "`",
                     "{}", "[]", "a,b", "?", "=1", "2026-11-24", "12:30", "0o17", "+1", "1_000"]),
)  # fmt: skip
scalars = st.one_of(
    words, st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans(), st.none()
)
manifests = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(words, inner, max_size=5)),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(words, manifests, max_size=6))
def test_libyaml_writes_what_pyyaml_writes(manifest: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_yaml, "BLOCK_WRITER", False)
        assert manifest_yaml.dump_manifest(manifest) == python_yaml(manifest)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(words, manifests, max_size=6))
def test_the_block_writer_writes_what_pyyaml_writes(manifest: dict[str, Any]) -> None:
    text = manifest_yaml._block_text(manifest)
    if text is not None:
        assert text == python_yaml(manifest)
    assert manifest_yaml.dump_manifest(manifest) == python_yaml(manifest)


def test_the_block_writer_takes_every_configured_manifest_of_a_sweep(tmp_path: Path) -> None:
    """It must be the path actually taken (the speed of a big sweep's write depends on it), and its
    corner cases: -0.0 is not 0.0, words a resolver claims are quoted, nested empty collections."""
    plan = configure(spec_from_text(SWEEP, "sweep.yaml", tmp_path), experiment_id="sweep-x", now=NOW)
    for trial in plan.trials[:50]:
        assert manifest_yaml._block_text(trial.manifest) == python_yaml(trial.manifest)
    corner = {"a": [-0.0, 0.0, "true", "null-ish", "2026-11-24", [[]], [{}], {"b": [[1, [2]], {"c": []}]}]}
    assert manifest_yaml._block_text(corner) == python_yaml(corner)
    assert manifest_yaml._block_text({"a": "two words"}) is None


def test_text_libyaml_is_not_trusted_with_goes_to_pyyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_yaml, "BLOCK_WRITER", False)
    shared: list[Any] = [1]
    assert manifest_yaml._FastDumper is not None and manifest_yaml.plain_text({"a": [1, "b", None, 0.5, {}]})
    for manifest in (
        {"a": "two words"},
        {"a": "é"},
        {"a": "x\ny"},
        {"k" * 100: 1},
        {"a": shared, "b": shared},
    ):
        assert not manifest_yaml.plain_text(manifest)
        assert manifest_yaml.dump_manifest(manifest) == python_yaml(manifest)
