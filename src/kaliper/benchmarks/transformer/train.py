"""transformer-train in PyTorch: training steps of the GPT decoder (model.py) on synthetic tokens.

One sample = one training step: forward over batch_size × seq_len tokens, cross-entropy of the next
token, backward, AdamW update (lr 3e-4, weight decay 0.1). `precision`: fp32; bf16 autocast; fp16
autocast with a GradScaler (loss scaling, as fp16 training needs). The tokens are a fixed random batch
drawn once from a seeded generator on the device (DATA_SEED + rank): no downloads, no input pipeline,
so a step measures compute (and, distributed, the gradient all-reduce).

Metrics per step: `tokens_per_s` = batch_size·seq_len / step_time (this replica), `tokens_per_s_total`
(summed over ranks by an all-reduce after every step, outside the timer; one process: equal to
tokens_per_s), `step_time`, `model_tflops` = train FLOPs (flops.TRAIN_FORMULA) / step_time, and
`pct_of_peak` = model_tflops against the device's dense peak (kaliper.benchmarks.peaks), i.e. MFU;
`derived.peak` names the row and its datasheet, or `derived.peak_note` says why there is none (CPUs).

Distributed exactly as cnn-train (kaliper.benchmarks.cnn.cnn_torch: the same env, process group,
rank-0 stop rule and parameter check): DistributedDataParallel, gloo on CPU and nccl on CUDA, each rank
on its own tokens. Why DDP and not FSDP: every replica here holds the whole model, which is the regime
of the sizes this workload benchmarks (up to a few billion parameters in bf16 fit one 80 GB GPU with
AdamW state), so DDP measures the stack (kernels, all-reduce) without the per-layer all-gathers and
reduce-scatters FSDP adds; FSDP's figure would depend on a wrapping policy and sharding strategy that
are a design of their own (parameters we would have to add and defend). A model too big for one device
is out of this workload's scope.

`compile` wraps the (DDP-wrapped) model in torch.compile; the first step, which compiles forward and
backward, is made and timed before sampling (`derived.compile_s`) and is not a sample.
"""

from __future__ import annotations

import time
from typing import Any

from kaliper import settings
from kaliper.benchmarks.measurement import Measurement, MetricDef
from kaliper.benchmarks.peaks import with_peak
from kaliper.benchmarks.torch_compile import compiled, first_calls
from kaliper.benchmarks.torch_distributed import (
    DistEnv,
    ProcessGroup,
    distributed_env,
    process_group,
    rank_device,
)
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

LEARNING_RATE = 3e-4
WEIGHT_DECAY = 0.1
# The `optimizer` parameter: AdamW's keyword arguments for each implementation. "adamw" leaves the choice
# to torch (foreach when every parameter is on CUDA, else a per-parameter loop); fused AdamW updates every
# parameter in one kernel per step, what tuned training loops use (issue 39: a plain loop was faster with it).
# Each as (foreach, fused), None where torch decides.
OPTIMIZERS: dict[str, tuple[bool | None, bool | None]] = {
    "adamw": (None, None),
    "adamw-foreach": (True, None),
    "adamw-fused": (None, True),
    "adamw-forloop": (False, None),
}


