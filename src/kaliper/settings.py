"""Every environment variable Kaliper reads, declared once: name, type, default, scope, one line of doc.

Why one registry: the variables were read in some forty places with hand-written parsers that, for a bad
value, warned, silently used the default, raised or printed. Now a bad value is always an `InputError`
(exit 2) naming the variable, what was expected and what was found (shortened; `***` for a secret).

Scopes: `pod` (set by Kaliper, or by the training operator, for a job's processes and read inside them),
`tuning` (a user may set it to tune Kaliper), `internal` (tests and plumbing). Variables of other tools
that Kaliper reads (thread counts, S3 credentials, torch's rank) are declared too, as text, so that
nothing is read by name without a declaration; their meaning stays their tool's.

Parsed once at the entry point: `kaliper.cli.app` (every `kaliper ...` command, so also `kaliper exec`,
`kaliper workload` and `kaliper step ...` inside pods, and `python -m kaliper`) and
`python -m kaliper.execution.tracing.record` call `load()` before any command runs, so a bad value is refused
before anything is measured or written. Readers then take one of two ways:

- an environment passed in, wrapped with `of(environ)`: `spec.limits.max_trials`,
  `configurator.render.Limits.from_environment` and `reference_path`, `storage.retry.RetryPolicy.from_env`,
  `storage.s3.S3Storage(env=...)`, `storage.spool.spool_root`, `monitoring.nvml.run_devices` (a child's
  environment), `benchmarks.torch_distributed.distributed_env`, `wrapper.command.is_primary`,
  `wrapper.trace_steps.TraceSettings.from_env`;
- everywhere else (deep library code, and `kaliper.emit` / `kaliper.trace_steps()` called from a user's
  code, where no entry point ran), `current()`: the process environment as it is now, parsed for the
  settings asked (a dictionary lookup and a conversion, so it is cheap; it follows changes, so tests that
  monkeypatch variables, and thread counts a workload sets before reading them back, stay correct).

The environment is read directly (`os.environ`) only here and in these places, which read or build the
environment of a child process, or write this process's environment for a library it loads (the test
tests/unit/settings/test_settings.py holds every other module to it, and these to no read of a variable by name):

- `kaliper/errors.py`: the redactor looks for the values of secret-named variables in the whole environment
  (it sits below this module).
- `kaliper/results/provenance.py`: a record's environment block copies the allow-listed variables.
- `kaliper/execution/local/job.py`: a replica's environment: this one's, less KALIPER_*, plus the job's.
- `kaliper/execution/local/runner.py`: the GPUs a replica may use are those of its environment.
- `kaliper/execution/local/container.py`: a container's secret and config-map references resolve from
  this environment (credentials never come from the manifest).
- `kaliper/benchmarks/serve/async_client.py`: an endpoint's API token is read from the variable the spec
  names (`api_key_env`), never from the spec.
- `kaliper/stacks/pipconfig.py`: `pip config list` runs in this environment.
- `kaliper/execution/slurm/backend.py`: sbatch runs in this environment (Slurm exports it to the job).
- `kaliper/execution/slurm/task.py`: a Slurm task's replica: this environment, less KALIPER_*, plus the job's.
- `kaliper/execution/slurm/tasks.py`: every task gets this machine's S3 endpoint, retries and Pushgateway,
  as a local replica does.
- `kaliper/stacks/uvtool.py`: uv runs in this environment.
- `kaliper/execution/tracing/record.py`: the recorded command runs in this environment plus the trace settings.
- `kaliper/wrapper/autostep/sitecustomize.py`: runs at start-up inside the traced command, before (and
  without) Kaliper's package: reads KALIPER_TRACE_DIR and KALIPER_TRACE_AUTO by name.
- `kaliper/wrapper/command.py`: `kaliper exec` runs the user's command in this environment.
- `kaliper/benchmarks/pi/pi_import.py`: the measured child runs in this environment plus its threads.
- `kaliper/benchmarks/torch_support.py`: sets OMP/MKL thread counts before torch loads.
- `kaliper/benchmarks/torch_distributed.py`: sets GLOO_SOCKET_IFNAME for torch.distributed.
- `kaliper/benchmarks/cnn/cnn_tf.py`: sets TF_USE_LEGACY_KERAS before TensorFlow loads.
- `kaliper/benchmarks/cnn/models_tf.py`: sets TF_USE_LEGACY_KERAS and TF_CPP_MIN_LOG_LEVEL.
- `kaliper/benchmarks/tf_support.py`: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads.

The documentation table (docs/reference/settings.md) is `render_markdown()`; a test keeps it in step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, cast

from kaliper.errors import InputError

T = TypeVar("T")
Scope = Literal["pod", "tuning", "internal"]
POD: Final = "pod"
TUNING: Final = "tuning"
INTERNAL: Final = "internal"
SHOWN_CHARACTERS: Final = 40  # a bad value is quoted up to this length in the message


@dataclass(frozen=True)
class Kind(Generic[T]):
    """A type of setting: its name in the docs, what a message says is expected, and its parser (raises
    ValueError for a text that is not one). `raw`: the text as set (not stripped; blank is a value)."""

    label: str
    expected: str
    parse: Callable[[str], T]
    raw: bool = False


def _text(label: str) -> Kind[str]:
    return Kind(label, "text", lambda text: text, raw=True)


TEXT: Final = _text("text")
URL: Final = _text("url")
PATH: Final = _text("path")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


BOOL: Final = Kind("bool", "one of 1, true, yes, on, 0, false, no, off", _parse_bool)
_WHOLE = re.compile(r"[+-]?[0-9]{1,18}")


def whole(least: int | None = None) -> Kind[int]:
    """An integer (at most 18 digits), at least `least` when given."""

    def parse(text: str) -> int:
        if not _WHOLE.fullmatch(text) or (least is not None and int(text) < least):
            raise ValueError(text)
        return int(text)

    bound = f" >= {least}" if least is not None else ""
    return Kind(f"int{bound}", f"a whole number{bound}", parse)


def seconds(least: float = 0.0, below: float | None = None, above: float | None = None) -> Kind[float]:
    """A number of seconds, at least `least` (or more than `above`), less than `below`."""

    def parse(text: str) -> float:
        value = float(text)  # NaN fails every comparison below
        low_ok = value > above if above is not None else value >= least
        if not low_ok or (below is not None and not value < below):
            raise ValueError(text)
        return value

    low = f"more than {above:g}" if above is not None else f"at least {least:g}"
    high = f" and less than {below:,.0f}" if below is not None else ""
    label = f"seconds > {above:g}" if above is not None else f"seconds >= {least:g}"
    return Kind(
        label + (f", < {below:,.0f}" if below is not None else ""),
        f"seconds {low}{high} (such as 10 or 2.5)",
        parse,
    )


_UNITS: Final = {"": 1, "k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
                 "g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30}  # fmt: skip
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)")


def size(least: int) -> Kind[int]:
    """Bytes: a number with an optional binary unit (512MiB, 2Gi, 2g, 1048576)."""

    def parse(text: str) -> int:
        match = _SIZE.fullmatch(text)
        unit = _UNITS.get(match.group(2).lower()) if match else None
        if match is None or unit is None or float(match.group(1)) * unit < least:
            raise ValueError(text)
        return int(float(match.group(1)) * unit)

    return Kind(
        f"size >= {least >> 20}MiB", f"a size of at least {least >> 20}MiB such as 2GiB or 512MiB", parse
    )


def choice(*values: str) -> Kind[str]:
    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(text)
        return text

    return Kind(", ".join(values), f"one of {', '.join(values)}", parse)


_PROMQL_RANGE = re.compile(r"(?:[0-9]+(?:ms|[smhdwy]))+")


def _promql_range(text: str) -> str:
    if not _PROMQL_RANGE.fullmatch(text):
        raise ValueError(text)
    return text


PROMQL_RANGE: Final = Kind("duration", "a PromQL range such as 30s, 1m or 1h30m", _promql_range)


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: `value(text)` is its value for a text as set (None: unset)."""

    name: str
    kind: Kind[Any]
    default: T
    scope: Scope
    doc: str
    secret: bool = False
    shown_default: str | None = None  # the docs' default when `default` does not say it well

    def value(self, text: str | None) -> T:
        if text is None or (not self.kind.raw and not text.strip()):
            return self.default
        try:
            return cast("T", self.kind.parse(text if self.kind.raw else text.strip()))
        except ValueError:
            raise InputError(
                f"environment variable {self.name}: expected {self.kind.expected}, found {self.shown(text)}"
            ) from None

    def shown(self, text: str) -> str:
        """The value as a message may quote it: shortened, or `***` for a secret."""
        if self.secret:
            return "***"
        return repr(text) if len(text) <= SHOWN_CHARACTERS else repr(text[: SHOWN_CHARACTERS - 3] + "...")


