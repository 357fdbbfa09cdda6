"""cnn-train and cnn-infer in PyTorch: ResNet-50 or a small ResNet; one sample = one step.

A training step is forward, cross-entropy loss, backward and an SGD update (lr 0.01, momentum 0.9); an
inference step is a forward pass under `torch.inference_mode` with the model in eval mode. Warm-up
steps are taken and recorded by the sampling rule but never enter a statistic.

Input (`data`):
- `synthetic` (default; tf_cnn_benchmarks' choice): one fixed random batch that lives on the device,
  so a step measures compute only and the wait for data is zero.
- `files`: a real input pipeline. A `DataLoader` with `data_workers` workers reads `.npy` image files
  (format: `kaliper.benchmarks.cnn.imagefiles`) from `data_dir`, or from files generated on first use
  (batch_size × 8 images), decodes and normalises them, batches them and copies them to the device.
  Each step times the wait for the next batch plus its host→device copy (`data_wait`, EPCC's method)
  and the step itself (`compute`); the sample is data_wait + compute.

Per-step metrics: `images_per_s` = batch_size / (data_wait + compute) (effective), `compute_images_per_s`
= batch_size / compute, `step_time` = data_wait + compute, `data_wait_time` (files only), and for
training `images_per_s_total` = images_per_s summed over all ranks (all-reduced after every step; with
one process it equals images_per_s). Run-level figures (record `derived`): data_wait_fraction =
Σdata_wait / Σstep_time, effective and compute throughput from the totals (n·batch_size / Σ…), the
model's parameter count, world size and rank, and the distributed env the process was given.

Distributed training (a PyTorchJob with Master + Workers, or any launcher that sets the same env): when
WORLD_SIZE > 1 the process joins a process group from MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK only
(`env://`; gloo on CPU, nccl on CUDA with the device LOCAL_RANK, else 0), wraps the model in
DistributedDataParallel and trains on its own batch (a per-rank random batch, or its own shuffle of the
files). GLOO_SOCKET_IFNAME is set to the loopback interface only when it is unset and MASTER_ADDR is a
loopback address (all ranks on one machine). Nothing but the step is inside the timer; after it each
rank all-reduces its images/s. Every rank must take the same number of steps, so the stop decision of
the sampling rule is rank 0's: after each timed step rank 0 evaluates the rule on its own samples and
broadcasts continue / converged / max_time, and every rank follows (all ranks record rank 0's stop
reason; max_samples is reached by all at once). After sampling the ranks check that their parameters
are identical (max |p − p_rank0| over all parameters, all-reduced; recorded as `params_in_sync` and
`params_max_abs_diff`), then meet at a barrier before leaving the group (a rank that leaves first can
abort the others at exit).

Inference has no gradients to exchange, so cnn-infer with WORLD_SIZE > 1 creates no process group: each
replica measures independently and records its world size and rank; the job's throughput is the sum
of the replicas' images_per_s.

Model FLOPs: torch's FlopCounterMode counts one image's forward pass once per run (models_torch,
`forward_flops_per_image`); `model_tflops` = (3 × for training) that count × batch_size / step time, and
`pct_of_peak` compares it with the device's datasheet peak (kaliper.benchmarks.peaks; none on a CPU, and
the record says why). `compile` (torch.compile) and `memory_format` (channels_last: the model's weights
and every batch) are applied before sampling; the calls that compile run before the sampling rule starts,
timed apart (kaliper.benchmarks.torch_compile), so neither a warm-up nor a timed step contains them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from kaliper import settings
from kaliper.benchmarks.cnn import imagefiles
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
from kaliper.errors import WorkloadError
from kaliper.metrics.sampling import SamplingRule, collect

LEARNING_RATE = 0.01
MOMENTUM = 0.9
MODEL_SEED = 0  # identical initial weights on every rank (DDP also broadcasts rank 0's at wrap time)
DATA_SEED = 1000  # + rank: each rank's own synthetic batch and file order

# Stop codes agreed between ranks after every timed step.


def run_train(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run(params, rule, train=True)


def run_infer(params: dict[str, Any], rule: SamplingRule) -> Measurement:
    return _run(params, rule, train=False)


# ---------------------------------------------------------------------------------------------- input


class NpyImageDataset:
    """Map-style dataset over `class<k>_<i>.npy` files: decode + normalise happen in the loader workers."""

    def __init__(self, files: list[tuple[Path, int]]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[npt.NDArray[np.float32], int]:
        path, label = self.files[index]
        return imagefiles.normalise(imagefiles.read_image(path)), label


def _dataset(params: dict[str, Any]) -> tuple[NpyImageDataset, dict[str, Any]]:
    directory = imagefiles.ensure_image_files(params)
    files = imagefiles.image_files(directory)
    batch, size, classes = int(params["batch_size"]), int(params["image_size"]), int(params["num_classes"])
    if len(files) < batch:
        raise WorkloadError(f"data_dir {directory}: {len(files)} image files, fewer than batch_size={batch}")
    shape = imagefiles.read_image(files[0][0]).shape
    if shape != (size, size, 3):
        raise WorkloadError(
            f"data_dir {directory}: images are {shape}, expected ({size}, {size}, 3) for image_size={size}"
        )
    top = max(label for _, label in files)
    if top >= classes:
        raise WorkloadError(f"data_dir {directory}: label {top} is not below num_classes={classes}")
    info = {
        "source": "files",
        "dir": str(directory),
        "files": len(files),
        "workers": int(params["data_workers"]),
    }
    return NpyImageDataset(files), info


# ---------------------------------------------------------------------------------------------- workload


@dataclass
class _Steps:
    """Per-step timings of every measured step (warm-up first), and the all-reduced totals."""

    wait_ns: list[int] = field(default_factory=list)
    compute_ns: list[int] = field(default_factory=list)
    total_images_per_s: list[float] = field(default_factory=list)


def _run(params: dict[str, Any], rule: SamplingRule, train: bool) -> Measurement:
    set_thread_env(int(params["threads"]))  # before the first torch import reaches the OpenMP runtime
    import torch

    threads = torch_threads(int(params["threads"]))
    dist_env = distributed_env()
    device, sync = device_and_sync(str(params["device"]))
    device = rank_device(device, dist_env)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    with process_group(dist_env, device, join=train) as group:
        measurement = _measure(params, rule, train, device, sync, dist_env, group)
    measurement.threads = threads
    return measurement


def _measure(
    params: dict[str, Any],
    rule: SamplingRule,
    train: bool,
    device: Any,
    sync: Callable[[], None],
    dist_env: DistEnv,
    group: ProcessGroup | None,
) -> Measurement:
    import torch
    from torch import nn

    from kaliper.benchmarks.cnn.models_torch import (
        FORWARD_FLOPS_FORMULA,
        build_model,
        count_parameters,
        forward_flops_per_image,
    )

    batch = int(params["batch_size"])
    size = int(params["image_size"])
    classes = int(params["num_classes"])
    bf16 = params["precision"] == "bf16"
    rank = dist_env.rank

    mode = str(params["compile"])
    memory_format = (
        torch.channels_last if params["memory_format"] == "channels_last" else torch.contiguous_format
    )

    torch.manual_seed(MODEL_SEED)
    model = build_model(str(params["model"]), classes)
    forward_flops = forward_flops_per_image(model, size)
    # nn.Module.to takes memory_format (documented; its type stubs omit it): 4-D weights in that layout
    model = model.to(device, memory_format=memory_format)  # type: ignore[call-overload]
    model_params = count_parameters(model)
    net: nn.Module = model
    if train:
        model.train()
        if group is not None:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [device.index] if device.type == "cuda" else None
            net = DistributedDataParallel(model, device_ids=device_ids)
        optimizer = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
        criterion = nn.CrossEntropyLoss()
    else:
        model.eval()
    net = compiled(net, mode)

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if bf16:
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(x: Any, y: Any) -> None:
        if train:
            with autocast():
                loss = criterion(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        else:
            with torch.inference_mode(), autocast():
                net(x)

    generator = torch.Generator().manual_seed(DATA_SEED + rank)
    batches: Iterator[Any] | None = None
    if params["data"] == "files":
        dataset, data_info = _dataset(params)
        # One pass of fresh permutations long enough for every step: no epoch restarts inside a run.
        steps_needed = rule.warmup + rule.max_samples + 1
        sampler = torch.utils.data.RandomSampler(
            cast(Any, dataset), num_samples=batch * steps_needed, generator=generator
        )
        loader = torch.utils.data.DataLoader(
            cast(Any, dataset),
            batch_size=batch,
            sampler=sampler,
            num_workers=int(params["data_workers"]),
            pin_memory=device.type == "cuda",
            drop_last=True,
        )
        batches = iter(loader)
        fixed = None
    else:
        data_info = {"source": "synthetic", "seed": DATA_SEED + rank}
        x0 = torch.randn(batch, 3, size, size, generator=generator).to(device, memory_format=memory_format)
        y0 = torch.randint(0, classes, (batch,), generator=generator).to(device)
        fixed = (x0, y0)

    # torch.compile compiles on the first call(s): run them here, timed apart, on a batch of the same
    # shape, dtype and layout (its own generator: the file order stays that of an eager run), so no
    # sample, warm-up included, contains compilation.
    compile_batch: list[Any] = []
    if mode != "none":
        own = torch.Generator().manual_seed(DATA_SEED + rank)
        compile_batch = [
            torch.randn(batch, 3, size, size, generator=own).to(device, memory_format=memory_format),
            torch.randint(0, classes, (batch,), generator=own).to(device),
        ]
    agree = None if group is None else group.agree
    compile_info = first_calls(lambda: step(*compile_batch), sync, mode, agree=agree)
    compile_batch.clear()

    # what the layout really is, for the record: the input batch and every 4-D weight (convolutions)
    sample_x = (
        fixed[0] if fixed is not None else torch.empty(1, 3, size, size).to(memory_format=memory_format)
    )
    layout = {
        "memory_format": str(params["memory_format"]),
        "input_channels_last": sample_x.is_contiguous(memory_format=torch.channels_last),
        "conv_weights_channels_last": all(
            p.is_contiguous(memory_format=torch.channels_last) for p in model.parameters() if p.dim() == 4
        ),
    }

    steps = _Steps()

    def measure() -> int:
        sync()
        start = time.perf_counter_ns()
        if batches is None:
            assert fixed is not None
            x, y = fixed
            ready = start  # the batch is already on the device: no wait
        else:
            x, y = next(batches)
            x = x.to(device, non_blocking=True, memory_format=memory_format)
            y = y.to(device, non_blocking=True)
            sync()
            ready = time.perf_counter_ns()
        step(x, y)
        sync()  # GPU kernels are asynchronous: the step ends when the device is done
        end = time.perf_counter_ns()
        steps.wait_ns.append(ready - start)
        steps.compute_ns.append(end - ready)
        if train:
            mine = batch * 1e9 / (end - start)
            steps.total_images_per_s.append(group.sum([mine])[0] if group is not None else mine)
        return end - start

    try:
        samples = collect(measure, rule, agree=None if group is None else group.agree)
    finally:
        batches = None  # drops the loader iterator: its workers shut down

    n_warm = len(samples.warmup_ns)
    wait = steps.wait_ns[n_warm:]
    compute = steps.compute_ns[n_warm:]
    total = [w + c for w, c in zip(wait, compute, strict=True)]
    if total != samples.timed_ns:
        raise WorkloadError("internal: per-step timings do not match the samples")
    n = len(total)
    effective = batch * n * 1e9 / sum(total)
    compute_tp = batch * n * 1e9 / max(sum(compute), 1)

    metrics: dict[str, MetricDef] = {
        "images_per_s": MetricDef(
            unit="images/s",
            direction="more_is_better",
            formula="batch_size / (data_wait + compute) per step (effective throughput of this replica)",
            values=[batch * 1e9 / ns for ns in total],
        ),
        "compute_images_per_s": MetricDef(
            unit="images/s",
            direction="more_is_better",
            formula="batch_size / compute per step (compute throughput: without the wait for input)",
            values=[batch * 1e9 / max(ns, 1) for ns in compute],
        ),
        "step_time": MetricDef(
            unit="s",
            direction="less_is_better",
            formula="data_wait + compute per step",
            values=[ns / 1e9 for ns in total],
        ),
    }
    if data_info["source"] == "files":
        metrics["data_wait_time"] = MetricDef(
            unit="s",
            direction="less_is_better",
            formula="wait for the next batch from the DataLoader + its host-to-device copy, per step",
            values=[ns / 1e9 for ns in wait],
        )
    step_flops = (3 if train else 1) * forward_flops * batch
    metrics["model_tflops"] = MetricDef(
        unit="TFLOP/s",
        direction="more_is_better",
        formula=f"{'3 * ' if train else ''}forward_flops_per_image * batch_size / (data_wait + compute) per "
        "step / 1e12 (derived.flops)",
        values=[step_flops / ns / 1e3 for ns in total],  # FLOP/ns = GFLOP/s; / 1e3 = TFLOP/s
    )
    device_name, peak_precision = peak_inputs(device, "bfloat16" if bf16 else "float32", op="conv")
    metrics, peak_info = with_peak(metrics, "model_tflops", 1e12, device_name, peak_precision)
    derived: dict[str, Any] = {
        "model": str(params["model"]),
        "model_params": model_params,
        "batch_size": batch,
        "timed_steps": n,
        "data": data_info,
        "data_wait_fraction": sum(wait) / sum(total),
        "effective_images_per_s": effective,
        "compute_images_per_s": compute_tp,
        "world_size": dist_env.world_size,
        "rank": rank,
        "distributed_env": dist_env.env,
        "flops": {
            "forward_per_image": forward_flops,
            "per_step": step_flops,
            "forward_formula": FORWARD_FLOPS_FORMULA,
            "step_formula": "3 × forward per image × batch_size (the backward pass costs two forwards: "
            "gradients of the inputs and of the weights; the SGD update is not counted)"
            if train
            else "forward per image × batch_size",
        },
        "layout": layout,
        **compile_info,
        **peak_info,
    }
    if train:
        world = dist_env.world_size if group is not None else 1
        metrics["images_per_s_total"] = MetricDef(
            unit="images/s",
            direction="more_is_better",
            formula="sum over ranks of batch_size / (data_wait + compute), all-reduced after each step",
            values=steps.total_images_per_s[n_warm:],
        )
        derived["global_batch_size"] = batch * world
    formulas = {
        "data_wait_fraction": "sum(data_wait) / sum(data_wait + compute) over the timed steps",
        "effective_images_per_s": "timed_steps * batch_size / sum(data_wait + compute)",
        "compute_images_per_s": "timed_steps * batch_size / sum(compute)",
    }
    if group is not None:
        effective_total, compute_total = group.sum([effective, compute_tp])
        diff = group.params_max_abs_diff(model)
        derived.update(
            {
                "effective_images_per_s_total": effective_total,
                "compute_images_per_s_total": compute_total,
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
        formulas["effective_images_per_s_total"] = "sum over ranks of effective_images_per_s"
        formulas["compute_images_per_s_total"] = "sum over ranks of compute_images_per_s"
        formulas["params_in_sync"] = "max over parameters and ranks of |p - p_rank0| == 0 after the last step"
    elif dist_env.world_size > 1:
        derived["distributed"] = {
            "mode": "independent",
            "reason": "inference exchanges no gradients: each replica measures alone, no process group",
        }
    derived["formulas"] = formulas

    precision = {"autocast": "bfloat16" if bf16 else "none"}
    return torch_measurement(device, samples, 1, metrics, effective_params=precision, derived=derived)
