"""Malformed specs through the real CLI: `kaliper validate` and `kaliper run` both refuse them cleanly.

Every case is one fault in an otherwise valid spec (`test_unfaulted_specs_are_valid` proves the unfaulted
specs pass), and must give exit code 2, `error: <file>: <field>: ...` on stderr, no traceback, and nothing
written to storage.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import in_process
from tests.support.paths import EXAMPLES

CliRunner = Callable[..., subprocess.CompletedProcess[str]]

SPEC = "spec.yaml"
CLI_TIMEOUT = 60.0
SECRET_MARKER = "KALIPER-SECRET-7f3a"

# A valid spec, cheap in case a fault were ever accepted and `kaliper run` really ran it.
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
"""

# The same spec with a user jsonnet template (relative to the spec file).
TEMPLATE_BASE = BASE.replace("  name: pi-matmul\n", "  name: pi-matmul\n  template: tpl/job.jsonnet\n")

SECRET_FILE = f"{{ token: '{SECRET_MARKER}' }}\n"


def user_template(kind: str = "PyTorchJob", annotations: str = "{}", prelude: str = "") -> str:
    """A PyTorchJob-style template built from kaliper.libsonnet; the arguments inject one fault."""
    return f"""\
local kaliper = import 'kaliper.libsonnet';
{prelude}
function(run, job, workload, params, sampling)
  local container = kaliper.container(
    'pytorch', {{ name: 'pytorchjob-port', containerPort: 23456 }}, run, job, workload, params, sampling
  );
  {{
    apiVersion: 'kubeflow.org/v1',
    kind: '{kind}',
    metadata: kaliper.metadata(run) + {{ annotations: {annotations} }},
    spec: {{
      runPolicy: kaliper.runPolicy(job),
      pytorchReplicaSpecs: kaliper.replicaSpecs(container, run, job),
    }},
  }}
"""


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Billion laughs: `width ** levels` scalars from a few hundred bytes of YAML."""
    lines = ["a0: &a0 [" + ", ".join(['"x"'] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def replace(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new)


@dataclass(frozen=True)
class Case:
    id: str
    text: str | None  # None: the spec file does not exist
    needles: tuple[str, ...]  # the field and what was expected/found; `error: FILE` is checked for all
    files: dict[str, str] = field(default_factory=dict)  # extra files; `{tmp}` becomes the case's directory
    names: str = SPEC  # the file the message must name: the spec, or the template for template errors
    spec_name: str = SPEC
    max_lines: int = 10  # YAML errors quote the line; jsonnet errors add a jsonnet stack trace
    run: bool = True  # False: an extra case checked by `validate` only (`kaliper run` starts in ~1 s)


TPL = "tpl/job.jsonnet"
JSONNET_LINES = 30

CASES = [
    Case("unknown-top-level-key", BASE + "colour: red\n", ("colour: unknown field 'colour'",)),
    Case(
        "unknown-nested-key",
        replace("{warmup: 0,", "{warmupp: 0,"),
        ("sampling.warmupp: unknown field 'warmupp'",),
    ),
    Case(
        "repetitions-string",
        replace("repetitions: 1", 'repetitions: "three"'),
        ("repetitions: Input should be a valid integer", "(found: 'three')"),
    ),
    Case(
        "repetitions-negative",
        replace("repetitions: 1", "repetitions: -3"),
        ("repetitions: Input should be greater than or equal to 1", "(found: -3)"),
    ),
    Case(
        "repetitions-zero",
        replace("repetitions: 1", "repetitions: 0"),
        ("repetitions: Input should be greater than or equal to 1", "(found: 0)"),
    ),
    Case(
        "unknown-workload",
        replace("name: pi-matmul", "name: pi-matmull"),
        (
            "workload.name: unknown workload 'pi-matmull'",
            "(built-in workloads: cnn-infer, cnn-train, collective, pi-conv2d, pi-import, pi-matmul, serve, "
            "trace-replay, transformer-infer, transformer-train)",
        ),
    ),
    Case(
        "unknown-param-in-params",
        replace("threads: 1}", "threads: 1, bogus: 7}"),
        (
            "workload.params.bogus: workload pi-matmul has no parameter 'bogus'",
            "it takes: matrix_size, dtype",
        ),
    ),
    Case(
        "unknown-param-in-matrix",
        replace("[16, 32]\n", "[16, 32]\n  bogus: [1, 2]\n"),
        ("matrix.bogus: workload pi-matmul has no parameter 'bogus'",),
    ),
    Case(
        "param-wrong-type",
        replace(
            "threads: 1}",
            'threads: 1, matrix_size: "big"}',
            replace("matrix_size: [16, 32]", "dtype: [float32]"),
        ),
        ("workload.params.matrix_size: expected integer, found 'big'",),
    ),
    Case(
        "param-wrong-type-in-matrix",
        replace("[16, 32]", "[16, big]"),
        ("matrix.matrix_size[1]: expected integer, found 'big'",),
        run=False,
    ),
    Case(
        "param-not-a-choice",
        replace("threads: 1}", "threads: 1, dtype: float8}"),
        ("workload.params.dtype: expected one of float32, float64, bfloat16, float16, found 'float8'",),
    ),
    Case(
        "param-in-params-and-matrix",
        replace("threads: 1}", "threads: 1, matrix_size: 8}"),
        ("matrix.matrix_size: also set in workload.params",),
        run=False,
    ),
    Case("empty-matrix-list", replace("[16, 32]", "[]"), ("matrix: matrix.matrix_size is an empty list",)),
    Case(
        "storage-no-scheme",
        BASE + "storage: ./results\n",
        ("storage: storage URL './results' has no scheme; expected file://PATH",),
    ),
    Case(
        "storage-ftp",
        BASE + "storage: ftp://host/results\n",
        ("storage: storage URL 'ftp://host/results': unknown scheme 'ftp://'",),
    ),
    Case(
        "storage-file-empty-path",
        BASE + "storage: 'file://'\n",
        ("storage: storage URL 'file://' names no path",),
    ),
    Case(
        "image-latest",
        replace(":0.1.0", ":latest"),
        (
            "job.image: image tag 'latest' is not pinned",
            "(found: 'ghcr.io/kaliper-dev/kaliper-pytorch:latest')",
        ),
    ),
    Case("image-no-tag", replace(":0.1.0", ""), ("job.image: image has no tag",)),
    Case(
        "pytorchjob-ps-replica",
        replace("{Master: 1}", "{Master: 1, PS: 1}"),
        ("job: PyTorchJob has no replica type 'PS' (allowed: Master, Worker)",),
    ),
    Case(
        "tensorflow-framework-pytorchjob",
        replace("params: {", "framework: tensorflow\n  params: {"),
        ("job.kind PyTorchJob cannot run a tensorflow workload; use TFJob",),
        run=False,
    ),
    # job.kind decides which job fields apply: each one given to a kind without it is named
    Case(
        "trainjob-with-replicas",
        replace("kind: PyTorchJob", "kind: TrainJob"),
        ("job.replicas: applies to PyTorchJob and TFJob; a TrainJob", "job.nodes × job.procs_per_node"),
    ),
    Case(
        "pytorchjob-with-nodes",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  nodes: 2"),
        ("job.nodes: applies to TrainJob only, found job.kind PyTorchJob",),
        run=False,
    ),
    Case(
        "pytorchjob-with-runtime",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  runtime: {name: torch-distributed}"),
        ("job.runtime: applies to TrainJob only",),
        run=False,
    ),
    Case(
        "trainjob-success-policy",
        replace("kind: PyTorchJob\n  replicas: {Master: 1}", "kind: TrainJob\n  success_policy: AllWorkers"),
        ("job.success_policy: applies to TFJob only, found job.kind TrainJob",),
        run=False,
    ),
    Case(
        "trainjob-nodes-zero",
        replace("kind: PyTorchJob\n  replicas: {Master: 1}", "kind: TrainJob\n  nodes: 0"),
        ("job.nodes:", "greater than or equal to 1"),
        run=False,
    ),
    Case(
        "tensorflow-trainjob",
        replace(
            "kind: PyTorchJob\n  replicas: {Master: 1}",
            "kind: TrainJob",
            replace("params: {", "framework: tensorflow\n  params: {"),
        ),
        (
            "job.kind TrainJob cannot run a tensorflow workload (TensorFlow is not a Kubeflow Trainer v2 runtime); "
            "use TFJob",
        ),
        run=False,
    ),
    Case(
        "queue-not-a-label-value",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  queue: " + "q" * 64),
        ("job.queue: expected a Kubernetes label value",),
        run=False,
    ),
    Case(
        "queue-not-a-name",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  queue: Team_A"),
        ("job.queue: expected a Kubernetes object name", "found 'Team_A'"),
        run=False,
    ),
    Case(
        "priority-class-without-queue",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  priority_class: high"),
        ("job.priority_class: needs job.queue",),
        run=False,
    ),
    Case(
        "admission-timeout-without-queue",
        replace("replicas: {Master: 1}", "replicas: {Master: 1}\n  admission_timeout: 2h"),
        ("job.admission_timeout: needs job.queue",),
        run=False,
    ),
    Case(
        "name-capitals",
        replace("name: demo", "name: Demo"),
        ("name: expected a DNS label", "(found: 'Demo')"),
    ),
    Case(
        "name-underscore",
        replace("name: demo", "name: my_demo"),
        ("name: expected a DNS label", "(found: 'my_demo')"),
    ),
    Case(
        "bad-cron",
        BASE + "schedule: '0 2 * *'\n",
        ("schedule: expected a cron expression with 5 fields", "(found: '0 2 * *')"),
    ),
    Case(
        "bad-duration",
        replace("max_time: 1s", "max_time: soon"),
        ("sampling.max_time: expected a duration such as 60s",),
        run=False,
    ),
    # Durations must be finite numbers of seconds that the job and the workload's argv can carry.
    Case("timeout-infinite", replace("image: ghcr", "timeout: .inf\n  image: ghcr"), ("job.timeout:", "inf")),
    Case(
        "timeout-nan",
        replace("image: ghcr", "timeout: .nan\n  image: ghcr"),
        ("job.timeout:", "nan"),
        run=False,
    ),
    Case(
        "max-time-infinite",
        replace("max_time: 1s", "max_time: .inf"),
        ("sampling.max_time:", "inf"),
        run=False,
    ),
    Case(
        "max-time-largest-double",
        replace("max_time: 1s", "max_time: 1.7976931348623157e+308"),
        ("sampling.max_time:",),
    ),
    Case(
        "min-samples-above-max",
        replace("min_samples: 6, max_samples: 10", "min_samples: 50, max_samples: 10"),
        ("sampling: min_samples (50) exceeds max_samples (10)",),
    ),
    # monitoring URLs and the s3 section: the field, what was expected, what was found (never a password)
    Case(
        "prometheus-not-http",
        BASE + "monitoring: {prometheus: 'prometheus.monitoring.svc:9090'}\n",
        (
            "monitoring.prometheus: expected an http(s)://host[:port][/path] URL without credentials",
            "its scheme must be http:// or https://",
            "(found: 'prometheus.monitoring.svc:9090')",
        ),
    ),
    Case(
        "pushgateway-with-credentials",
        BASE + f"monitoring: {{pushgateway: 'http://admin:{SECRET_MARKER}@pushgateway:9091'}}\n",
        (
            "monitoring.pushgateway: expected an http(s)://host[:port][/path] URL without credentials",
            "it carries credentials",
            "(found: 'http://***@pushgateway:9091')",
        ),
        run=False,
    ),
    Case(
        "pushgateway-bad-port",
        BASE + "monitoring: {pushgateway: 'http://pushgateway:99999'}\n",
        (
            "monitoring.pushgateway:",
            "its port is not a number in 0-65535",
            "(found: 'http://pushgateway:99999')",
        ),
        run=False,
    ),
    Case(
        "s3-endpoint-with-path",
        BASE + "s3: {endpoint: 'http://minio:9000/bucket'}\n",
        (
            "s3.endpoint: expected an http(s)://host[:port] URL without credentials",
            "without a path",
            "(found: 'http://minio:9000/bucket')",
        ),
    ),
    Case(
        "s3-endpoint-with-credentials",
        BASE + f"s3: {{endpoint: 'https://AKIA:{SECRET_MARKER}@s3.example.com'}}\n",
        ("s3.endpoint:", "it carries credentials", "(found: 'https://***@s3.example.com')"),
        run=False,
    ),
    Case(
        "s3-secret-bad-name",
        BASE + "s3: {secret: Kaliper_S3}\n",
        (
            "s3.secret: expected the name of a Kubernetes Secret (a DNS-1123 subdomain",
            "(found: 'Kaliper_S3')",
        ),
    ),
    Case(
        "s3-unknown-key",
        BASE + "s3: {endpoint: 'http://minio:9000', access_key: x}\n",
        ("s3.access_key: unknown field 'access_key'",),
        run=False,
    ),
    # refused since the bad-input corpus (tests/unit/spec/test_bad_input_corpus.py has the rest)
    Case(
        "duplicate-key",
        replace("repetitions: 1", "repetitions: 1\nrepetitions: 2"),
        ("repetitions: expected each key once in a mapping, found 'repetitions' twice",),
    ),
    Case(
        "storage-credentials-with-slash",
        BASE + f"storage: 's3://AKIAX:{SECRET_MARKER}/FEMI@bucket/p'\n",
        ("storage: storage URL 's3://***@bucket/p' carries credentials",),
        run=False,
    ),
    Case(
        "too-many-trials",
        replace(
            "[16, 32]",
            "["
            + ", ".join(str(i) for i in range(1, 201))
            + "]\n  calls_per_sample: "
            + "["
            + ", ".join(str(i) for i in range(1, 101))
            + "]",
        ),
        ("matrix: expected at most 10,000 trials, found 200 × 100 = 20,000 trials",),
        run=False,
    ),
    Case("empty-file", "", ("the file is empty",)),
    Case("whitespace-only-file", "  \n\n   \n", ("the file is empty",)),
    Case("comment-only-file", "# nothing here\n", ("the file holds no YAML document",), run=False),
    Case("not-yaml", "name: [unclosed\n", ("not valid YAML", "line 1, column 7")),
    Case(
        "top-level-list",
        "- name: demo\n- workload: {name: pi-matmul}\n",
        ("expected a YAML mapping at the top level, found list",),
    ),
    Case("alias-bomb", alias_bomb(), ("the YAML expands to more than 100000 nodes",)),
    Case("missing-spec-file", None, ("no such file",), names="nope.yaml", spec_name="nope.yaml"),
    Case("template-missing", TEMPLATE_BASE, ("workload.template: no such file", TPL), run=False),
    Case(
        "template-syntax-error",
        TEMPLATE_BASE,
        ("jsonnet evaluation failed", "STATIC ERROR"),
        files={TPL: user_template().replace("kind: 'PyTorchJob',", "kind: 'PyTorchJob',,")},
        names=TPL,
        max_lines=JSONNET_LINES,
    ),
    Case(
        "template-import-parent-dir",
        TEMPLATE_BASE,
        # the import root is the spec's directory: a path climbing out of it resolves outside
        ("resolves to /etc/hostname", "jsonnet imports are confined"),
        files={
            TPL: user_template(
                prelude="local secret = importstr '../../../../../../../../../../etc/hostname';",
                annotations="secret",
            ),
        },
        names=TPL,
        max_lines=JSONNET_LINES,
    ),
    Case(
        "template-import-absolute",
        TEMPLATE_BASE,
        ("absolute paths are not allowed",),
        files={
            "secret.libsonnet": SECRET_FILE,
            TPL: user_template(
                prelude="local secret = import '{tmp}/secret.libsonnet';", annotations="secret"
            ),
        },
        names=TPL,
        max_lines=JSONNET_LINES,
    ),
    Case(
        "template-wrong-kind",
        TEMPLATE_BASE,
        ("kind: expected PyTorchJob (job.kind), found 'TFJob'",),
        files={TPL: user_template(kind="TFJob")},
        names=TPL,
    ),
]


def write_case(tmp_path: Path, case: Case) -> None:
    for rel, content in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content.replace("{tmp}", str(tmp_path)))
    if case.text is not None:
        (tmp_path / case.spec_name).write_text(case.text)


def flat(text: str) -> str:
    """Text without whitespace: compares messages however a console wrapped them."""
    return "".join(text.split())


@dataclass(frozen=True)
class Outcome:
    result: subprocess.CompletedProcess[str]
    seconds: float


def cli(*args: str, cwd: Path) -> Outcome:
    """`python -m kaliper ARGS` in a fresh process, as the `kaliper` fixture of conftest.py runs it."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "kaliper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return Outcome(result, time.monotonic() - started)