_REGISTRY: dict[str, Setting[Any]] = {}


def _declare(
    name: str, kind: Kind[T], default: T, scope: Scope, doc: str, shown: str | None = None
) -> Setting[T]:
    setting = Setting(name, kind, default, scope, doc, shown_default=shown)
    return cast("Setting[T]", _add(setting))


def _optional(name: str, kind: Kind[T], scope: Scope, doc: str, secret: bool = False) -> Setting[T | None]:
    return cast("Setting[T | None]", _add(Setting(name, kind, None, scope, doc, secret=secret)))


def _add(setting: Setting[Any]) -> Setting[Any]:
    if setting.name in _REGISTRY:
        raise ValueError(f"{setting.name} is declared twice")
    _REGISTRY[setting.name] = setting
    return setting


# The registry is a table, one setting a line (the formatter would spread it over 250 more lines).
# fmt: off
# --- a replica's identity and services (set in job pods by the template library, configurator.podenv) --
EXPERIMENT = _optional("KALIPER_EXPERIMENT", TEXT, POD, "The experiment a replica belongs to (unset: `adhoc`; `kaliper exec` by hand: a fresh id).")
TRIAL = _optional("KALIPER_TRIAL", TEXT, POD, "The trial a replica runs (unset: `adhoc`).")
REPETITION = _declare("KALIPER_REPETITION", whole(0), 0, POD, "The repetition a replica measures.")
REPLICA_TYPE = _declare("KALIPER_REPLICA_TYPE", TEXT, "Master", POD, "The replica's type (Master, Worker, Chief...), from the operator's pod label.")
REPLICA_INDEX = _declare("KALIPER_REPLICA_INDEX", whole(0), 0, POD, "The replica's index within its type, from the operator's pod label.")
STORAGE = _optional("KALIPER_STORAGE", URL, POD, "The storage a replica stores its record in (unset: the record is printed on stdout).")
READ_STORAGE = _optional("KALIPER_READ_STORAGE", URL, POD, "Where a replica reads the experiment's objects (a trace) when KALIPER_STORAGE is a staging area (unset: KALIPER_STORAGE).")
IMAGE = _optional("KALIPER_IMAGE", TEXT, POD, "The container image a replica runs, for its provenance.")
STACK_ENV = _optional("KALIPER_STACK_ENV", TEXT, POD, "Names (comma-separated) of the variables the run's stack sets; provenance records them.")
METRICS_FILE = _optional("KALIPER_METRICS_FILE", PATH, POD, "The file `kaliper.emit` appends metric lines to (set by `kaliper exec` for a jsonl job).")
S3_ENDPOINT = _optional("KALIPER_S3_ENDPOINT", URL, POD, "The S3 endpoint (http(s)://host:port): pods get the spec's `s3.endpoint`; on this machine it wins over the spec.")
PUSHGATEWAY = _optional("KALIPER_PUSHGATEWAY", URL, POD, "The Pushgateway replicas push live metrics to; on this machine it wins over `monitoring.pushgateway`.")
PROMETHEUS = _optional("KALIPER_PROMETHEUS", URL, POD, "The Prometheus a report reads resource use from; on this machine it wins over `monitoring.prometheus`.")
# --- a KFP launch step's own pod (downward API): the owner of the jobs it creates (jobs.objects) ------
POD_NAME = _optional("KALIPER_POD_NAME", TEXT, POD, "The launch or server-create step's pod (KFP: its `metadata.name`), named as the owner of the jobs or server objects it creates when no Workflow uid is given.")
POD_UID = _optional("KALIPER_POD_UID", TEXT, POD, "That pod's `metadata.uid` (KFP): with KALIPER_POD_NAME, the ownerReference of what it creates, so that goes with the pod.")
POD_NAMESPACE = _optional("KALIPER_POD_NAMESPACE", TEXT, POD, "That pod's namespace (KFP): a job or server in another namespace gets no owner (an owner must be in its dependent's namespace).")
# --- `kaliper trace record -- CMD` sets these for the traced command ------------------------------------
TRACE_DIR = _optional("KALIPER_TRACE_DIR", PATH, POD, "Where the traced command leaves its trace (unset: `kaliper.trace_steps()` does nothing).")
TRACE_WARMUP = _declare("KALIPER_TRACE_WARMUP", whole(0), 3, POD, "Steps a traced command runs before timing.")
TRACE_STEPS = _declare("KALIPER_TRACE_STEPS", whole(1), 10, POD, "Steps a traced command times without an observer.")
TRACE_TRACED = _declare("KALIPER_TRACE_TRACED", whole(1), 1, POD, "Steps a traced command runs under the execution-trace observer.")
TRACE_AUTO = _declare("KALIPER_TRACE_AUTO", BOOL, False, POD, "Count `optimizer.step()` calls as steps when the traced script marks none.")

