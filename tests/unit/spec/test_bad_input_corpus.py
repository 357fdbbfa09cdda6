"""A corpus of bad inputs: every one is refused the same way by `kaliper validate` and `kaliper run`.

Each case is one fault in an otherwise valid spec (`test_base_specs_are_valid` proves the bases pass), or
a bad `--storage` argument. Through `kaliper.cli.app.main` in this process: exit code 2, within 5 s,
`error: <spec file>: ...` naming the field, no traceback, no secret echoed, and nothing written (the
store stays empty, the working directory holds only what the case put there). A few cases also go
through a real `python -m kaliper` process, to prove the installed entry point behaves the same.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kaliper.cli.app import main

SPEC = "spec.yaml"
MAX_SECONDS = 5.0

BASE = """\
name: demo
workload:
  name: pi-matmul
  params: {device: cpu, threads: 1}
matrix:
  matrix_size: [16, 32]
repetitions: 1
sampling: {warmup: 0, min_samples: 6, max_samples: 10, max_time: 1s}
job:
  kind: PyTorchJob
  replicas: {Master: 1}
  image: ghcr.io/kaliper-dev/kaliper-pytorch:0.1.0
  timeout: 10m
"""
# A user template workload (the file is only needed when a case gets that far).
TEMPLATE_BASE = BASE.replace(
    "  name: pi-matmul\n  params: {device: cpu, threads: 1}\n", "  template: job.jsonnet\n"
)
TEMPLATE_BASE = TEMPLATE_BASE.replace("  matrix_size: [16, 32]\n", "  batch: [1, 2]\n")

# Credentials used by cases; none may ever appear in any output (checked for every case).
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PASSWORD = "hunter2-Pa55word"
TOKEN = "tok-5f1e2d3c4b5a"
ALWAYS_SECRET = (AWS_KEY_ID, AWS_SECRET, "K7MDENG", "bPxRfiCY", PASSWORD, TOKEN, "wJalrXUtn", "AKIAX")


def sub(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


def job(line: str, base: str = BASE) -> str:
    """`base` with one more line in `job:`."""
    return sub("  timeout: 10m\n", f"  timeout: 10m\n  {line}\n", base)


def matrix(values: str, key: str = "matrix_size", base: str = BASE) -> str:
    """`base` with its one matrix entry replaced by `key: values`."""
    old = "  matrix_size: [16, 32]\n" if base is BASE else "  batch: [1, 2]\n"
    return sub(old, f"  {key}: {values}\n", base)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(['"x"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    return BASE + "description: " + "[" * depth + "]" * depth + "\n"


def numbers(count: int, start: int = 1) -> str:
    return "[" + ", ".join(str(start + i) for i in range(count)) + "]"


@dataclass(frozen=True)
class Bad:
    id: str
    text: str | bytes | None  # the spec file; None: it does not exist
    field: str  # text the message must contain: the field (or what stands for it, e.g. YAML errors)
    secrets: tuple[str, ...] = ()  # strings that must not appear in any output
    storage: str | None = None  # a bad `--storage` argument (then only `kaliper run`, with the BASE spec)
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def commands(self) -> tuple[str, ...]:
        return ("run",) if self.storage is not None else ("validate", "run")


# The user's own job: a command with metrics read from what it prints (valid as it stands).
COMMAND_BASE = sub(
    "  name: pi-matmul\n  params: {device: cpu, threads: 1}\n",
    "  command: [python, train.py, --batch-size, '{batch}']\n"
    "  metrics:\n"
    "    - {name: images_per_s, pattern: 'images/sec: ([0-9.]+)', unit: images/s}\n",
)
COMMAND_BASE = sub("  matrix_size: [16, 32]\n", "  batch: [1, 2]\n", COMMAND_BASE)


def metric(line: str) -> str:
    """COMMAND_BASE with its one metric replaced."""
    return sub(
        "    - {name: images_per_s, pattern: 'images/sec: ([0-9.]+)', unit: images/s}\n", line, COMMAND_BASE
    )


LONG = "a" * 300
S3_CREDS_SLASH = "s3://AKIAX:wJalrXUtn/FEMI@bucket/p"
S3_CREDS = f"s3://{AWS_KEY_ID}:{AWS_SECRET}@bucket/prefix"

CASES: list[Bad] = [
    # the user's own job (workload.command, metrics read from its output)
    Bad(
        "own-invalid-regex",
        metric("    - {name: x, pattern: 'images/sec: ([0-9.]+'}\n"),
        "workload.metrics[0].pattern",
    ),
    Bad("own-regex-without-group", metric("    - {name: x, pattern: 'images/sec: [0-9.]+'}\n"), "no group"),
    Bad(
        "own-placeholder-without-parameter",
        sub("'{batch}'", "'{batch_size}'", COMMAND_BASE),
        "placeholder {batch_size}",
    ),
    Bad(
        "own-metric-names-clash",
        metric("    - {name: x, pattern: 'a ([0-9]+)'}\n    - {name: x, pattern: 'b ([0-9]+)'}\n"),
        "'x' is given twice",
    ),
    Bad(
        "own-metric-named-wall-time",
        metric("    - {name: wall_time, pattern: 'a ([0-9]+)'}\n"),
        "workload.metrics[0].name",
    ),
    Bad(
        "own-metrics-format-with-metrics",
        sub("  metrics:\n", "  metrics_format: mllog\n  metrics:\n", COMMAND_BASE),
        "not both",
    ),
    Bad(
        "own-unknown-better",
        metric("    - {name: x, pattern: 'a ([0-9]+)', better: faster}\n"),
        "workload.metrics[0].better",
    ),
    Bad(
        "own-unknown-metrics-format",
        sub("  metrics:\n", "  metrics_format: csv\n  metrics:\n", COMMAND_BASE),
        "workload.metrics_format",
    ),
    Bad(
        "own-metric-unknown-key",
        metric("    - {name: x, pattern: 'a ([0-9]+)', regex: 'b'}\n"),
        "workload.metrics[0].regex",
    ),
    Bad(
        "own-negative-skip-first",
        metric("    - {name: x, pattern: 'a ([0-9]+)', skip_first: -1}\n"),
        "workload.metrics[0].skip_first",
    ),
    Bad(
        "own-bad-replicas",
        metric("    - {name: x, pattern: 'a ([0-9]+)', replicas: workers}\n"),
        "workload.metrics[0].replicas",
    ),
    Bad(
        "own-invalid-success-pattern",
        sub("  metrics:\n", "  success_pattern: '(unclosed'\n  metrics:\n", COMMAND_BASE),
        "workload.success_pattern",
    ),
    Bad(
        "own-invalid-failure-pattern",
        sub("  metrics:\n", "  failure_pattern: '[a-'\n  metrics:\n", COMMAND_BASE),
        "workload.failure_pattern",
    ),
    Bad(
        "own-command-string",
        sub(
            "  command: [python, train.py, --batch-size, '{batch}']\n",
            "  command: python train.py\n",
            COMMAND_BASE,
        ),
        "workload.command",
    ),
    Bad(
        "own-command-empty",
        sub("  command: [python, train.py, --batch-size, '{batch}']\n", "  command: []\n", COMMAND_BASE),
        "workload.command",
    ),
    Bad(
        "own-name-and-command", sub("  command:", "  name: pi-matmul\n  command:", COMMAND_BASE), "`command`"
    ),
    Bad(
        "own-metrics-on-builtin",
        sub(
            "  params: {device: cpu, threads: 1}\n",
            "  params: {device: cpu, threads: 1}\n  success_pattern: done\n",
        ),
        "built-in workload",
    ),
    Bad(
        "own-absolute-workdir",
        sub("  metrics:\n", "  workdir: /etc\n  metrics:\n", COMMAND_BASE),
        "workload.workdir",
    ),
    Bad(
        "own-workdir-missing",
        sub("  metrics:\n", "  workdir: nowhere\n  metrics:\n", COMMAND_BASE),
        "workload.workdir",
    ),
    # unknown keys, wrong types, missing fields
    Bad("unknown-top-key", BASE + "colour: red\n", "colour"),
    Bad("unknown-nested-key", sub("{warmup: 0,", "{warmupp: 0,"), "sampling.warmupp"),
    Bad("unknown-job-key", job("replicaz: 2"), "job.replicaz"),
    Bad("unknown-toleration-key", job("tolerations: [{key: a, colour: x}]"), "job.tolerations[0].colour"),
    Bad("name-int", sub("name: demo", "name: 5"), "name"),
    Bad("name-list", sub("name: demo", "name: [demo]"), "name"),
    Bad("name-capitals", sub("name: demo", "name: Demo"), "name"),
    Bad("name-too-long", sub("name: demo", "name: " + "d" * 31), "name"),
    Bad("name-trailing-newline", sub("name: demo", 'name: "demo\\n"'), "name"),
    Bad("name-missing", sub("name: demo\n", ""), "name"),
    Bad("workload-missing", BASE.split("workload:")[0] + "repetitions: 1\n", "workload"),
    Bad("workload-neither", sub("  name: pi-matmul\n", "  framework: pytorch\n"), "workload"),
    Bad("workload-string", "name: demo\nworkload: pi-matmul\n", "workload"),
    Bad("framework-bad", sub("  params:", "  framework: jax\n  params:"), "workload.framework"),
    Bad("workload-unknown", sub("name: pi-matmul", "name: pi-matmull"), "workload.name"),
    Bad("repetitions-string", sub("repetitions: 1", 'repetitions: "3"'), "repetitions"),
    Bad("repetitions-bool", sub("repetitions: 1", "repetitions: true"), "repetitions"),
    Bad("repetitions-float", sub("repetitions: 1", "repetitions: 2.0"), "repetitions"),
    Bad("repetitions-zero", sub("repetitions: 1", "repetitions: 0"), "repetitions"),
    Bad("repetitions-too-many", sub("repetitions: 1", "repetitions: 1001"), "repetitions"),
    Bad("repetitions-null", sub("repetitions: 1", "repetitions: null"), "repetitions"),
    Bad("repetitions-huge", sub("repetitions: 1", "repetitions: 99999999999999999999"), "repetitions"),
    # sampling
    Bad("warmup-bool", sub("warmup: 0", "warmup: false"), "sampling.warmup"),
    Bad("target-rel-ci-nan", sub("warmup: 0,", "warmup: 0, target_rel_ci: .nan,"), "sampling.target_rel_ci"),
    Bad("confidence-inf", sub("warmup: 0,", "warmup: 0, confidence: .inf,"), "sampling.confidence"),
    Bad("confidence-bool", sub("warmup: 0,", "warmup: 0, confidence: true,"), "sampling.confidence"),
    Bad("min-samples-above-max", sub("min_samples: 6", "min_samples: 50"), "sampling"),
    Bad("max-time-list", sub("max_time: 1s", "max_time: [1]"), "sampling.max_time"),
    Bad("max-time-mapping", sub("max_time: 1s", "max_time: {s: 1}"), "sampling.max_time"),
    Bad("max-time-zero", sub("max_time: 1s", "max_time: 0"), "sampling.max_time"),
    Bad("max-time-negative", sub("max_time: 1s", "max_time: -1"), "sampling.max_time"),
    Bad("max-time-bool", sub("max_time: 1s", "max_time: true"), "sampling.max_time"),
    Bad("max-time-inf", sub("max_time: 1s", "max_time: .inf"), "sampling.max_time"),
    Bad("max-time-over-a-year", sub("max_time: 1s", "max_time: 400d"), "sampling.max_time"),
    Bad("max-time-word", sub("max_time: 1s", "max_time: soon"), "sampling.max_time"),
    # job
    Bad("timeout-null", sub("timeout: 10m", "timeout: null"), "job.timeout"),
    Bad("timeout-nan", sub("timeout: 10m", "timeout: .nan"), "job.timeout"),
    Bad("timeout-huge-int", sub("timeout: 10m", "timeout: 99999999999999999999"), "job.timeout"),
    Bad("timeout-largest-double", sub("timeout: 10m", "timeout: 1.7976931348623157e+308"), "job.timeout"),
    Bad("job-kind-bad", sub("kind: PyTorchJob", "kind: MPIJob"), "job.kind"),
    Bad("replicas-zero", sub("{Master: 1}", "{Master: 0}"), "job.replicas.Master"),
    Bad("replicas-bool", sub("{Master: 1}", "{Master: true}"), "job.replicas.Master"),
    Bad("replicas-unknown-type", sub("{Master: 1}", "{Master: 1, PS: 1}"), "job"),
    Bad("replicas-two-masters", sub("{Master: 1}", "{Master: 2}"), "job"),
    Bad("image-latest", sub(":0.1.0", ":latest"), "job.image"),
    Bad("image-no-tag", sub(":0.1.0", ""), "job.image"),
    Bad("image-spaces", sub("image: ghcr", "image: gh cr"), "job.image"),
    Bad("image-too-long", sub("kaliper-pytorch:", "k" * 600 + ":"), "job.image"),
    Bad("namespace-injection", job("namespace: 'Bad NS;rm -rf /'"), "job.namespace"),
    Bad("namespace-too-long", job("namespace: " + "n" * 64), "job.namespace"),
    Bad("namespace-dotted", job("namespace: a.b"), "job.namespace"),
    Bad("service-account-bad", job("service_account: Runner_1"), "job.service_account"),
    Bad("service-account-too-long", job("service_account: " + "s" * 254), "job.service_account"),
    Bad("node-selector-key-bad", job("node_selector: {'bad key': x}"), "job.node_selector"),
    Bad("node-selector-key-two-slashes", job("node_selector: {a/b/c: x}"), "job.node_selector"),
    Bad("node-selector-key-prefix-bad", job("node_selector: {'Bad_Prefix/gpu': x}"), "job.node_selector"),
    Bad("node-selector-key-too-long", job(f"node_selector: {{{'k' * 64}: x}}"), "job.node_selector"),
    Bad("node-selector-value-bad", job("node_selector: {pool: '-x'}"), "job.node_selector"),
    Bad("node-selector-value-too-long", job(f"node_selector: {{pool: {'v' * 64}}}"), "job.node_selector"),
    Bad("node-selector-value-int", job("node_selector: {pool: 5}"), "job.node_selector.pool"),
    Bad(
        "toleration-key-bad", job("tolerations: [{key: 'a key', operator: Exists}]"), "job.tolerations[0].key"
    ),
    Bad("toleration-value-bad", job("tolerations: [{key: gpu, value: 'a;b'}]"), "job.tolerations[0].value"),
    Bad(
        "toleration-exists-value",
        job("tolerations: [{key: gpu, operator: Exists, value: x}]"),
        "job.tolerations[0]",
    ),
    Bad(
        "toleration-seconds-bool",
        job("tolerations: [{key: gpu, tolerationSeconds: true}]"),
        "tolerationSeconds",
    ),
    Bad(
        "toleration-effect-bad", job("tolerations: [{key: gpu, effect: Evict}]"), "job.tolerations[0].effect"
    ),
    Bad("cpu-huge", job("resources: {cpu: '99999999999999999999'}"), "job.resources.cpu"),
    Bad("cpu-zero", job("resources: {cpu: '0'}"), "job.resources.cpu"),
    Bad("cpu-bool", job("resources: {cpu: true}"), "job.resources.cpu"),
    Bad("cpu-word", job("resources: {cpu: two}"), "job.resources.cpu"),
    Bad("cpu-over-4096", job("resources: {cpu: 4097}"), "job.resources.cpu"),
    Bad("memory-over-64Ti", job("resources: {memory: 65Ti}"), "job.resources.memory"),
    Bad("memory-negative", job("resources: {memory: -1Gi}"), "job.resources.memory"),
    Bad("gpu-bool", job("resources: {gpu: true}"), "job.resources.gpu"),
    Bad("gpu-too-many", job("resources: {gpu: 1000}"), "job.resources.gpu"),
    # workflow
    Bad("workflow-node-selector", BASE + "workflow: {node_selector: {'a b': c}}\n", "workflow.node_selector"),
    Bad(
        "workflow-service-account", BASE + "workflow: {service_account: 'A B'}\n", "workflow.service_account"
    ),
    Bad("workflow-volume-claim", BASE + "workflow: {volume_claim: 'pvc_1'}\n", "workflow.volume_claim"),
    Bad("workflow-timezone-unknown", BASE + "workflow: {timezone: Mars/Base}\n", "workflow.timezone"),
    Bad("workflow-timezone-path", BASE + "workflow: {timezone: ../../etc/passwd}\n", "workflow.timezone"),
    Bad("workflow-timezone-long", BASE + f"workflow: {{timezone: {LONG}}}\n", "workflow.timezone"),
    Bad("workflow-parallelism-bool", BASE + "workflow: {parallelism: true}\n", "workflow.parallelism"),
    Bad("workflow-storage-relative", BASE + "workflow: {storage: 'file://./r'}\n", "workflow.storage"),
    # schedule
    Bad("cron-out-of-range", BASE + "schedule: '99 99 99 99 99'\n", "schedule"),
    Bad("cron-four-fields", BASE + "schedule: '0 2 * *'\n", "schedule"),
    Bad("cron-six-fields", BASE + "schedule: '0 0 2 * * *'\n", "schedule"),
    Bad("cron-step-zero", BASE + "schedule: '*/0 * * * *'\n", "schedule"),
    Bad("cron-int", BASE + "schedule: 5\n", "schedule"),
    Bad("cron-hash", BASE + "schedule: '0 0 * * 5#2'\n", "schedule"),
    Bad("cron-last-day", BASE + "schedule: '0 0 L * *'\n", "schedule"),
    # matrix and parameters
    Bad("matrix-int-and-string", matrix("[256, '256']"), "matrix.matrix_size"),
    Bad("matrix-repeated-int", matrix("[16, 16]"), "matrix.matrix_size"),
    Bad("matrix-padded-string", matrix("[16, 32, ' 16']"), "matrix.matrix_size"),
    Bad("matrix-template-json-equal", matrix("[1, '1']", "batch", TEMPLATE_BASE), "matrix.batch"),
    Bad("matrix-template-float-equal", matrix("[2, 2.0]", "batch", TEMPLATE_BASE), "matrix.batch"),
    Bad("matrix-template-nan", matrix("[.nan]", "batch", TEMPLATE_BASE), "matrix.batch[0]"),
    Bad("matrix-template-control", matrix('["a\\u0007b"]', "batch", TEMPLATE_BASE), "matrix.batch[0]"),
    Bad("matrix-empty", matrix("[]"), "matrix"),
    Bad("matrix-not-a-list", matrix("16"), "matrix.matrix_size"),
    Bad("matrix-mapping", matrix("{a: 1}"), "matrix.matrix_size"),
    Bad("matrix-unknown-param", matrix("[1]", "bogus"), "matrix.bogus"),
    Bad("matrix-bad-key", matrix("[1]", "'bad key'", TEMPLATE_BASE), "matrix"),
    Bad("matrix-int-beyond-64-bits", matrix("[99999999999999999999]"), "matrix.matrix_size[0]"),
    Bad("matrix-int-beyond-param-bound", matrix("[2147483648]"), "matrix.matrix_size[0]"),
    Bad("matrix-negative", matrix("[-4]"), "matrix.matrix_size[0]"),
    Bad("matrix-bool-for-int", matrix("[true]"), "matrix.matrix_size[0]"),
    Bad(
        "matrix-1000-by-1000",
        sub(
            "  params: {device: cpu, threads: 1}\n",
            "",
            matrix(numbers(1000) + "\n  threads: " + numbers(1000)),
        ),
        "matrix",
        secrets=(),
    ),
    Bad(
        "matrix-times-stacks",
        matrix(numbers(5001)) + "stacks: [{name: a}, {name: b}]\n",
        "matrix × stacks",
    ),
    Bad("trials-over-env-limit", BASE, "matrix", env={"KALIPER_MAX_TRIALS": "1"}),
    Bad("trials-env-not-a-number", BASE, "KALIPER_MAX_TRIALS", env={"KALIPER_MAX_TRIALS": "lots"}),
    Bad("trials-env-zero", BASE, "KALIPER_MAX_TRIALS", env={"KALIPER_MAX_TRIALS": "0"}),
    Bad("params-unknown", sub("threads: 1}", "threads: 1, bogus: 7}"), "workload.params.bogus"),
    Bad("params-wrong-type", sub("threads: 1}", "threads: 'many'}"), "workload.params.threads"),
    Bad("params-bool-for-int", sub("threads: 1}", "threads: true}"), "workload.params.threads"),
    Bad("params-not-a-choice", sub("threads: 1}", "threads: 1, dtype: float8}"), "workload.params.dtype"),
    Bad("params-int-beyond-bound", sub("threads: 1}", "threads: 99999999999}"), "workload.params.threads"),
    Bad("params-list", sub("threads: 1}", "threads: [1]}"), "workload.params.threads"),
    Bad("params-nan", sub("threads: 1}", "threads: .nan}"), "workload.params.threads"),
    Bad(
        "params-template-control",
        sub(
            "  template: job.jsonnet\n", '  template: job.jsonnet\n  params: {x: "a\\u0001"}\n', TEMPLATE_BASE
        ),
        "workload.params.x",
    ),
    Bad(
        "params-template-inf",
        sub("  template: job.jsonnet\n", "  template: job.jsonnet\n  params: {x: .inf}\n", TEMPLATE_BASE),
        "workload.params.x",
    ),
    Bad(
        "params-bad-name",
        sub("  template: job.jsonnet\n", "  template: job.jsonnet\n  params: {'x=1 y': 1}\n", TEMPLATE_BASE),
        "workload.params",
    ),
    Bad("params-and-matrix", sub("threads: 1}", "threads: 1, matrix_size: 8}"), "matrix.matrix_size"),
    # duplicate keys, at every level
    Bad("duplicate-top-key", BASE + "repetitions: 2\n", "repetitions"),
    Bad("duplicate-job-key", job("timeout: 20m"), "job.timeout"),
    Bad("duplicate-flow-key", sub("{warmup: 0,", "{warmup: 0, warmup: 1,"), "sampling.warmup"),
    Bad(
        "duplicate-in-list-item",
        job("tolerations: [{key: a, key: b, operator: Exists}]"),
        "job.tolerations[0].key",
    ),
    Bad("duplicate-matrix-key", matrix("[16]\n  matrix_size: [32]"), "matrix.matrix_size"),
    Bad("duplicate-quoted-key", sub("repetitions: 1", "repetitions: 1\n'repetitions': 1"), "repetitions"),
    # YAML and the file itself
    Bad("yaml-control-character", "name: demo\x1b\n", "#x001b"),
    Bad("yaml-unclosed", "name: [unclosed\n", "line 1, column 7"),
    Bad("yaml-tab-indent", "job:\n\tkind: TFJob\n", "not valid YAML"),
    Bad("yaml-bad-timestamp", BASE + "description: 2024-13-45\n", "not valid YAML"),
    Bad("yaml-python-tag", BASE + "description: !!python/object:os.system {}\n", "not valid YAML"),
    Bad("yaml-bad-int-tag", BASE + "description: !!int twelve\n", "not valid YAML"),
    Bad("yaml-two-documents", BASE + "---\nname: other\n", "not valid YAML"),
    Bad("yaml-unhashable-key", BASE + "? [a]\n: 1\n", "not valid YAML"),
    Bad("yaml-deep-nesting", nested(100), "nests deeper"),
    Bad("yaml-leading-zero-octal", matrix("[0400]"), "matrix.matrix_size[0]: 0400 (line 6)"),
    Bad("yaml-leading-zero-negative", sub("repetitions: 1", "repetitions: -012"), "repetitions: -012"),
    Bad("yaml-leading-zero-not-octal", matrix("[16, 0800]"), "matrix.matrix_size[1]: 0800"),
    Bad("yaml-yaml12-octal", job("replicas: {Master: 0o1}").replace("  replicas: {Master: 1}\n", ""), "0o1"),
    Bad("yaml-leading-zero-key", matrix("{01: 1}"), "matrix.matrix_size: key 01"),
    Bad("yaml-alias-bomb", alias_bomb(), "alias bomb"),
    Bad("file-empty", "", "the file is empty"),
    Bad("file-whitespace", "  \n\n  \n", "the file is empty"),
    Bad("file-comment-only", "# nothing\n", "holds no YAML document"),
    Bad("file-top-level-list", "- name: demo\n", "top level"),
    Bad("file-top-level-string", "just text\n", "top level"),
    Bad("file-not-utf8", b"name: d\xffmo\n", "not UTF-8"),
    Bad("file-too-large", BASE + "description: '" + "x" * (1 << 20) + "'\n", "at most 1048576 bytes"),
    Bad("file-missing", None, "no such file"),
    Bad("description-too-long", BASE + "description: '" + "x" * 5000 + "'\n", "description"),
    Bad("template-missing", TEMPLATE_BASE, "workload.template"),
    Bad("template-name-too-long", sub("job.jsonnet", LONG + ".jsonnet", TEMPLATE_BASE), "workload.template"),
    Bad(
        "template-nul",
        sub("template: job.jsonnet", 'template: "job\\0.jsonnet"', TEMPLATE_BASE),
        "workload.template",
    ),
    # stacks
    Bad("stack-name-bad", BASE + "stacks: [{name: Stack_A}]\n", "stacks[0].name"),
    Bad("stack-names-repeat", BASE + "stacks: [{name: a}, {name: a}]\n", "stacks"),
    Bad("stack-image-latest", BASE + "stacks: [{name: a, image: 'r/x:latest'}]\n", "stacks[0].image"),
    Bad(
        "stack-requirement-newline",
        BASE + 'stacks: [{name: a, requirements: ["torch\\n--index-url x"]}]\n',
        "stacks[0].requirements",
    ),
    Bad("stack-env-name-bad", BASE + "stacks: [{name: a, env: {'1X': '1'}}]\n", "stacks[0].env"),
    Bad("stack-env-name-dash", BASE + "stacks: [{name: a, env: {OMP-PROC: '1'}}]\n", "stacks[0].env"),
    Bad("stack-env-kaliper", BASE + "stacks: [{name: a, env: {KALIPER_TRIAL: t9}}]\n", "stacks[0].env"),
    Bad("stack-env-operator", BASE + "stacks: [{name: a, env: {WORLD_SIZE: '4'}}]\n", "stacks[0].env"),
    Bad(
        "stack-env-secret",
        BASE + f"stacks: [{{name: a, env: {{HF_TOKEN: {TOKEN}}}}}]\n",
        "stacks[0].env",
        (TOKEN,),
    ),
    Bad("stack-env-bool", BASE + "stacks: [{name: a, env: {TF_ENABLE_ONEDNN_OPTS: off}}]\n", "stacks[0].env"),
    Bad("stack-env-list", BASE + "stacks: [{name: a, env: [OMP_NUM_THREADS]}]\n", "stacks[0].env"),
    Bad(
        "stack-requirement-option",
        BASE + "stacks: [{name: a, requirements: ['-e .']}]\n",
        "stacks[0].requirements",
    ),
    Bad(
        "stack-requirements-file-absolute",
        BASE + "stacks: [{name: a, requirements_file: /etc/passwd}]\n",
        "stacks[0].requirements_file",
    ),
    Bad("stack-python-spaces", BASE + "stacks: [{name: a, python: 'python3 -c x'}]\n", "stacks[0].python"),
    Bad("stack-allow-cuda-text", BASE + "stacks: [{name: a, allow_cuda: 'yes'}]\n", "stacks[0].allow_cuda"),
    Bad("stack-unknown-field", BASE + "stacks: [{name: a, pip: [numpy]}]\n", "stacks[0].pip"),
    # storage in the spec
    Bad("storage-no-scheme", BASE + "storage: ./results\n", "storage"),
    Bad("storage-ftp", BASE + "storage: ftp://host/results\n", "storage"),
    Bad("storage-file-empty", BASE + "storage: 'file://'\n", "storage"),
    Bad("storage-int", BASE + "storage: 5\n", "storage"),
    Bad("storage-long-component", BASE + f"storage: file://./{LONG}/r\n", "storage"),
    Bad("storage-long-path", BASE + "storage: file://" + "/abc" * 1100 + "\n", "storage"),
    Bad("storage-control-character", BASE + 'storage: "file://./a\\tb"\n', "storage"),
    Bad("storage-s3-bad-bucket", BASE + "storage: s3://Bucket_1/x\n", "storage"),
    Bad(
        "storage-s3-credentials-slash", BASE + f"storage: '{S3_CREDS_SLASH}'\n", "storage", ("AKIAX", "FEMI")
    ),
    Bad("storage-s3-credentials", BASE + f"storage: '{S3_CREDS}'\n", "storage"),
    Bad("storage-file-credentials", BASE + f"storage: 'file://me:{PASSWORD}@host/r'\n", "storage"),
    Bad("storage-signed-query", BASE + f"storage: 's3://bucket/p?X-Amz-Signature={TOKEN}'\n", "storage"),
    # services: URLs with credentials are refused and never echoed
    Bad(
        "prometheus-credentials",
        BASE + f"monitoring: {{prometheus: 'http://u:{PASSWORD}@prom:9090'}}\n",
        "monitoring.prometheus",
    ),
    Bad(
        "prometheus-credentials-slash",
        BASE + f"monitoring: {{prometheus: 'http://{AWS_KEY_ID}:{AWS_SECRET}@prom:9090'}}\n",
        "monitoring.prometheus",
    ),
    Bad(
        "prometheus-token-query",
        BASE + f"monitoring: {{prometheus: 'http://prom:9090/?token={TOKEN}'}}\n",
        "monitoring.prometheus",
    ),
    Bad("prometheus-not-http", BASE + "monitoring: {prometheus: 'prom:9090'}\n", "monitoring.prometheus"),
    Bad(
        "pushgateway-credentials",
        BASE + f"monitoring: {{pushgateway: 'https://admin:{PASSWORD}@pgw:9091'}}\n",
        "monitoring.pushgateway",
    ),
    Bad(
        "pushgateway-credentials-slash",
        BASE + f"monitoring: {{pushgateway: 'http://a:{AWS_SECRET}@pgw'}}\n",
        "monitoring.pushgateway",
    ),
    Bad(
        "pushgateway-bad-port",
        BASE + "monitoring: {pushgateway: 'http://pgw:99999'}\n",
        "monitoring.pushgateway",
    ),
    Bad(
        "s3-endpoint-credentials",
        BASE + f"s3: {{endpoint: 'https://{AWS_KEY_ID}:{AWS_SECRET}@minio:9000'}}\n",
        "s3.endpoint",
    ),
    Bad(
        "s3-endpoint-user-only", BASE + f"s3: {{endpoint: 'http://{AWS_KEY_ID}@minio:9000'}}\n", "s3.endpoint"
    ),
    Bad("s3-endpoint-path", BASE + "s3: {endpoint: 'http://minio:9000/bucket'}\n", "s3.endpoint"),
    Bad("s3-region-bad", BASE + "s3: {region: 'us east 1'}\n", "s3.region"),
    Bad("s3-secret-bad", BASE + "s3: {secret: Kaliper_S3}\n", "s3.secret"),
    Bad("report-threshold-bool", BASE + "report: {threshold: true}\n", "report.threshold"),
    Bad("report-alpha-above-one", BASE + "report: {alpha: 2}\n", "report.alpha"),
    Bad("report-baseline-bad", BASE + "report: {baseline: last-week}\n", "report.baseline"),
    # bad command-line arguments (`kaliper run SPEC --storage URL`, the spec itself valid)
    Bad("cli-storage-no-scheme", BASE, "storage URL", storage="./results"),
    Bad("cli-storage-ftp", BASE, "storage URL", storage="ftp://host/x"),
    Bad("cli-storage-empty-path", BASE, "storage URL", storage="file://"),
    Bad("cli-storage-s3-credentials-slash", BASE, "storage URL", ("AKIAX", "FEMI"), storage=S3_CREDS_SLASH),
    Bad("cli-storage-s3-credentials", BASE, "storage URL", storage=S3_CREDS),
    Bad("cli-storage-file-credentials", BASE, "storage URL", storage=f"file://u:{PASSWORD}@h/x"),
    Bad("cli-storage-long-component", BASE, "storage URL", storage=f"file:///tmp/{LONG}"),
    Bad("cli-storage-control-character", BASE, "storage URL", storage="file://./a\nb"),
    Bad("cli-storage-s3-bad-bucket", BASE, "storage URL", storage="s3://B/x"),
]


def write_case(directory: Path, case: Bad) -> set[Path]:
    """The case's files in `directory` (the working directory); returns every path written."""
    written: set[Path] = set()
    for rel, content in case.files.items():
        path = directory / rel
        path.write_text(content)
        written.add(path)
    if isinstance(case.text, bytes):
        (directory / SPEC).write_bytes(case.text)
    elif case.text is not None:
        (directory / SPEC).write_text(case.text)
    if case.text is not None:
        written.add(directory / SPEC)
    return written


def invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    """`kaliper ARGV` in this process: (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    code: int | str | None = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else 1), out, err, seconds


def check_refusal(case: Bad, code: int, out: str, err: str, seconds: float, where: str) -> None:
    context = f"{where}: code={code} stdout={out[-500:]!r} stderr={err[-1500:]!r}"
    assert code == 2, context
    assert seconds < MAX_SECONDS, f"took {seconds:.1f}s; {context}"
    assert err.startswith("error: "), context
    assert "Traceback" not in out + err, context
    if case.field in case.env:  # a bad setting is refused at the entry point, before the spec is read
        assert err.startswith(f"error: environment variable {case.field}: "), context
    elif case.storage is None:
        assert err.startswith(f"error: {SPEC}: ") or err.startswith(f"error: {Path(SPEC)}: "), context
    assert case.field in err, f"field {case.field!r} not named; {context}"
    for secret in (*ALWAYS_SECRET, *case.secrets):
        assert secret not in out + err, f"secret {secret!r} echoed; {context}"
    assert not out.startswith("ok:"), context


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused(
    case: Bad, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    store = tmp_path / "store"
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("KALIPER_MAX_TRIALS", raising=False)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    expected = write_case(cwd, case)
    for command in case.commands:
        argv = [command, SPEC]
        if command == "run":
            argv += ["--storage", case.storage if case.storage is not None else f"file://{store}"]
        code, out, err, seconds = invoke(argv, capsys)
        check_refusal(case, code, out, err, seconds, f"kaliper {' '.join(argv)[:200]}")
        assert not store.exists() or not any(store.iterdir()), sorted(store.rglob("*"))
        assert set(cwd.rglob("*")) == expected, sorted(cwd.rglob("*"))


def test_corpus_is_large_and_ids_unique() -> None:
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "base",
    [BASE, matrix("[1, 2]", "batch", TEMPLATE_BASE), COMMAND_BASE],
    ids=["builtin", "template", "command"],
)
def test_base_specs_are_valid(base: str, tmp_path: Path) -> None:
    """Controls: the specs the cases fault load cleanly, so each fault is what is refused."""
    from kaliper.spec import spec_from_text

    (tmp_path / "job.jsonnet").write_text("{}\n")
    loaded = spec_from_text(base, SPEC, tmp_path)
    assert loaded.spec.name == "demo"


REAL_PROCESS_CASES = (
    "yaml-control-character",
    "timeout-null",
    "matrix-int-beyond-64-bits",
    "storage-s3-credentials-slash",
    "matrix-1000-by-1000",
    "cli-storage-s3-credentials-slash",
)


def _subprocess(case: Bad, directory: Path) -> tuple[str, subprocess.CompletedProcess[str], float]:
    write_case(directory, case)
    argv = [sys.executable, "-m", "kaliper", "run", SPEC, "--storage"]
    argv.append(case.storage or f"file://{directory.parent / (directory.name + '-store')}")
    started = time.monotonic()
    result = subprocess.run(argv, cwd=directory, capture_output=True, text=True, timeout=60, check=False)
    return case.id, result, time.monotonic() - started


def test_the_real_entry_point_refuses_without_a_traceback(tmp_path: Path) -> None:
    """`python -m kaliper run ...` in fresh processes (concurrently): exit 2, one error line, no traceback."""
    by_id = {c.id: c for c in CASES}
    cases = [by_id[i] for i in REAL_PROCESS_CASES]
    directories = [tmp_path / c.id for c in cases]
    for directory in directories:
        directory.mkdir()
    run_one: Callable[[Bad, Path], tuple[str, subprocess.CompletedProcess[str], float]] = _subprocess
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(run_one, cases, directories))
    for case_id, result, seconds in results:
        case = by_id[case_id]
        check_refusal(
            case, result.returncode, result.stdout, result.stderr, 0.0, f"python -m kaliper ({case_id})"
        )
        assert seconds < 30, f"{case_id}: {seconds:.1f}s"
        assert len(result.stderr.splitlines()) == 1, result.stderr
        store = tmp_path / f"{case_id}-store"
        assert not store.exists() or not any(store.iterdir())
