"""The CNNs' model FLOPs and % of peak, `compile:` and `memory_format:` on real runs (PyTorch and
TensorFlow, `small` model at 32×32): compile time is kept out of every sample, a failed compile is a
failed run that names Inductor's reason, channels_last really reaches the weights and the batch, and a
faked datasheet GPU name (only the name lookup) gives pct_of_peak = 100 · rate / peak.

A real torch.compile of a training step takes one to several minutes on a busy 2-core machine: one run
checks everything about a successful compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kaliper.benchmarks import peaks
from kaliper.benchmarks.catalog import get_workload
from kaliper.benchmarks.measurement import Measurement
from kaliper.metrics.sampling import SamplingRule

torch = pytest.importorskip("torch")

TINY = SamplingRule(warmup=2, target_rel_ci=0.5, min_samples=6, max_samples=6, max_time_s=30.0)
H100 = "NVIDIA H100 80GB HBM3"
CNN = {
    "model": "small",
    "batch_size": 2,
    "image_size": 32,
    "num_classes": 10,
    "threads": 1,
    "data_workers": 1,
}


@pytest.fixture(autouse=True)
def single_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def measure(workload: str, framework: str, **given: Any) -> Measurement:
    definition = get_workload(workload)
    params = definition.params.resolve(given, workload, "test")
    definition.check_framework_params(framework, params, "test")
    result: Measurement = definition.implementation(framework)(params, TINY)
    return result


def values(m: Measurement, name: str) -> list[float]:
    return m.metrics[name].per_sample(m.samples.timed_ns)


def fake_name(
    monkeypatch: pytest.MonkeyPatch, target: str, real: Callable[..., tuple[Any, str]], name: str
) -> None:
    """Replace only the GPU name the workload looks its peak up by; the precision stays the real rule's."""

    def named(*args: Any, **kwargs: Any) -> tuple[str, str]:
        return name, real(*args, **kwargs)[1]

    monkeypatch.setattr(target, named)


# ---------------------------------------------------------------------------------------------- torch


def test_torch_cnn_model_flops_are_torchs_own_count_of_a_real_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """derived.flops counts a meta-device copy; the same counter over a real forward of batch 2 agrees,
    and model_tflops is that count × images/s. With an H100's name the fp32 row gives the percentage."""
    from torch.utils.flop_counter import FlopCounterMode

    from kaliper.benchmarks import torch_support
    from kaliper.benchmarks.cnn.models_torch import build_model

    fake_name(monkeypatch, "kaliper.benchmarks.cnn.cnn_torch.peak_inputs", torch_support.peak_inputs, H100)
    m = measure("cnn-infer", "pytorch", **CNN)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        build_model("small", 10).eval()(torch.randn(2, 3, 32, 32))
    assert m.derived["flops"]["forward_per_image"] * 2 == counter.get_total_flops()
    per_step = m.derived["flops"]["per_step"]
    assert per_step == 2 * m.derived["flops"]["forward_per_image"]
    tflops = values(m, "model_tflops")
    assert tflops == pytest.approx([per_step / ns / 1e3 for ns in m.samples.timed_ns])
    assert m.derived["peak"] == peaks.TABLE[("H100 SXM", "fp32")].as_record()
    assert values(m, peaks.PCT_METRIC) == pytest.approx([100 * t * 1e12 / 67e12 for t in tflops])
    assert m.derived["compile"] == {"mode": "none"} and "compile_s" not in m.derived


def test_on_the_cpu_a_cnn_record_says_why_it_has_no_percentage() -> None:
    m = measure("cnn-train", "pytorch", **CNN)
    assert peaks.PCT_METRIC not in m.metrics and "peak" not in m.derived
    assert m.derived["peak_note"] == "no % of peak: CPUs have no stated peak (kaliper.benchmarks.peaks)"
    assert m.derived["flops"]["per_step"] == 3 * 2 * m.derived["flops"]["forward_per_image"]
    assert m.derived["layout"] == {
        "memory_format": "contiguous",
        "input_channels_last": False,
        "conv_weights_channels_last": False,
    }