# --- tuning ----------------------------------------------------------------------------------------------
MAX_TRIALS = _declare("KALIPER_MAX_TRIALS", whole(1), 10_000, TUNING, "The most trials one spec may expand to.")
PREFLIGHT = _declare("KALIPER_PREFLIGHT", choice("on", "off", "strict"), "on", TUNING, "The default of `--preflight` (`kaliper run`, `kaliper trace record`).")
TEMPLATE_MEMORY = _declare("KALIPER_TEMPLATE_MEMORY", size(256 << 20), 2 << 30, TUNING, "Address space of a jsonnet template worker (2GiB, 512MiB, bytes).", "2GiB")
TEMPLATE_TIMEOUT = _declare("KALIPER_TEMPLATE_TIMEOUT", seconds(above=0, below=1e6), 10.0, TUNING, "Seconds one template evaluation may take.")
LOCAL_NETWORK = _declare("KALIPER_LOCAL_NETWORK", choice("auto", "isolated", "host"), "auto", TUNING, "Local multi-replica jobs: a private network namespace (`isolated`), this machine's (`host`), or isolated when possible.")
INTERFERENCE = _declare("KALIPER_INTERFERENCE", BOOL, True, TUNING, "`off`: no interference detection whatever the spec says (a dedicated machine, a test suite).")
GPU_TELEMETRY = _declare("KALIPER_GPU_TELEMETRY", BOOL, True, TUNING, "`off`: no GPU sampling through NVML.")
CALIBRATION_DIR = _optional("KALIPER_CALIBRATION_DIR", PATH, TUNING, "The calibration probe's history (unset: `$XDG_CACHE_HOME`, else `~/.cache`, then `kaliper/calibration`).")
SPOOL_DIR = _optional("KALIPER_SPOOL_DIR", PATH, TUNING, "The local spool (unset: `$XDG_CACHE_HOME`, else `~/.cache`, then `kaliper/spool`); a local run's replicas get it.")
SLURM_DIR = _optional("KALIPER_SLURM_DIR", PATH, TUNING, "Where the slurm backend keeps each run's task table and logs, which its nodes must see (unset: `$XDG_CACHE_HOME`, else `~/.cache`, then `kaliper/slurm`: a home directory is shared on most clusters).")
SLURM_POLL_S = _declare("KALIPER_SLURM_POLL_S", seconds(above=0), 1.0, TUNING, "How often the slurm backend asks the controller about a submitted job (scontrol show job).")
STACKS_DIR = _optional("KALIPER_STACKS_DIR", PATH, TUNING, "The cache of stack environments (unset: `~/.cache/kaliper/stacks`).")
LOG_LIMIT = _declare("KALIPER_LOG_LIMIT", whole(), 64 << 20, TUNING, "Bytes of one replica stream's log that are stored (at least 1024).", "67108864 (64 MiB)")
REPORT_WORKERS = _optional("KALIPER_REPORT_WORKERS", whole(), TUNING, "Processes that load an experiment for a report, at least 1 (unset: one per usable core, at most 8, from 2,000 runs on).")
STORAGE_RETRIES = _declare("KALIPER_STORAGE_RETRIES", whole(1), 5, TUNING, "Attempts in all of one storage request that fails transiently.")
STORAGE_RETRY_DELAY = _declare("KALIPER_STORAGE_RETRY_DELAY", seconds(), 0.2, TUNING, "The first delay between storage attempts, doubled each time.")
STORAGE_RETRY_MAX_DELAY = _declare("KALIPER_STORAGE_RETRY_MAX_DELAY", seconds(), 5.0, TUNING, "The longest delay between storage attempts.")
PUSHGATEWAY_INTERVAL_S = _declare("KALIPER_PUSHGATEWAY_INTERVAL_S", seconds(), 2.0, TUNING, "The shortest interval between a replica's live pushes.")
PUSHGATEWAY_GRACE_S = _declare("KALIPER_PUSHGATEWAY_GRACE_S", seconds(), 2.0, TUNING, "How long a finished replica's last push stays before its group is deleted (at least a scrape interval).")
PUSHGATEWAY_KEEP = _declare("KALIPER_PUSHGATEWAY_KEEP", BOOL, False, TUNING, "Keep a finished replica's Pushgateway group instead of deleting it.")
PROMETHEUS_RATE = _declare("KALIPER_PROMETHEUS_RATE", PROMQL_RANGE, "1m", TUNING, "The range of rate() in resource queries: at least two scrape intervals.")
PROMETHEUS_SETTLE_S = _declare("KALIPER_PROMETHEUS_SETTLE_S", seconds(), 30.0, TUNING, "How long after a run's end Prometheus is asked again while it has no data yet.")
PROMETHEUS_DEADLINE = _declare("KALIPER_PROMETHEUS_DEADLINE", seconds(), 30.0, TUNING, "Seconds all of one report's Prometheus queries may take together.")

