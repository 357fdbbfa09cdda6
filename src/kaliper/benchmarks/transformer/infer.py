"""transformer-infer in PyTorch: greedy generation with a KV cache by the GPT decoder (model.py).

One sample = one generation for batch_size sequences: a prefill of a synthetic prompt of prompt_len
tokens (a fixed random batch from a seeded generator) that fills the KV cache and yields the first
output token (logits of the last position, argmax), then output_len − 1 decode steps, each feeding the
last token and attending to the cache. The device is synchronised before the sample starts, after the
first token and at the end; between decode steps nothing waits (the next step needs only the argmax
on the device), as a serving loop runs. The cache is allocated once, outside the timer, in the
autocast dtype.

Metrics per generation: `decode_tokens_per_s` = batch_size·(output_len − 1) / decode time,
`time_per_output_token` = decode time / (output_len − 1), `prefill_tokens_per_s` = batch_size·prompt_len
/ time to first token, `time_to_first_token` (prefill + first argmax), `generation_time` (the sample),
`prefill_tflops` and `decode_tflops` (model FLOPs, flops.PREFILL_FORMULA and DECODE_FORMULA, over the
phase's time), `pct_of_peak` (prefill: the compute-bound phase, its MFU) and `decode_pct_of_peak`
(decode is bound by memory bandwidth: a low figure is expected, not a fault).

Inference exchanges nothing between replicas: with WORLD_SIZE > 1 each replica measures alone (no
process group) and records its world size and rank; the job's throughput is the sum of the replicas'.

`compile` wraps the model in torch.compile. The prefill and the growing decode shapes compile on the
first generation (dynamo marks the growing dimension dynamic after its first recompile), so one whole
generation is made and timed before sampling (`derived.compile_s`) and is not a sample.
"""

from __future__ import annotations

import time
from typing import Any

