"""A command workload in the spec and the configurator: placeholders, the rendered container (under
`kaliper exec`, or as it is with `wrap: false`), and the rules every executor applies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kaliper.configurator import configure
from kaliper.configurator.command import arg_text, render_command
from kaliper.configurator.render import LIBRARY_DIR, render_template
from kaliper.metrics.rules import ExtractionRules, PatternMetric
from kaliper.spec import spec_from_text

SPEC = """\
name: own
workload:
  command: [python, train.py, --batch-size, "{batch_size}", --lr, "{lr}", --note, "{{literal}}"]
  params: {lr: 0.1}
  metrics:
    - {name: images_per_s, pattern: 'images/sec: ([0-9.]+)', unit: images/s, skip_first: 2}
    - {name: step_time, pattern: 'step time ([0-9.]+) ms', unit: ms, better: lower, replicas: all}
  success_pattern: Training finished
  failure_pattern: 'Traceback|nan loss'
{wrap}matrix: {batch_size: [8, 16]}
repetitions: 1
job: {kind: PyTorchJob, replicas: {Master: 1, Worker: 1}, image: registry.example/team/train:1.4, timeout: 5m}
"""


def container(manifest: dict[str, Any], rtype: str = "Master") -> dict[str, Any]:
    spec = manifest["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
    return spec["containers"][0]  # type: ignore[no-any-return]


def plan(tmp_path: Path, wrap: str = "") -> Any:
    return configure(
        spec_from_text(SPEC.replace("{wrap}", wrap), "spec.yaml", tmp_path), experiment_id="own-x"
    )


def test_wrapped_command_runs_under_kaliper_exec_with_its_rules(tmp_path: Path) -> None:
    done = plan(tmp_path)
    assert [t.doc.params for t in done.trials] == [
        {"lr": 0.1, "batch_size": 8},
        {"lr": 0.1, "batch_size": 16},
    ]
    for trial, size in zip(done.trials, ("8", "16"), strict=True):
        for rtype in ("Master", "Worker"):
            c = container(trial.manifest, rtype)
            assert c["command"] == ["kaliper"]
            args = c["args"]
            assert args[:2] == ["exec", "--rules"]
            rules = ExtractionRules.from_json(args[2])
            split = args.index("--")
            assert args[split + 1 :] == [
                "python", "train.py", "--batch-size", size, "--lr", "0.1", "--note", "{literal}"
            ]  # fmt: skip
            assert ["--param", f"batch_size={size}"] == args[args.index(f"batch_size={size}") - 1 :][:2]
    assert rules.metrics == (
        PatternMetric("images_per_s", "images/sec: ([0-9.]+)", "images/s", "higher", 2, "primary"),
        PatternMetric("step_time", "step time ([0-9.]+) ms", "ms", "lower", 0, "all"),
    )
    assert rules.success_pattern == "Training finished" and rules.failure_pattern == "Traceback|nan loss"
    # the experiment document says how its runs were read, so a report can be rebuilt from it alone
    workload = done.experiment.workload
    assert workload["wrap"] is True and ExtractionRules.from_json(workload["rules"]) == rules
    assert workload["command"][3] == "{batch_size}"


def test_unwrapped_command_is_the_container_command_itself(tmp_path: Path) -> None:
    done = plan(tmp_path, "  wrap: false\n")
    c = container(done.trials[1].manifest)
    assert c["command"] == ["python", "train.py", "--batch-size", "16", "--lr", "0.1", "--note", "{literal}"]
    assert "args" not in c
    assert done.experiment.workload["wrap"] is False


def test_the_same_env_labels_and_deadline_as_a_builtin_workload(tmp_path: Path) -> None:
    own = container(plan(tmp_path).trials[0].manifest)
    builtin = configure(
        spec_from_text(
            SPEC.split("workload:")[0]
            + "workload: {name: pi-matmul}\nrepetitions: 1\njob: {kind: PyTorchJob, replicas: {Master: 1, Worker: 1}, "
            "image: registry.example/team/train:1.4, timeout: 5m}\n",
            "spec.yaml",
            tmp_path,
        ),
        experiment_id="own-x",
    )
    ref = container(builtin.trials[0].manifest)
    assert {k: v for k, v in own.items() if k != "args"} == {k: v for k, v in ref.items() if k != "args"}


@pytest.mark.parametrize(
    "value",
    [1, 0, -3, 2.0, 0.1, 0.95, 1e-05, 1e16, 0.1 + 0.2, 1 / 3, 123456789.125, True, False, "x y", "0.10"],
)
def test_placeholders_read_back_as_the_jsonnet_library_writes_parameters(value: Any, tmp_path: Path) -> None:
    """`{name}` in a command and `--param name=...` say the same thing (the library's `kaliper.arg`)."""
    template = tmp_path / "arg.jsonnet"
    template.write_text("local kaliper = import 'kaliper.libsonnet';\nfunction(x) kaliper.arg(x)\n")
    expected = render_template(template, {"x": value}, [tmp_path, LIBRARY_DIR])
    assert arg_text(value) == expected
    assert render_command(["--v={x}"], {"x": value}) == [f"--v={expected}"]


def test_braces_and_text_around_placeholders() -> None:
    assert render_command(["{a}{b}", "pre-{a}-post", "{{a}}", "{}", '{"json": 1}'], {"a": 1, "b": "x"}) == [
        "1x", "pre-1-post", "{a}", "{}", '{"json": 1}'
    ]  # fmt: skip


def test_a_template_with_metrics_carries_rules_and_a_builtin_carries_none(tmp_path: Path) -> None:
    (tmp_path / "job.jsonnet").write_text(
        "local k = import 'kaliper.libsonnet';\n"
        "function(run, job, workload, params, sampling)\n"
        "  (import 'pytorchjob.libsonnet')(run, job, workload + {name: 'pi-matmul'}, params, sampling)\n"
    )
    text = (
        "name: tpl\nworkload:\n  template: job.jsonnet\n"
        "  metrics: [{name: tokens_per_s, pattern: 'tok/s ([0-9.]+)'}]\n"
    )
    loaded = spec_from_text(text, "spec.yaml", tmp_path)
    rules = loaded.spec.workload.rules()
    assert rules is not None and rules.metrics[0].name == "tokens_per_s"
    builtin = spec_from_text("name: b\nworkload: {name: pi-matmul}\n", "spec.yaml", tmp_path)
    assert builtin.spec.workload.rules() is None
    done = configure(builtin, experiment_id="b-x")
    assert set(done.experiment.workload) == {"name", "template", "framework", "params"}  # as before
    assert json.loads(json.dumps(done.experiment.workload))["name"] == "pi-matmul"
