"""transformer-train / transformer-infer in PyTorch: the model (shapes, causality, the KV cache), the FLOP
formulas against torch.utils.flop_counter, real runs through the runtime (valid records, the metric
arithmetic, no % of peak on a CPU), torch.compile (a failing compiler; a real compile is tested on a CNN), and a two-rank DDP
PyTorchJob through `kaliper run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kaliper.benchmarks.runtime import run_workload
from kaliper.benchmarks.transformer import flops
from kaliper.metrics.sampling import SamplingRule
from kaliper.results.record import ResultRecord, load_record
from tests.support.ddp import ddp_spec, run_ddp

torch = pytest.importorskip("torch")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402  (after the importorskip)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from kaliper.benchmarks.transformer.model import GPT, GPTConfig, KVCache, count_parameters  # noqa: E402

pytestmark = pytest.mark.slow

TINY = SamplingRule(warmup=2, target_rel_ci=0.5, min_samples=6, max_samples=8, max_time_s=3.0)
# The FLOP test's model: d large enough that biases and norms (13·d per layer, which the counter does not
# see) stay under 1% of the 12·d² weights, the head a quarter of N as in small real models.
FLOP_CONFIG = GPTConfig(layers=2, d_model=128, heads=4, vocab=512, context=64)
FLOP_SHAPE = flops.Shape(layers=2, d_model=128, vocab=512)
SMALL = {"layers": "2", "d_model": "32", "heads": "2", "vocab": "64", "threads": "1"}


@pytest.fixture(autouse=True)
def single_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process runs are not distributed and store their record on stdout; thread settings are undone."""
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "KALIPER_STORAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.setenv("MKL_NUM_THREADS", os.environ.get("MKL_NUM_THREADS", "1"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def model(config: GPTConfig = FLOP_CONFIG) -> Any:
    torch.manual_seed(0)
    return GPT(config)


# ---------------------------------------------------------------------------------------------- the model


def test_shapes_and_parameters() -> None:
    gpt = model()
    tokens = torch.randint(0, 512, (3, 64))
    assert gpt(tokens).shape == (3, 64, 512)
    assert gpt(tokens, last_only=True).shape == (3, 1, 512)
    assert gpt.head.weight is gpt.wte.weight  # tied
    # stored: N (the head's matmul is the token embedding, stored once) + the position embedding
    assert count_parameters(gpt) == FLOP_SHAPE.n + 64 * 128
    with pytest.raises(ValueError, match="exceed the model's context 64"):
        gpt(torch.randint(0, 512, (1, 65)))
    with pytest.raises(ValueError, match="not a multiple of heads"):
        GPTConfig(layers=1, d_model=66, heads=4, vocab=8, context=8)


def test_a_future_token_does_not_change_an_earlier_position() -> None:
    gpt = model().eval()
    tokens = torch.randint(0, 512, (2, 32))
    changed = tokens.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 512
    with torch.no_grad():
        before, after = gpt(tokens), gpt(changed)
    assert torch.equal(before[:, :20], after[:, :20])  # causal: bit for bit the same before position 20
    assert not torch.allclose(before[:, 20:], after[:, 20:])  # and the change is seen from there on


