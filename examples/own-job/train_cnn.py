"""Train a small CNN on generated images and print the throughput of every step.

An ordinary PyTorch training script, the kind Kaliper benchmarks without changing it: it knows nothing
about Kaliper, and prints one line per step the way common training scripts do:

    step 12/40 | loss 2.3012 | 812.4 images/sec | 9.8 ms/step

Single process:     python train_cnn.py --batch-size 32 --steps 40
Data parallel:      run one copy per rank with MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK set (the
                    environment the Kubeflow training operator gives each replica of a PyTorchJob);
                    every rank prints its own images/sec, rank 0 also the global figure.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU stages (the last two halve the resolution), global pooling, a linear head."""

    def __init__(self, num_classes: int, width: int = 32) -> None:
        super().__init__()

        def stage(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            )

        self.features = nn.Sequential(
            stage(3, width, 1), stage(width, 2 * width, 2), stage(2 * width, 4 * width, 2)
        )
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.head(x)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32, help="images per step on each rank")
    parser.add_argument("--steps", type=int, default=40, help="training steps to run")
    parser.add_argument("--image-size", type=int, default=32, help="height and width of the images")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: leave it to OMP_NUM_THREADS)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    distributed = world_size > 1
    if distributed:
        # MASTER_ADDR / MASTER_PORT / WORLD_SIZE / RANK come from the environment (init_method env://).
        dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    try:
        train(args, rank, world_size, distributed)
    finally:
        if distributed:
            dist.destroy_process_group()


def train(args: argparse.Namespace, rank: int, world_size: int, distributed: bool) -> None:
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model: nn.Module = SmallCNN(args.num_classes)
    if distributed:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    n_params = sum(p.numel() for p in model.parameters())

    # Generated data: a few batches of random images and labels, different on every rank, reused in turn.
    generator = torch.Generator().manual_seed(args.seed + 1000 * rank)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    batches = [
        (
            torch.randn(shape, generator=generator),
            torch.randint(0, args.num_classes, (args.batch_size,), generator=generator),
        )
        for _ in range(4)
    ]

    print(
        f"torch {torch.__version__} | rank {rank} of {world_size} | threads {torch.get_num_threads()} | "
        f"SmallCNN {n_params / 1e6:.2f}M parameters | batch {args.batch_size} | "
        f"{args.image_size}x{args.image_size} images",
        flush=True,
    )

    model.train()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        images, labels = batches[(step - 1) % len(batches)]
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()  # under DDP, the gradients are all-reduced here
        optimizer.step()
        loss_value = loss.item()
        elapsed = time.perf_counter() - t0

        print(
            f"step {step}/{args.steps} | loss {loss_value:.4f} | "
            f"{args.batch_size / elapsed:.1f} images/sec | {elapsed * 1000:.1f} ms/step",
            flush=True,
        )
        if distributed:
            # A step is done when the slowest rank is done: the global rate is all ranks' images over that.
            slowest = torch.tensor([elapsed], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(
                    f"step {step}/{args.steps} | global {args.batch_size * world_size / slowest.item():.1f} "
                    f"images/sec over {world_size} ranks",
                    flush=True,
                )

    print(f"Training finished: {args.steps} steps in {time.perf_counter() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main()
