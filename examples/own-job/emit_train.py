"""Fit a small MLP to a generated regression task, reporting each step's figures with kaliper.emit.

For code you can edit, `kaliper.emit(name, value, unit=...)` is the direct way to hand Kaliper a
figure: under `kaliper run` (metrics_format: jsonl) each call appends one JSON line to the file named by
$KALIPER_METRICS_FILE, and every line is one sample of that metric. Nothing is parsed out of what the
script prints, so the output can stay as chatty as you like.

    python emit_train.py --batch-size 256 --steps 50
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

import kaliper


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    # Generated task: y = sin(x @ w) plus a little noise, for a fixed random w.
    w = torch.randn(args.features, 1) / args.features**0.5
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden),
        nn.GELU(),
        nn.Linear(args.hidden, args.hidden),
        nn.GELU(),
        nn.Linear(args.hidden, 1),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, args.features)
        y = torch.sin(x @ w) + 0.01 * torch.randn(args.batch_size, 1)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        elapsed = time.perf_counter() - t0

        kaliper.emit("samples_per_s", args.batch_size / elapsed, unit="samples/s", better="higher", step=step)
        kaliper.emit("loss", loss_value, better="lower", step=step)
        if step % 10 == 0 or step == args.steps:
            print(
                f"step {step}/{args.steps}  loss {loss_value:.5f}  {args.batch_size / elapsed:.0f} samples/s",
                flush=True,
            )
    print("done", flush=True)


if __name__ == "__main__":
    main()