def cli_here(*args: str, cwd: Path) -> Outcome:
    """The same command through `kaliper.cli.main` in this process (tests.support.cli.in_process)."""
    started = time.monotonic()
    result = in_process(*args, cwd=cwd)
    return Outcome(result, time.monotonic() - started)


@dataclass(frozen=True)
class Refusal:
    tmp: Path
    store: Path
    outcomes: dict[str, Outcome]  # "validate", and "run" unless the case is validate-only


def commands(case: Case, tmp: Path) -> dict[str, tuple[str, ...]]:
    """`kaliper validate SPEC`, and `kaliper run SPEC --storage file://STORE` unless validate-only."""
    jobs = {"validate": ("validate", case.spec_name)}
    if case.run:
        jobs["run"] = ("run", case.spec_name, "--storage", f"file://{tmp / 'store'}")
    return jobs


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Refusal]:
    """Every case through `kaliper validate` and `kaliper run`, by the CLI's entry point in this process:
    a fresh interpreter per command took over a minute for the cases (`kaliper run` imports the runner,
    scipy included, before reading the spec). `test_in_process_refusals_are_the_real_processes` checks
    that a real process gives the same exit status and stderr, for a spec error and a template error."""
    found: dict[str, Refusal] = {}
    for case in CASES:
        tmp = tmp_path_factory.mktemp(case.id)
        write_case(tmp, case)
        outcomes = {command: cli_here(*args, cwd=tmp) for command, args in commands(case, tmp).items()}
        found[case.id] = Refusal(tmp, tmp / "store", outcomes)
    return found