# --- internal ----------------------------------------------------------------------------------------------
PI_IMPORT_DEVICE = _declare("KALIPER_PI_IMPORT_DEVICE", choice("cpu", "cuda"), "cpu", INTERNAL, "Set by the pi-import workload for its measured child: the device of the first op.")
TEMPLATE_REFERENCE = _declare("KALIPER_TEMPLATE_REFERENCE", BOOL, False, INTERNAL, "Evaluate templates as plain jsonnet with one worker: the reference the fast path is compared with.")
REGENERATE = _declare("KALIPER_REGENERATE", BOOL, False, INTERNAL, "Tests: rewrite the golden files instead of comparing with them.")
REQUIRE_SERVICES = _declare("KALIPER_REQUIRE_SERVICES", BOOL, False, INTERNAL, "Tests: a missing service (MinIO, Prometheus) fails a test instead of skipping it.")
MOTO_SERVER = _optional("KALIPER_MOTO_SERVER", PATH, INTERNAL, "Tests: the moto_server executable (unset: `.venv-moto/bin/moto_server`).")
FAULT_TABLE = _optional("KALIPER_FAULT_TABLE", PATH, INTERNAL, "Tests: a file the fault-injection tests write their summary table to.")

# --- other tools' variables that Kaliper reads (their meaning is their tool's) -----------------------------
OMP_NUM_THREADS = _optional("OMP_NUM_THREADS", TEXT, POD, "OpenMP threads: a workload's default thread count; set from `threads`; recorded.")
MKL_NUM_THREADS = _optional("MKL_NUM_THREADS", TEXT, POD, "MKL threads: set with OMP_NUM_THREADS; recorded.")
OPENBLAS_NUM_THREADS = _optional("OPENBLAS_NUM_THREADS", TEXT, POD, "OpenBLAS threads: recorded by the numpy workloads.")
CUDA_VISIBLE_DEVICES = _optional("CUDA_VISIBLE_DEVICES", TEXT, TUNING, "The GPUs a process may use: sampled and recorded for those only.")
TF_ENABLE_ONEDNN_OPTS = _optional("TF_ENABLE_ONEDNN_OPTS", TEXT, TUNING, "TensorFlow's oneDNN switch: recorded.")
TF_USE_LEGACY_KERAS = _optional("TF_USE_LEGACY_KERAS", TEXT, POD, "Set to 1 by the TensorFlow workloads (Keras 2); recorded.")
TF_CONFIG = _optional("TF_CONFIG", TEXT, POD, "The TFJob operator's cluster description: roles, the primary replica.")
RANK = _optional("RANK", TEXT, POD, "torch.distributed's rank (the operator, torchrun): rank 0 reports and traces.")
LOCAL_RANK = _optional("LOCAL_RANK", TEXT, POD, "torch.distributed's rank on its node: the GPU a rank uses.")
WORLD_SIZE = _optional("WORLD_SIZE", TEXT, POD, "torch.distributed's number of ranks.")
MASTER_ADDR = _optional("MASTER_ADDR", TEXT, POD, "torch.distributed's rendezvous host.")
MASTER_PORT = _optional("MASTER_PORT", TEXT, POD, "torch.distributed's rendezvous port.")
SLURM_PROCID = _optional("SLURM_PROCID", TEXT, POD, "Slurm's task rank in its step: which replica a slurm backend task runs.")
SLURM_LOCALID = _optional("SLURM_LOCALID", TEXT, POD, "Slurm's task rank on its node: a slurm backend task's LOCAL_RANK.")
SLURM_JOB_ID = _optional("SLURM_JOB_ID", TEXT, POD, "Slurm's job id: a slurm backend job's ports derive from it.")
SLURM_JOB_NODELIST = _optional("SLURM_JOB_NODELIST", TEXT, POD, "Slurm's nodes of the job: where a slurm backend's tasks run (MASTER_ADDR, TF_CONFIG).")
SLURM_TASKS_PER_NODE = _optional("SLURM_TASKS_PER_NODE", TEXT, POD, "Slurm's tasks on each node (2(x3),1): the node of each slurm backend task.")
GLOO_SOCKET_IFNAME = _optional("GLOO_SOCKET_IFNAME", TEXT, POD, "gloo's network interface: the loopback one when the master is local; recorded.")
MALLOC_MMAP_THRESHOLD = _optional("MALLOC_MMAP_THRESHOLD_", TEXT, POD, "glibc malloc: set for trace recording and replay; recorded.")
MALLOC_TRIM_THRESHOLD = _optional("MALLOC_TRIM_THRESHOLD_", TEXT, POD, "glibc malloc: set for trace recording and replay; recorded.")
PIP_INDEX_URL = _optional("PIP_INDEX_URL", URL, TUNING, "pip's index: the origin recorded for index-installed packages.")
UV_INDEX_STRATEGY = _optional("UV_INDEX_STRATEGY", TEXT, TUNING, "uv's index strategy: when set, Kaliper does not ask for pip's.")
KUBECONFIG = _optional("KUBECONFIG", PATH, TUNING, "The kubeconfig files outside a cluster.")
XDG_CACHE_HOME = _optional("XDG_CACHE_HOME", PATH, TUNING, "The base of Kaliper's caches (unset: `~/.cache`).")
AWS_ENDPOINT_URL_S3 = _optional("AWS_ENDPOINT_URL_S3", URL, TUNING, "The S3 endpoint when KALIPER_S3_ENDPOINT is unset.")
AWS_ENDPOINT_URL = _optional("AWS_ENDPOINT_URL", URL, TUNING, "The S3 endpoint when KALIPER_S3_ENDPOINT and AWS_ENDPOINT_URL_S3 are unset.")
AWS_REGION = _optional("AWS_REGION", TEXT, TUNING, "The S3 region (pods get the spec's `s3.region`).")
AWS_ACCESS_KEY_ID = _optional("AWS_ACCESS_KEY_ID", TEXT, TUNING, "S3 credentials (pods: from `s3.secret`).", secret=True)
AWS_SECRET_ACCESS_KEY = _optional("AWS_SECRET_ACCESS_KEY", TEXT, TUNING, "S3 credentials (pods: from `s3.secret`).", secret=True)
AWS_SESSION_TOKEN = _optional("AWS_SESSION_TOKEN", TEXT, TUNING, "S3 temporary credentials' token.", secret=True)
SSL_CERT_FILE = _optional("SSL_CERT_FILE", PATH, TUNING, "The CA bundle for S3 over https (unset: certifi's).")
# fmt: on

