"""The built-in workloads: names, parameters and where each framework's implementation lives.

Implementations are imported lazily (`module:function`), so validating a spec or printing `--help`
never imports torch or tensorflow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kaliper.benchmarks.collective.formulas import OPS as COLLECTIVE_OPS
from kaliper.benchmarks.params import Param, ParamSet, ParamValue
from kaliper.benchmarks.serve import config as serve_config
from kaliper.benchmarks.torch_compile import MODES as COMPILE_MODES
from kaliper.errors import ParameterError
from kaliper.trace import MALLOC_ENV

COMMON_DEVICE = Param("device", str, "cpu", "where the work runs", choices=("cpu", "cuda"))
COMMON_THREADS = Param(
    "threads",
    int,
    0,
    "intra-op threads for the framework and the BLAS; 0 = the CPUs this process may use",
    minimum=0,
)

COMMON_COMPILE = Param(
    "compile",
    str,
    "none",
    "torch.compile mode: none (eager), default or max-autotune; compile time is recorded apart "
    "(derived.compile_s), never in a sample",
    choices=COMPILE_MODES,
)


@dataclass(frozen=True)
class FrameworkOnly:
    """A parameter only some frameworks implement: the others accept its default only (and say why)."""

    param: str
    frameworks: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class WorkloadDef:
    """A built-in benchmark: its parameters and its implementation per framework."""

    name: str
    summary: str
    params: ParamSet
    implementations: dict[str, str]  # framework -> "module:function"
    version: str
    # Set in the job's containers (a cluster's pods and local replicas alike), under a stack's own env:
    # what the workload's processes need from start-up (trace-replay: glibc malloc as when recorded).
    env: tuple[tuple[str, str], ...] = ()
    framework_only: tuple[FrameworkOnly, ...] = ()
    # "module:function" reading and checking a trial's input files when the experiment is configured
    # (serve: a dataset and a tokenizer): (params, spec directory, where, on_cluster) -> {stored name:
    # bytes} that the experiment keeps for its replicas; its errors stop the spec before anything runs.
    inputs: str = ""
    # "module:function" checking a trial's job against its parameters when the experiment is configured
    # (trace-replay: one replica per recorded rank): (params, replica counts, storage URL, where); a
    # SpecError stops the spec before anything runs.
    job_check: str = ""
    # The parameters a report line names for a trial (serve: those of its SUT and scenario); None: all.
    shown: Callable[[Mapping[str, ParamValue]], dict[str, ParamValue]] | None = None

    def shown_params(self, params: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
        return dict(params) if self.shown is None else self.shown(params)

    def configure_inputs(
        self, params: Mapping[str, ParamValue], base_dir: Path, where: str, on_cluster: bool
    ) -> dict[str, bytes]:
        if not self.inputs:
            return {}
        module_name, function = self.inputs.split(":")
        found: dict[str, bytes] = getattr(importlib.import_module(module_name), function)(
            params, base_dir, where, on_cluster
        )
        return found

    def check_job(
        self, params: Mapping[str, ParamValue], replicas: Mapping[str, int], storage_url: str, where: str
    ) -> None:
        if self.job_check:
            module_name, function = self.job_check.split(":")
            getattr(importlib.import_module(module_name), function)(params, replicas, storage_url, where)

    def check_framework_param(self, framework: str, name: str, value: ParamValue, where: str) -> None:
        """ParameterError naming `where` when `framework` does not implement `name` = `value`."""
        param = self.params.get(name)
        for only in self.framework_only:
            if only.param == name and framework not in only.frameworks and param and value != param.default:
                raise ParameterError(
                    f"{where}: {name} {value!r} is not available with framework {framework} "
                    f"(only {', '.join(only.frameworks)}; {framework} takes {param.default!r}): {only.why}"
                )

    def check_framework_params(self, framework: str, params: dict[str, Any], where: str) -> None:
        for name, value in params.items():
            self.check_framework_param(framework, name, value, f"{where}.{name}")

    def implementation_target(self, framework: str, where: str = "framework") -> str:
        """`module:function` of the implementation for `framework`, without importing it."""
        target = self.implementations.get(framework)
        if target is None:
            have = ", ".join(sorted(self.implementations))
            raise ParameterError(
                f"{where}: workload {self.name} has no {framework} implementation (available: {have})"
            )
        return target

    def implementation(self, framework: str) -> Callable[..., Any]:
        module_name, function = self.implementation_target(framework).split(":")
        return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]


COMMON_DTYPE = Param(
    "dtype", str, "float32", "element type", choices=("float32", "float64", "bfloat16", "float16")
)
COMMON_CALLS = Param(
    "calls_per_sample",
    int,
    0,
    "operations timed together as one sample; 0 = calibrate so a sample lasts >= 10 ms",
    minimum=0,
)

PI_MATMUL = WorkloadDef(
    name="pi-matmul",
    summary="square matrix multiply C = A·B; GFLOP/s = 2n³ / t per call",
    params=ParamSet(
        (
            Param("matrix_size", int, 512, "n: A, B and C are n×n", minimum=1),
            COMMON_DTYPE,
            COMMON_DEVICE,
            COMMON_THREADS,
            COMMON_CALLS,
        )
    ),
    implementations={
        "pytorch": "kaliper.benchmarks.pi.pi_matmul_torch:run",
        "tensorflow": "kaliper.benchmarks.pi.pi_matmul_tf:run",
        "numpy": "kaliper.benchmarks.pi.pi_matmul_numpy:run",
    },
    version="1",
)

# Defaults: DeepBench's first DeepSpeech conv problem (conv_problems.h: W700 H161 C1 N4 K32, S20 R5,
# pad 0, stride 2); Thoth's PiConv2D used the same shape with SAME padding.
PI_CONV2D = WorkloadDef(
    name="pi-conv2d",
    summary="2-D convolution; GFLOP/s = 2·N·Ho·Wo·Kh·Kw·Cin·Cout / t (forward; ×3 with backward)",
    params=ParamSet(
        (
            Param("batch", int, 4, "N: images per call", minimum=1),
            Param("height", int, 161, "H: input height", minimum=1),
            Param("width", int, 700, "W: input width", minimum=1),
            Param("channels", int, 1, "Cin: input channels", minimum=1),
            Param("filters", int, 32, "Cout: output channels", minimum=1),
            Param("kernel_height", int, 5, "Kh (DeepBench R)", minimum=1),
            Param("kernel_width", int, 20, "Kw (DeepBench S)", minimum=1),
            Param("stride", int, 2, "stride in both dimensions", minimum=1),
            Param(
                "padding",
                str,
                "valid",
                "valid (no padding, DeepBench) or same (Thoth)",
                choices=("valid", "same"),
            ),
            Param("data_format", str, "NCHW", "memory layout", choices=("NCHW", "NHWC")),
            Param(
                "mode",
                str,
                "forward",
                "forward, or forward + backward (data and filter gradients)",
                choices=("forward", "forward_backward"),
            ),
            COMMON_DTYPE,
            COMMON_DEVICE,
            COMMON_THREADS,
            COMMON_CALLS,
        )
    ),
    implementations={
        "pytorch": "kaliper.benchmarks.pi.pi_conv2d_torch:run",
        "tensorflow": "kaliper.benchmarks.pi.pi_conv2d_tf:run",
    },
    version="1",
)

PI_IMPORT = WorkloadDef(
    name="pi-import",
    summary="cold start: import the framework and run a first op, in a fresh process per sample",
    params=ParamSet((COMMON_DEVICE, COMMON_THREADS)),
    implementations={
        "pytorch": "kaliper.benchmarks.pi.pi_import:run_pytorch",
        "tensorflow": "kaliper.benchmarks.pi.pi_import:run_tensorflow",
    },
    version="1",
)

_CNN_PARAMS = (
    Param(
        "model",
        str,
        "resnet50",
        "resnet50, or small (a 4-block ResNet for quick runs)",
        choices=("resnet50", "small"),
    ),
    Param("batch_size", int, 32, "images per step per replica", minimum=1),
    Param("image_size", int, 224, "input height and width (ImageNet: 224)", minimum=32),
    Param("num_classes", int, 1000, "output classes", minimum=2),
    Param("precision", str, "fp32", "fp32, or bf16 autocast/mixed precision", choices=("fp32", "bf16")),
    Param(
        "data",
        str,
        "synthetic",
        "synthetic tensors (compute only) or files read by a real input pipeline",
        choices=("synthetic", "files"),
    ),
    Param("data_dir", str, "", "directory of generated image files; empty = generate into a temp dir"),
    Param(
        "data_workers",
        int,
        2,
        "input pipeline workers (DataLoader workers / tf.data parallel calls)",
        minimum=0,
    ),
    COMMON_COMPILE,
    Param(
        "memory_format",
        str,
        "contiguous",
        "torch memory format of the model and the input batch: contiguous (NCHW) or channels_last "
        "(NHWC: what bf16/fp16 convolutions need to run on tensor cores)",
        choices=("contiguous", "channels_last"),
    ),
    COMMON_DEVICE,
    COMMON_THREADS,
)
# TensorFlow's Keras layers run NHWC (data_format "channels_last", Keras' default) whatever the parameter
# says, and XLA's jit_compile is not torch.compile: a TF spec keeps both parameters at their defaults.
_CNN_TORCH_ONLY = (
    FrameworkOnly("compile", ("pytorch",), "it is torch.compile; TensorFlow runs its steps in tf.function"),
    FrameworkOnly(
        "memory_format",
        ("pytorch",),
        "it is torch's memory format; the TensorFlow models always run NHWC (Keras data_format "
        "channels_last), which derived.data_format records",
    ),
)

CNN_TRAIN = WorkloadDef(
    name="cnn-train",
    summary="CNN training steps (forward, backward, SGD update); images/s per replica and in total",
    params=ParamSet(_CNN_PARAMS),
    implementations={
        "pytorch": "kaliper.benchmarks.cnn.cnn_torch:run_train",
        "tensorflow": "kaliper.benchmarks.cnn.cnn_tf:run_train",
    },
    version="1",
    framework_only=_CNN_TORCH_ONLY,
)

CNN_INFER = WorkloadDef(
    name="cnn-infer",
    summary="CNN inference steps (forward only); images/s and per-step latency",
    params=ParamSet(_CNN_PARAMS),
    implementations={
        "pytorch": "kaliper.benchmarks.cnn.cnn_torch:run_infer",
        "tensorflow": "kaliper.benchmarks.cnn.cnn_tf:run_infer",
    },
    version="1",
    framework_only=_CNN_TORCH_ONLY,
)

# The GPT decoder of kaliper.benchmarks.transformer; defaults: a 4-layer, 256-wide model (5.3 M parameters
# with the tied 8192-token embedding) that trains at a few steps per second on a few CPU cores.
_TRANSFORMER_MODEL = (
    Param("layers", int, 4, "L: decoder blocks", minimum=1, maximum=1024),
    Param("d_model", int, 256, "d: model width (a multiple of heads)", minimum=8, maximum=65536),
    Param("heads", int, 4, "attention heads (head size = d_model / heads)", minimum=1, maximum=1024),
    Param(
        "vocab",
        int,
        8192,
        "V: vocabulary size (synthetic token ids are drawn from it)",
        minimum=2,
        maximum=1_048_576,
    ),
)
_TRANSFORMER_RUN = (
    Param(
        "precision",
        str,
        "fp32",
        "fp32, bf16 autocast, or fp16 autocast (training: with a GradScaler)",
        choices=("fp32", "bf16", "fp16"),
    ),
    Param(
        "compile",
        str,
        "none",
        "torch.compile mode: none (eager), default or max-autotune; compile time is recorded apart "
        "(derived.compile_s), never in a sample",
        choices=("none", "default", "max-autotune"),
    ),
    COMMON_DEVICE,
    COMMON_THREADS,
)


def _heads_divide_width(values: Mapping[str, Any], where: str) -> None:
    d_model, heads = int(values["d_model"]), int(values["heads"])
    if d_model % heads:
        raise ParameterError(
            f"{where}.d_model: expected a multiple of heads={heads} (attention splits d_model into heads), "
            f"found {d_model}"
        )


TRANSFORMER_TRAIN = WorkloadDef(
    name="transformer-train",
    summary="GPT-style decoder training steps (AdamW, synthetic tokens); tokens/s per replica and in "
    "total, MFU = 6·N·T + 12·L·d·s·T FLOPs / step time against the device's peak",
    params=ParamSet(
        (
            *_TRANSFORMER_MODEL,
            Param(
                "seq_len",
                int,
                256,
                "s: tokens per sequence (the model's context)",
                minimum=1,
                maximum=1_048_576,
            ),
            Param("batch_size", int, 8, "sequences per step per replica", minimum=1),
            Param(
                "optimizer",
                str,
                "adamw",
                "AdamW's implementation: adamw (torch's own choice: foreach on CUDA, a per-parameter loop on "
                "CPU), adamw-foreach, adamw-fused (one fused kernel per step, what tuned loops use) or "
                "adamw-forloop; recorded in derived.optimizer",
                choices=("adamw", "adamw-foreach", "adamw-fused", "adamw-forloop"),
            ),
            *_TRANSFORMER_RUN,
        ),
        checks=(_heads_divide_width,),
    ),
    implementations={"pytorch": "kaliper.benchmarks.transformer.train:run"},
    version="1",
)

TRANSFORMER_INFER = WorkloadDef(
    name="transformer-infer",
    summary="GPT-style decoder greedy generation with a KV cache; prefill tokens/s and time to first "
    "token, decode tokens/s and time per output token",
    params=ParamSet(
        (
            *_TRANSFORMER_MODEL,
            Param("batch_size", int, 8, "sequences generated together", minimum=1),
            Param("prompt_len", int, 128, "p: prompt tokens (prefill)", minimum=1, maximum=1_048_576),
            Param(
                "output_len",
                int,
                128,
                "tokens generated per sequence: the first by the prefill, the rest by decode steps",
                minimum=2,
                maximum=1_048_576,
            ),
            *_TRANSFORMER_RUN,
        ),
        checks=(_heads_divide_width,),
    ),
    implementations={"pytorch": "kaliper.benchmarks.transformer.infer:run"},
    version="1",
)

TRACE_REPLAY = WorkloadDef(
    name="trace-replay",
    summary="replay a recorded PyTorch execution trace's operators (Mystique); ms per replayed iteration, "
    "fidelity to the original and coverage",
    params=ParamSet(
        (
            Param(
                "trace",
                str,
                "",
                "the recorded trace: traces/<name> in the run's storage, a bundle folder or "
                "file:// URL, or an http(s):// URL",
                required=True,
            ),
            Param("iterations", int, 1, "replayed iterations (the traced steps, once) per sample", minimum=1),
            Param(
                "reset",
                bool,
                True,
                "restore the generated tensors before each sample (outside the timer) so repeated "
                "training updates do not drift towards inf/NaN",
            ),
            COMMON_DEVICE,
            COMMON_THREADS,
        )
    ),
    implementations={"pytorch": "kaliper.benchmarks.trace_replay.trace_replay_torch:run"},
    version="1",
    env=tuple(MALLOC_ENV.items()),
    job_check="kaliper.benchmarks.trace_replay.ranks:check_replicas",
)

SERVE = WorkloadDef(
    name="serve",
    summary="MLPerf LoadGen scenarios (SingleStream, MultiStream, Server, Offline) against a built-in model "
    "or your inference server over HTTP; LoadGen's per-query latency, its VALID/INVALID verdict, TTFT/TPOT",
    params=serve_config.PARAMS,
    implementations={
        "pytorch": "kaliper.benchmarks.serve.workload:run",
        "numpy": "kaliper.benchmarks.serve.workload:run",
    },
    version="2",
    inputs="kaliper.benchmarks.serve.inputs:configure_inputs",
    shown=serve_config.shown_params,
)

COLLECTIVE = WorkloadDef(
    name="collective",
    summary="a torch.distributed collective (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, "
    "send_recv) over the job's ranks: time, algorithm and bus bandwidth as nccl-tests define them, the result "
    "checked",
    params=ParamSet(
        (
            Param("op", str, "all_reduce", "the collective", choices=COLLECTIVE_OPS),
            Param(
                "size",
                int,
                1 << 20,
                "S in bytes, nccl-tests' way: the whole array (all_gather, reduce_scatter, all_to_all) or each "
                "rank's buffer (all_reduce, broadcast, send_recv)",
                minimum=1,
                maximum=1 << 34,
            ),
            Param(
                "dtype", str, "float32", "element type", choices=("float32", "float64", "bfloat16", "float16")
            ),
            COMMON_DEVICE,
            COMMON_THREADS,
            COMMON_CALLS,
        )
    ),
    implementations={"pytorch": "kaliper.benchmarks.collective.collective_torch:run"},
    version="1",
)

WORKLOADS: dict[str, WorkloadDef] = {
    w.name: w
    for w in (
        PI_MATMUL,
        PI_CONV2D,
        PI_IMPORT,
        CNN_TRAIN,
        CNN_INFER,
        TRANSFORMER_TRAIN,
        TRANSFORMER_INFER,
        TRACE_REPLAY,
        SERVE,
        COLLECTIVE,
    )
}


def get_workload(name: str) -> WorkloadDef:
    """The built-in workload called `name`; ParameterError listing the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(WORKLOADS))
        raise ParameterError(f"unknown workload {name!r} (built-in workloads: {known})") from None