from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.peaks import PCT_METRIC, with_peak
from kaliper.benchmarks.torch_compile import compiled, first_calls
from kaliper.benchmarks.torch_distributed import distributed_env
from kaliper.benchmarks.torch_support import (
    device_and_sync,
    peak_inputs,
    set_thread_env,
    torch_measurement,
    torch_threads,
)
from kaliper.benchmarks.transformer import common, flops
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule, collect


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    set_thread_env(int(params["threads"]))
    import torch

    from kaliper.benchmarks.transformer.model import GPT, GPTConfig, KVCache, count_parameters

    threads = torch_threads(int(params["threads"]))
    dist_env = distributed_env()
    device, sync = device_and_sync(str(params["device"]))
    batch, prompt_len, output_len = (
        int(params["batch_size"]),
        int(params["prompt_len"]),
        int(params["output_len"]),
    )
    vocab, precision, mode = int(params["vocab"]), str(params["precision"]), str(params["compile"])
    if output_len < 2:
        raise WorkloadError(f"output_len={output_len}: decode needs at least 2 output tokens")
    context = prompt_len + output_len
    config = GPTConfig(
        layers=int(params["layers"]),
        d_model=int(params["d_model"]),
        heads=int(params["heads"]),
        vocab=vocab,
        context=context,
    )
    torch.manual_seed(common.MODEL_SEED)
    model = GPT(config).to(device).eval()
    net = compiled(model, mode)
    autocast = common.autocast(device, precision)
    cache = KVCache(config, batch, context, device, common.torch_dtype(precision) or torch.float32)
    generator = torch.Generator().manual_seed(common.DATA_SEED + dist_env.rank)
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=generator).to(device)
    phases: list[tuple[int, int]] = []  # (prefill ns, decode ns) of every generation, warm-up first

    def generate() -> tuple[int, int]:
        with torch.inference_mode(), autocast():
            sync()
            start = time.perf_counter_ns()
            token = net(prompt, cache, 0, last_only=True).argmax(dim=-1)
            sync()
            first = time.perf_counter_ns()
            for i in range(output_len - 1):
                token = net(token, cache, prompt_len + i).argmax(dim=-1)
            sync()
            end = time.perf_counter_ns()
        return first - start, end - first

    def first_generation() -> None:
        generate()

    compile_info = first_calls(first_generation, sync, mode)

    def measure() -> int:
        prefill_ns, decode_ns = generate()
        phases.append((prefill_ns, decode_ns))
        return prefill_ns + decode_ns

    samples = collect(measure, rule)
    timed_phases = phases[len(samples.warmup_ns) :]
    if [p + d for p, d in timed_phases] != samples.timed_ns:
        raise WorkloadError("internal: per-phase timings do not match the samples")
    prefill_s = [p / 1e9 for p, _ in timed_phases]
    decode_s = [d / 1e9 for _, d in timed_phases]
    steps = output_len - 1

    shape = common.shape_of(params)
    prefill_flop = flops.prefill_flops(shape, batch, prompt_len)
    decode_flop = flops.generation_decode_flops(shape, batch, prompt_len, output_len)
    metrics: dict[str, MetricDef] = {
        "decode_tokens_per_s": MetricDef(
            unit="tokens/s",
            direction="more_is_better",
            formula="batch_size·(output_len − 1) / decode time (after the first token)",
            values=[batch * steps / s for s in decode_s],
        ),
        "time_per_output_token": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="decode time / (output_len − 1)",
            values=[s / steps for s in decode_s],
        ),
        "prefill_tokens_per_s": MetricDef(
            unit="tokens/s",
            direction="more_is_better",
            formula="batch_size·prompt_len / time_to_first_token",
            values=[batch * prompt_len / s for s in prefill_s],
        ),
        "time_to_first_token": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="prefill of the prompt + argmax of the last position's logits, device synchronised",
            values=prefill_s,
        ),
        "generation_time": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="time_to_first_token + decode time (the sample)",
            from_ns=lambda ns: ns / 1e9,
        ),
        "prefill_tflops": MetricDef(
            unit="TFLOP/s",
            direction="more_is_better",
            formula=f"prefill FLOPs / time_to_first_token / 1e12; FLOPs = {flops.PREFILL_FORMULA}",
            values=[prefill_flop / s / 1e12 for s in prefill_s],
        ),
        "decode_tflops": MetricDef(
            unit="TFLOP/s",
            direction="more_is_better",
            formula=f"sum of the decode steps' FLOPs / decode time / 1e12; per step {flops.DECODE_FORMULA}",
            values=[decode_flop / s / 1e12 for s in decode_s],
        ),
    }
    device_name, peak_precision = peak_inputs(device, common.PRECISION_DTYPE[precision])
    decode_pct, _ = with_peak(
        {"decode_tflops": metrics["decode_tflops"]}, "decode_tflops", 1e12, device_name, peak_precision
    )
    metrics, peak_info = with_peak(metrics, "prefill_tflops", 1e12, device_name, peak_precision)
    if PCT_METRIC in decode_pct:
        metrics["decode_pct_of_peak"] = decode_pct[PCT_METRIC]
    derived: dict[str, Any] = {
        "model": {
            "layers": config.layers,
            "d_model": config.d_model,
            "heads": config.heads,
            "vocab": vocab,
            "context": context,
            "parameters": count_parameters(model),
        },
        "flops": {
            "N": shape.n,
            "N_body": shape.n_body,
            "N_head": shape.n_head,
            "prefill": prefill_flop,
            "decode": decode_flop,
            "prefill_formula": flops.PREFILL_FORMULA,
            "decode_formula": flops.DECODE_FORMULA,
        },
        "batch_size": batch,
        "prompt_len": prompt_len,
        "output_len": output_len,
        "decoding": "greedy (argmax), KV cache preallocated for prompt_len + output_len positions",
        "timed_generations": len(samples.timed_ns),
        "data": {"source": "synthetic", "seed": common.DATA_SEED + dist_env.rank},
        "world_size": dist_env.world_size,
        "rank": dist_env.rank,
        "distributed_env": dist_env.env,
        **compile_info,
        **peak_info,
    }
    if dist_env.world_size > 1:
        derived["distributed"] = {
            "mode": "independent",
            "reason": "inference exchanges nothing: each replica measures alone, no process group",
        }
    autocast_dtype = common.PRECISION_DTYPE[precision] if precision != "fp32" else "none"
    measurement = torch_measurement(
        device, samples, 1, metrics, effective_params={"autocast": autocast_dtype}, derived=derived
    )
    measurement.threads = threads
    return measurement