def run(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    set_thread_env(int(params["threads"]))  # before the first torch import reaches the OpenMP runtime
    threads = torch_threads(int(params["threads"]))
    dist_env = distributed_env()
    device, sync = device_and_sync(str(params["device"]))
    device = rank_device(device, dist_env)
    with process_group(dist_env, device) as group:
        measurement = _measure(params, rule, device, sync, dist_env, group)
    measurement.threads = threads
    return measurement


def _measure(
    params: dict[str, Any],
    rule: SamplingRule,
    device: Any,
    sync: Any,
    dist_env: DistEnv,
    group: ProcessGroup | None,
) -> Measurement:
    import torch
    import torch.nn.functional as F

    from kaliper.benchmarks.transformer.model import GPT, GPTConfig, count_parameters

    batch, seq_len, vocab = int(params["batch_size"]), int(params["seq_len"]), int(params["vocab"])
    precision, mode = str(params["precision"]), str(params["compile"])
    config = GPTConfig(
        layers=int(params["layers"]),
        d_model=int(params["d_model"]),
        heads=int(params["heads"]),
        vocab=vocab,
        context=seq_len,
    )
    torch.manual_seed(common.MODEL_SEED)
    model = GPT(config).to(device).train()
    net: Any = model
    if group is not None:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    net = compiled(net, mode)
    choice = str(params.get("optimizer", "adamw"))
    foreach, fused = OPTIMIZERS[choice]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, foreach=foreach, fused=fused
    )
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    autocast = common.autocast(device, precision)

    generator = torch.Generator().manual_seed(common.DATA_SEED + dist_env.rank)
    tokens = torch.randint(0, vocab, (batch, seq_len + 1), generator=generator).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> None:
        with autocast():
            logits = net(inputs)
        loss: Any = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    compile_info = first_calls(step, sync, mode, agree=None if group is None else group.agree)
    totals: list[float] = []
    tokens_per_step = batch * seq_len

    def measure() -> int:
        sync()
        start = time.perf_counter_ns()
        step()
        sync()  # GPU kernels are asynchronous: the step ends when the device is done
        elapsed = time.perf_counter_ns() - start
        mine = tokens_per_step * 1e9 / elapsed
        totals.append(group.sum([mine])[0] if group is not None else mine)
        return elapsed

    samples = collect(measure, rule, agree=None if group is None else group.agree)
    timed = samples.timed_ns
    total_per_s = totals[len(samples.warmup_ns) :]
    if len(total_per_s) != len(timed):
        raise WorkloadError("internal: per-step totals do not match the samples")

    shape = common.shape_of(params)
    step_flops = flops.train_flops(shape, batch, seq_len)
    metrics: dict[str, MetricDef] = {
        "tokens_per_s": MetricDef(
            unit="tokens/s",
            direction="more_is_better",
            formula="batch_size·seq_len / step_time (this replica)",
            from_ns=lambda ns: tokens_per_step * 1e9 / ns,
        ),
        "tokens_per_s_total": MetricDef(
            unit="tokens/s",
            direction="more_is_better",
            formula="sum over ranks of batch_size·seq_len / step_time, all-reduced after each step",
            values=total_per_s,
        ),
        "step_time": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="forward + loss + backward + AdamW update, device synchronised",
            from_ns=lambda ns: ns / 1e9,
        ),
        "model_tflops": MetricDef(
            unit="TFLOP/s",
            direction="more_is_better",
            formula=f"train FLOPs per step / step_time / 1e12; FLOPs = {flops.TRAIN_FORMULA}",
            from_ns=lambda ns: step_flops / ns / 1e3,
        ),
    }
    device_name, peak_precision = peak_inputs(device, common.PRECISION_DTYPE[precision])
    metrics, peak_info = with_peak(metrics, "model_tflops", 1e12, device_name, peak_precision)
    world = dist_env.world_size if group is not None else 1
    derived: dict[str, Any] = {
        "model": {
            "layers": config.layers,
            "d_model": config.d_model,
            "heads": config.heads,
            "vocab": vocab,
            "seq_len": seq_len,
            "parameters": count_parameters(model),
        },
        "flops": {
            "N": shape.n,
            "N_body": shape.n_body,
            "N_head": shape.n_head,
            "per_step": step_flops,
            "per_token": step_flops / tokens_per_step,
            "formula": flops.TRAIN_FORMULA,
        },
        "batch_size": batch,
        "global_batch_size": batch * world,
        "tokens_per_step": tokens_per_step,
        "timed_steps": len(timed),
        "data": {"source": "synthetic", "seed": common.DATA_SEED + dist_env.rank},
        "optimizer": {
            "name": "AdamW",
            "implementation": _implementation(optimizer),
            "asked": choice,
            "lr": LEARNING_RATE,
            "weight_decay": WEIGHT_DECAY,
        },
        "grad_scaler": scaler is not None,
        "world_size": dist_env.world_size,
        "rank": dist_env.rank,
        "distributed_env": dist_env.env,
        **compile_info,
        **peak_info,
    }
    if group is not None:
        diff = group.params_max_abs_diff(model)
        derived.update(
            {
                "params_max_abs_diff": diff,
                "params_in_sync": diff == 0.0,
                "distributed": {
                    "mode": "DistributedDataParallel",
                    "backend": group.backend,
                    "init_method": "env://",
                    "GLOO_SOCKET_IFNAME": settings.current()[settings.GLOO_SOCKET_IFNAME],
                    "stop_rule": "rank 0 evaluates the sampling rule after each timed step and broadcasts the decision",
                },
            }
        )
    autocast_dtype = common.PRECISION_DTYPE[precision] if precision != "fp32" else "none"
    return torch_measurement(
        device, samples, 1, metrics, effective_params={"autocast": autocast_dtype}, derived=derived
    )


def _implementation(optimizer: Any) -> str:
    """The AdamW implementation that ran, read from the optimizer: fused or foreach or the per-parameter
    loop as asked, or where left to torch (`adamw`) the one it picks for these parameters (torch.optim's
    own rule, private: where it is gone, foreach when every parameter is on CUDA, as up to torch 2.13)."""
    defaults = optimizer.defaults
    if defaults.get("fused"):
        return "fused"
    if defaults.get("foreach") is not None:
        return "foreach" if defaults["foreach"] else "forloop"
    params = [p for group in optimizer.param_groups for p in group["params"]]
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        fused, foreach = _default_to_fused_or_foreach(params, differentiable=False)
    except (ImportError, TypeError):
        fused, foreach = False, all(p.device.type == "cuda" for p in params)
    return "fused" if fused else "foreach" if foreach else "forloop"