@pytest.mark.parametrize("case_id", ["unknown-top-level-key", "template-wrong-kind"])
def test_in_process_refusals_are_the_real_processes(tmp_path: Path, case_id: str) -> None:
    """The fixture's in-process outcome of a case is what `python -m kaliper` gives: same exit status,
    same stdout and stderr (so the other cases' checks hold for the real CLI), nothing written."""
    [case] = [c for c in CASES if c.id == case_id]
    for command, args in commands(case, tmp_path).items():
        write_case(tmp_path, case)
        real = cli(*args, cwd=tmp_path).result
        here = cli_here(*args, cwd=tmp_path).result
        assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr), (
            command
        )
        assert real.returncode == 2 and real.stderr.startswith("error: "), real.stderr
        assert_nothing_written(tmp_path, tmp_path / "store")


def assert_nothing_written(tmp_path: Path, store: Path) -> None:
    assert not store.exists() or not any(store.iterdir()), sorted(store.rglob("*"))
    # The spec's own default storage (file://./kaliper-results, relative to the cwd) stays untouched too.
    assert not (tmp_path / "kaliper-results").exists()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_spec_is_refused(refusals: dict[str, Refusal], case: Case) -> None:
    refusal = refusals[case.id]
    for command, outcome in refusal.outcomes.items():
        result = outcome.result
        where = f"kaliper {command}: stdout={result.stdout!r} stderr={result.stderr!r}"
        assert result.returncode == 2, where
        assert "Traceback" not in result.stderr, where
        assert result.stderr.startswith("error: "), where
        assert result.stderr.count("error: ") == 1, where
        assert len(result.stderr.splitlines()) <= case.max_lines, where
        # the file: the spec for spec errors, the template for template errors
        assert flat(case.names) in flat(result.stderr), where
        for needle in case.needles:
            assert flat(needle) in flat(result.stderr), f"{needle!r} missing; {where}"
        assert SECRET_MARKER not in result.stdout + result.stderr, where
        assert not result.stdout.startswith("ok:"), where
        # refused before any work: well inside the timeout (the alias bomb included)
        assert outcome.seconds < 20, where
    assert set(refusal.outcomes) == ({"validate", "run"} if case.run else {"validate"})
    if case.run:
        # `kaliper run` prints the message as it is (validate's console may wrap it): exact substrings.
        run_stderr = refusal.outcomes["run"].result.stderr
        if case.names == case.spec_name:
            assert run_stderr.startswith(f"error: {case.spec_name}: "), run_stderr
        for needle in case.needles:
            assert needle in run_stderr
    assert_nothing_written(refusal.tmp, refusal.store)


