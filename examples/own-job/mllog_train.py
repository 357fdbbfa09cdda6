"""Train a small classifier to a target accuracy, logging the run the MLPerf way (`:::MLLOG` lines).

The logging is mlperf_logging.mllog, as in the MLPerf Training reference implementations: the run is
the interval run_start → run_stop (time to train), each epoch is epoch_start/epoch_stop, and after each
epoch the evaluation logs eval_accuracy. Training stops at --target-accuracy (run_stop status
`success`) or after --max-epochs (status `aborted`). Per epoch the script also logs its train_loss and
its measured training throughput (`tracked_stats`, the MLPerf HPC convention, in samples/s).

The task is generated: inputs are Gaussian vectors and the label of each is the arg-max of a fixed
random linear "teacher", so it can be learned and the accuracy climbs from chance to the target.

    python mllog_train.py --batch-size 64 --target-accuracy 0.9
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from mlperf_logging import mllog
from mlperf_logging.mllog import constants
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--train-samples", type=int, default=4096)
    parser.add_argument("--eval-samples", type=int, default=1024)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--target-accuracy", type=float, default=0.9)
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


def make_data(args: argparse.Namespace) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(args.seed)
    teacher = torch.randn(args.features, args.num_classes, generator=generator)
    x_train = torch.randn(args.train_samples, args.features, generator=generator)
    x_eval = torch.randn(args.eval_samples, args.features, generator=generator)
    return x_train, (x_train @ teacher).argmax(1), x_eval, (x_eval @ teacher).argmax(1)


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    # The shared logger prints `:::MLLOG {...}` lines to stdout; root_dir shortens the file names it logs.
    mllog.config(root_dir=os.path.dirname(os.path.abspath(__file__)))
    mllogger = mllog.get_mllogger()

    mllogger.event(key=constants.CACHE_CLEAR, value=True)
    mllogger.start(key=constants.INIT_START)
    mllogger.event(key=constants.SUBMISSION_BENCHMARK, value="tiny-classifier")
    mllogger.event(key=constants.SUBMISSION_ORG, value="kaliper-examples")
    mllogger.event(key=constants.SUBMISSION_DIVISION, value=constants.OPEN)
    mllogger.event(key=constants.SUBMISSION_STATUS, value=constants.ONPREM)
    mllogger.event(key=constants.SUBMISSION_PLATFORM, value=f"torch {torch.__version__} CPU")
    mllogger.event(key=constants.SEED, value=args.seed)
    mllogger.event(key=constants.GLOBAL_BATCH_SIZE, value=args.batch_size)
    mllogger.event(key=constants.OPT_NAME, value=constants.SGD)
    mllogger.event(key=constants.OPT_BASE_LR, value=args.lr)
    mllogger.event(key=constants.TRAIN_SAMPLES, value=args.train_samples)
    mllogger.event(key=constants.EVAL_SAMPLES, value=args.eval_samples)

    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Linear(args.features, 128),
        nn.ReLU(),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Linear(128, args.num_classes),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x_train, y_train, x_eval, y_eval = make_data(args)
    mllogger.end(key=constants.INIT_STOP)

    mllogger.start(key=constants.RUN_START)
    status, accuracy, epoch = constants.ABORTED, 0.0, 0
    for epoch in range(1, args.max_epochs + 1):
        mllogger.start(key=constants.EPOCH_START, metadata={constants.EPOCH_NUM: epoch})
        model.train()
        order = torch.randperm(args.train_samples)
        total_loss, seen = 0.0, 0
        t0 = time.perf_counter()
        for first in range(0, args.train_samples, args.batch_size):
            index = order[first : first + args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x_train[index]), y_train[index])
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * len(index)
            seen += len(index)
        elapsed = time.perf_counter() - t0
        mllogger.event(
            key="train_loss", value=round(total_loss / seen, 5), metadata={constants.EPOCH_NUM: epoch}
        )
        mllogger.event(
            key="tracked_stats",
            value={"throughput": round(seen / elapsed, 1)},  # samples/s over the epoch's steps
            metadata={"step": epoch},
        )
        mllogger.end(key=constants.EPOCH_STOP, metadata={constants.EPOCH_NUM: epoch})

        mllogger.start(key=constants.EVAL_START, metadata={constants.EPOCH_NUM: epoch})
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_eval).argmax(1) == y_eval).float().mean().item()
        mllogger.event(
            key=constants.EVAL_ACCURACY, value=round(accuracy, 4), metadata={constants.EPOCH_NUM: epoch}
        )
        mllogger.end(key=constants.EVAL_STOP, metadata={constants.EPOCH_NUM: epoch})
        if accuracy >= args.target_accuracy:
            status = constants.SUCCESS
            break
    mllogger.end(key=constants.RUN_STOP, metadata={constants.STATUS: status, constants.EPOCH_NUM: epoch})
    print(
        f"{status}: eval accuracy {accuracy:.4f} after {epoch} epochs (target {args.target_accuracy})",
        flush=True,
    )


if __name__ == "__main__":
    main()