def test_kv_cache_generation_equals_full_forward() -> None:
    gpt = model().eval()
    tokens = torch.randint(0, 512, (2, 24))
    cache = KVCache(FLOP_CONFIG, 2, 24, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        full = gpt(tokens)
        steps = [gpt(tokens[:, :16], cache, 0, last_only=True)]
        steps += [gpt(tokens[:, p : p + 1], cache, p) for p in range(16, 24)]
    assert torch.allclose(torch.cat(steps, dim=1), full[:, 15:], atol=1e-5)


# ---------------------------------------------------------------------------------------------- FLOPs


def counted(run: Any) -> int:
    """FLOPs torch.utils.flop_counter counts. SDPA runs on its math backend: the counter has no rule for
    the CPU flash-attention kernel (it would miss attention entirely), while the math backend's bmm are
    counted, over the full s×s scores as the formulas count them."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        run()
    return int(counter.get_total_flops())


def test_train_flops_match_the_flop_counter() -> None:
    gpt = model().train()
    batch, seq = 2, 64
    tokens = torch.randint(0, 512, (batch, seq + 1))

    def step() -> None:
        logits = gpt(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 512), tokens[:, 1:].reshape(-1)).backward()

    got, formula = counted(step), flops.train_flops(FLOP_SHAPE, batch, seq)
    # The counter counts matmuls (and attention) only: the formula's 6 FLOPs per token for each bias and
    # norm parameter are the whole difference, exactly.
    assert formula - got == 6 * batch * seq * FLOP_SHAPE.body_elementwise_params
    assert abs(formula / got - 1) < 0.02  # 0.73% here


def test_prefill_and_decode_flops_match_the_flop_counter() -> None:
    gpt = model().eval()
    batch, prompt = 2, 40
    tokens = torch.randint(0, 512, (batch, prompt + 1))
    cache = KVCache(FLOP_CONFIG, batch, 64, torch.device("cpu"), torch.float32)
    elementwise = FLOP_SHAPE.body_elementwise_params
    with torch.no_grad():
        got = counted(lambda: gpt(tokens[:, :prompt], cache, 0, last_only=True))
        formula = flops.prefill_flops(FLOP_SHAPE, batch, prompt)
        assert formula - got == 2 * batch * prompt * elementwise
        assert abs(formula / got - 1) < 0.02
        got = counted(lambda: gpt(tokens[:, prompt:], cache, prompt))  # cache of prompt + 1 positions
        formula = flops.decode_flops(FLOP_SHAPE, batch, prompt + 1)
        assert formula - got == 2 * batch * elementwise
        assert abs(formula / got - 1) < 0.02


# ---------------------------------------------------------------------------------------------- runs


def run_record(name: str, params: dict[str, str], capsys: pytest.CaptureFixture[str]) -> ResultRecord:
    """One real run through the runtime (`kaliper workload`'s code), its record read back and validated."""
    capsys.readouterr()
    assert run_workload(name, "pytorch", params, TINY) == 0
    return load_record(capsys.readouterr().out, name)


def metric(record: ResultRecord, name: str) -> list[float]:
    return record.metrics[name].values


def test_train_run_record(capsys: pytest.CaptureFixture[str]) -> None:
    params = {**SMALL, "seq_len": "16", "batch_size": "2", "precision": "bf16"}
    record = run_record("transformer-train", params, capsys)
    assert record.status in ("ok", "not_converged")
    timed = record.samples.timed  # type: ignore[union-attr]
    assert len(record.samples.warmup) == TINY.warmup  # type: ignore[union-attr]
    assert metric(record, "tokens_per_s") == pytest.approx([32 * 1e9 / ns for ns in timed])
    assert metric(record, "tokens_per_s_total") == metric(record, "tokens_per_s")  # one process
    assert metric(record, "step_time") == pytest.approx([ns / 1e9 for ns in timed])
    shape = flops.Shape(layers=2, d_model=32, vocab=64)
    per_step = flops.train_flops(shape, 2, 16)
    assert metric(record, "model_tflops") == pytest.approx([per_step / ns / 1e3 for ns in timed])
    assert "6·N·T + 12·L·d·s·T" in record.metrics["model_tflops"].formula
    assert "pct_of_peak" not in record.metrics  # a CPU has no stated peak: no percentage
    assert "CPUs have no stated peak" in record.derived["peak_note"] and "peak" not in record.derived
    assert record.derived["flops"]["per_step"] == per_step and record.derived["flops"]["N"] == shape.n
    assert record.derived["compile"] == {"mode": "none"} and "compile_s" not in record.derived
    assert record.params["autocast"] == "bfloat16" and record.params["precision"] == "bf16"
    assert (record.derived["world_size"], record.derived["rank"]) == (1, 0)


@pytest.mark.parametrize(
    ("choice", "implementation"),
    [
        ("adamw", "forloop"),
        ("adamw-foreach", "foreach"),
        ("adamw-fused", "fused"),
        ("adamw-forloop", "forloop"),
    ],
)
def test_the_optimizer_runs_as_asked(
    choice: str, implementation: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimizer` picks AdamW's implementation; the record says which one ran, read from the optimizer
    (torch's own choice on CPU for `adamw`: the per-parameter loop)."""
    params = {**SMALL, "seq_len": "8", "batch_size": "2", "optimizer": choice}
    record = run_record("transformer-train", params, capsys)
    assert record.status in ("ok", "not_converged")
    assert record.derived["optimizer"] == {
        "name": "AdamW",
        "implementation": implementation,
        "asked": choice,
        "lr": 3e-4,
        "weight_decay": 0.1,
    }


def test_infer_run_record(capsys: pytest.CaptureFixture[str]) -> None:
    params = {**SMALL, "batch_size": "2", "prompt_len": "8", "output_len": "5", "precision": "fp16"}
    record = run_record("transformer-infer", params, capsys)
    assert record.status in ("ok", "not_converged")
    timed = record.samples.timed  # type: ignore[union-attr]
    ttft, tpot = metric(record, "time_to_first_token"), metric(record, "time_per_output_token")
    # the sample is the generation: first token + 4 decode steps
    assert [t + 4 * p for t, p in zip(ttft, tpot, strict=True)] == pytest.approx([ns / 1e9 for ns in timed])
    assert metric(record, "decode_tokens_per_s") == pytest.approx([2 / p for p in tpot])
    assert metric(record, "prefill_tokens_per_s") == pytest.approx([16 / t for t in ttft])
    shape = flops.Shape(layers=2, d_model=32, vocab=64)
    assert metric(record, "prefill_tflops") == pytest.approx(
        [flops.prefill_flops(shape, 2, 8) / t / 1e12 for t in ttft]
    )
    decode = flops.generation_decode_flops(shape, 2, 8, 5)
    assert metric(record, "decode_tflops") == pytest.approx([decode / (4 * p) / 1e12 for p in tpot])
    assert not {"pct_of_peak", "decode_pct_of_peak"} & set(record.metrics)
    assert "CPUs have no stated peak" in record.derived["peak_note"]
    assert record.derived["model"]["context"] == 13


def test_a_failed_compile_is_a_failed_run_with_the_reason(tmp_path: Path) -> None:
    """Inductor's CPU kernels need a C++ compiler; CXX pointing nowhere makes the compile fail for real.
    (A successful compile timed apart from the samples is tested once, on a CNN step, in
    test_peak_compile.py: both families use kaliper.benchmarks.torch_compile.)"""
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++")}
    env.pop("KALIPER_STORAGE", None)
    args = [
        f"--param={k}={v}" for k, v in {**SMALL, "layers": "1", "seq_len": "8", "compile": "default"}.items()
    ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kaliper",
            "workload",
            "transformer-train",
            *args,
            "--warmup=1",
            "--min-samples=6",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    record = load_record(proc.stdout, "stdout")
    assert record.status == "failed"
    assert record.error is not None and "torch.compile(mode='default') failed" in record.error
    assert "no-such-c++" in record.error or "compiler" in record.error.lower(), record.error


# ---------------------------------------------------------------------------------------------- DDP


def test_ddp_pytorchjob_trains_in_sync(tmp_path: Path) -> None:
    params = {"layers": 1, "d_model": 32, "heads": 2, "vocab": 64, "seq_len": 16, "batch_size": 2}
    trial = run_ddp(ddp_spec("transformer-ddp", "transformer-train", params, max_samples=10), tmp_path, 600)
    run = trial / "runs" / "0"
    records = {path.name: json.loads(path.read_text()) for path in run.glob("*-0.json")}
    assert set(records) == {"master-0.json", "worker-0.json"}
    for name, rank in (("master-0.json", 0), ("worker-0.json", 1)):
        derived = records[name]["derived"]
        assert (derived["world_size"], derived["rank"]) == (2, rank)
        assert derived["params_in_sync"] is True  # the gradient all-reduce really happened
        assert derived["distributed"]["backend"] == "gloo"
        assert derived["global_batch_size"] == 4
        mine, total = (records[name]["metrics"][m]["values"] for m in ("tokens_per_s", "tokens_per_s_total"))
        assert all(
            t > m for m, t in zip(mine, total, strict=True)
        )  # the other rank's tokens are in the total
    assert (
        records["master-0.json"]["derived"]["data"]["seed"]
        != records["worker-0.json"]["derived"]["data"]["seed"]
    )