def test_alias_bomb_fails_fast(kaliper: CliRunner, tmp_path: Path) -> None:
    """9 levels of 9 aliases is 387 million scalars if expanded; refusing it must take about a second."""
    (tmp_path / SPEC).write_text(alias_bomb())
    assert (tmp_path / SPEC).stat().st_size < 1000
    started = time.monotonic()
    result = kaliper("validate", SPEC, timeout=CLI_TIMEOUT)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert "alias bomb" in result.stderr
    assert elapsed < 15, f"took {elapsed:.1f}s"


def test_validate_error_lines_are_not_wrapped(kaliper: CliRunner, tmp_path: Path) -> None:
    """Every stderr line is a whole message: `error: FILE: field: ...` or `FILE: field: ...` for further problems.

    Output piped into a CI log or grep must keep one problem per line, however long the message.
    """
    text = replace("threads: 1}", "threads: 1, bogus: 7}", replace("repetitions: 1", "repetitions: 0"))
    text = replace("name: demo", "name: Demo_with_an_unusually_long_and_invalid_benchmark_name", text)
    (tmp_path / SPEC).write_text(text)
    for command in (("validate", SPEC), ("run", SPEC, "--storage", f"file://{tmp_path / 'store'}")):
        result = kaliper(*command, timeout=CLI_TIMEOUT, env={"COLUMNS": "80"})
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert lines, command
        assert lines[0].startswith(f"error: {SPEC}: name: expected a DNS label"), (command, lines)
        for line in lines[1:]:
            assert line.startswith(f"{SPEC}: "), (command, lines)