DECLARED: Final[Mapping[str, Setting[Any]]] = _REGISTRY


def declared(name: str) -> Setting[Any]:
    """The setting named `name`; a KeyError for a variable nobody declared (a programming error)."""
    return _REGISTRY[name]


class Settings:
    """The declared settings' values in one environment (`load`, `current`, `of`): `settings[SETTING]`."""

    __slots__ = ("_environ", "_values")

    def __init__(self, environ: Mapping[str, str], values: Mapping[str, Any] | None = None) -> None:
        self._environ = environ
        self._values = values

    def __getitem__(self, setting: Setting[T]) -> T:
        if self._values is not None and setting.name in self._values:
            return cast("T", self._values[setting.name])
        return setting.value(self._environ.get(setting.name))

    def text(self, name: str) -> str | None:
        """The text a declared variable is set to (None: unset), for records of what it was."""
        return self._environ.get(declared(name).name)

    def with_defaults(self, defaults: Mapping[str, str]) -> Settings:
        """These settings where set and not empty, else `defaults` (a spec's `s3:` values)."""
        merged = dict(self._environ)
        merged.update({k: v for k, v in defaults.items() if not merged.get(k)})
        return Settings(merged)


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Every declared setting parsed from `environ` (default: this process's), at an entry point: one
    InputError naming every variable with a bad value."""
    snapshot = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, setting in _REGISTRY.items():
        try:
            values[name] = setting.value(snapshot.get(name))
        except InputError as exc:
            problems.append(str(exc))
    if problems:
        raise InputError("; ".join(problems))
    return Settings(snapshot, values)


def current() -> Settings:
    """This process's settings as its environment is now (see the module doc)."""
    return Settings(os.environ)


def of(environ: Mapping[str, str] | Settings | None) -> Settings:
    """The settings of an environment a caller passed (a child's, a test's); None: `current()`."""
    if environ is None:
        return current()
    return environ if isinstance(environ, Settings) else Settings(environ)


def _default_text(setting: Setting[Any]) -> str:
    if setting.secret or setting.default is None:
        return "unset"
    if setting.shown_default is not None:
        return setting.shown_default
    if isinstance(setting.default, bool):
        return "true" if setting.default else "false"
    if isinstance(setting.default, float):
        return f"{setting.default:g}"
    return f"`{setting.default}`" if isinstance(setting.default, str) else str(setting.default)


def render_markdown() -> str:
    """docs/reference/settings.md: the table of every declared variable."""
    lines = [
        "# Environment variables",
        "",
        "Generated from `src/kaliper/settings.py` (`render_markdown`); do not edit by hand: the tests",
        "compare this page with the registry (`KALIPER_REGENERATE=1 pytest tests/unit/settings/test_settings.py`",
        "rewrites it).",
        "",
        "Every `kaliper` command reads these once, before it does anything: a value that is not what the",
        "type column says stops it with `error: environment variable NAME: expected ..., found ...` and",
        "exit code 2. An empty value is the same as an unset one, except for text, url and path variables.",
        "",
        "Scope: **pod** — set by Kaliper (or the training operator) for a job's processes and read inside",
        "them; **tuning** — you may set it to tune Kaliper; **internal** — tests and plumbing.",
    ]
    sections = (
        ("Kaliper's settings", lambda name: name.startswith("KALIPER_")),
        ("Other tools' variables that Kaliper reads", lambda name: not name.startswith("KALIPER_")),
    )
    for title, belongs in sections:
        lines += [
            "",
            f"## {title}",
            "",
            "| Variable | Type | Default | Scope | Description |",
            "|---|---|---|---|---|",
        ]
        chosen = [s for s in _REGISTRY.values() if belongs(s.name)]
        order = {POD: 0, TUNING: 1, INTERNAL: 2}
        for s in sorted(chosen, key=lambda s: (order[s.scope], s.name)):
            doc = s.doc + (" Secret: never shown." if s.secret else "")
            cells = (f"`{s.name}`", s.kind.label, _default_text(s), s.scope, doc)
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