def test_a_compiled_channels_last_inference_step_compiles_before_sampling() -> None:
    """compile: default with Inductor's C++ backend (g++ here): the compiling calls are timed apart, and
    every warm-up and timed sample is a plain step, far shorter than the call that compiled. Inference:
    Inductor builds the forward kernels only (a training step's backward took minutes more here); the
    training path's compile wiring is tested by its failure (test_transformer_torch, the CXX case below),
    both through kaliper.benchmarks.torch_compile."""
    m = measure("cnn-infer", "pytorch", **CNN, compile="default", memory_format="channels_last")
    compiled = m.derived["compile"]
    assert compiled["mode"] == "default" and compiled["compiled_on_last_call"] is False
    assert 1 <= compiled["calls"] <= 4 and m.derived["compile_s"] == pytest.approx(sum(compiled["call_s"]))
    assert len(m.samples.warmup_ns) == TINY.warmup and len(m.samples.timed_ns) == TINY.max_samples
    longest = max(m.samples.warmup_ns + m.samples.timed_ns) / 1e9
    assert longest < compiled["call_s"][0] / 5, (longest, compiled)
    assert m.derived["layout"] == {
        "memory_format": "channels_last",
        "input_channels_last": True,
        "conv_weights_channels_last": True,
    }


def test_a_failed_compile_is_a_failed_run_naming_the_reason(tmp_path: Path) -> None:
    """No working C++ compiler (CXX points nowhere; an empty Inductor cache so nothing cached hides it):
    `kaliper workload` fails, and the record's error says the compile failed and why."""
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-g++"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
    }
    env.pop("KALIPER_STORAGE", None)
    args = [f"--param={k}={v}" for k, v in {**CNN, "compile": "default"}.items()]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kaliper",
            "workload",
            "cnn-infer",
            *args,
            "--warmup",
            "0",
            "--min-samples",
            "6",
            "--max-samples",
            "6",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    record = json.loads(done.stdout)
    assert record["status"] == "failed"
    assert record["error"].startswith(
        "WorkloadError: compile: torch.compile(mode='default') failed: InductorError: InvalidCxxCompiler: "
        "No working C++ compiler"
    ), record["error"]


# ---------------------------------------------------------------------------------------------- tensorflow


@pytest.fixture
def tf_support() -> Any:
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    from kaliper.benchmarks import tf_support

    return tf_support


def test_tensorflow_pi_matmul_and_cnn_peaks(tf_support: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU: a note, no percentage. With a datasheet GPU's name: its row (float32 on the CPU device:
    the FP32 row, TF32 being a GPU setting). The TF `small` model counts the same FLOPs as torch's."""
    plain = measure("pi-matmul", "tensorflow", matrix_size=32, threads=1, calls_per_sample=2)
    assert peaks.PCT_METRIC not in plain.metrics
    assert plain.derived["peak_note"] == "no % of peak: CPUs have no stated peak (kaliper.benchmarks.peaks)"

    fake_name(
        monkeypatch, "kaliper.benchmarks.pi.pi_matmul_tf.tf_peak_inputs", tf_support.tf_peak_inputs, H100
    )
    m = measure("pi-matmul", "tensorflow", matrix_size=32, threads=1, calls_per_sample=2)
    assert m.derived["peak"]["model"] == "H100 SXM" and m.derived["peak"]["precision"] == "fp32"
    assert values(m, peaks.PCT_METRIC) == pytest.approx([100 * g * 1e9 / 67e12 for g in values(m, "gflops")])

    fake_name(
        monkeypatch, "kaliper.benchmarks.cnn.cnn_tf.tf_peak_inputs", tf_support.tf_peak_inputs, "NVIDIA L40"
    )
    cnn = measure("cnn-infer", "tensorflow", **CNN)
    assert peaks.PCT_METRIC not in cnn.metrics
    assert (
        cnn.derived["peak_note"]
        == "no % of peak: no datasheet row for 'NVIDIA L40' at fp32 (kaliper.benchmarks.peaks)"
    )
    from kaliper.benchmarks.cnn.models_torch import build_model, forward_flops_per_image

    assert cnn.derived["flops"]["forward_per_image"] == forward_flops_per_image(build_model("small", 10), 32)
    per_image = cnn.derived["flops"]["per_image"]
    assert values(cnn, "model_tflops") == pytest.approx(
        [per_image * v / 1e12 for v in values(cnn, "images_per_s")]
    )
    assert cnn.derived["data_format"].startswith("NHWC")