def test_unfaulted_specs_are_valid(kaliper: CliRunner, tmp_path: Path) -> None:
    """Controls: the spec and the templated spec that the cases fault are valid, so each fault is the cause."""
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "templated.yaml").write_text(TEMPLATE_BASE)
    (tmp_path / "tpl").mkdir()
    (tmp_path / TPL).write_text(user_template())
    result = kaliper("validate", "base.yaml", "templated.yaml", timeout=CLI_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "ok: base.yaml: 2 trial(s) × 1 repetition(s), PyTorchJob",
        "ok: templated.yaml: 2 trial(s) × 1 repetition(s), PyTorchJob",
    ]
    assert result.stderr == ""
    assert not (tmp_path / "kaliper-results").exists()


@pytest.mark.parametrize(
    ("prelude", "annotations"),
    [
        pytest.param("local sibling = import 'sibling.libsonnet';", "sibling", id="sibling-import"),
        # the confinement cases' template, with the file it imports inside the template directory
        pytest.param("local secret = import 'secret.libsonnet';", "secret", id="secret-inside-template-dir"),
    ],
)
def test_template_imports_inside_its_directory_pass(
    kaliper: CliRunner, tmp_path: Path, prelude: str, annotations: str
) -> None:
    (tmp_path / SPEC).write_text(TEMPLATE_BASE)
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "sibling.libsonnet").write_text("{ note: 'fine' }\n")
    (tmp_path / "tpl" / "secret.libsonnet").write_text(SECRET_FILE)
    (tmp_path / TPL).write_text(user_template(prelude=prelude, annotations=annotations))
    result = kaliper("validate", SPEC, timeout=CLI_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: {SPEC}: 2 trial(s)")


def test_quickstart_example_validates(kaliper: CliRunner, tmp_path: Path) -> None:
    quickstart = EXAMPLES / "quickstart.yaml"
    result = kaliper("validate", str(quickstart), timeout=CLI_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok: {quickstart}: 3 trial(s) × 3 repetition(s), PyTorchJob"
    assert result.stderr == ""
    # validate writes nothing, not even the spec's storage (file://./kaliper-results relative to the cwd)
    assert list(tmp_path.iterdir()) == []


def test_validate_reports_every_bad_spec(kaliper: CliRunner, tmp_path: Path) -> None:
    """Several files: each bad one gets its own `error:` line, the good one its `ok:`; the exit code is 2."""
    (tmp_path / "good.yaml").write_text(BASE)
    (tmp_path / "bad1.yaml").write_text(BASE + "colour: red\n")
    (tmp_path / "bad2.yaml").write_text(replace("repetitions: 1", "repetitions: 0"))
    result = kaliper("validate", "bad1.yaml", "good.yaml", "bad2.yaml", timeout=CLI_TIMEOUT)
    assert result.returncode == 2
    assert result.stdout.splitlines() == ["ok: good.yaml: 2 trial(s) × 1 repetition(s), PyTorchJob"]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert [e.split(":")[1].strip() for e in errors] == ["bad1.yaml", "bad2.yaml"]


def test_credentials_in_a_storage_url_are_never_echoed(tmp_path: Path) -> None:
    text = "name: x\nworkload: {name: pi-matmul}\nstorage: s3://AKIAEXAMPLE:s3cr3t@bucket/p\n"
    from kaliper.errors import SpecError
    from kaliper.spec import spec_from_text

    with pytest.raises(SpecError) as caught:
        spec_from_text(text, "s.yaml", tmp_path)
    message = str(caught.value)
    assert "s3cr3t" not in message and "AKIAEXAMPLE" not in message
    assert "s3://***@bucket/p" in message
