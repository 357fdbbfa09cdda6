"""The process group of a distributed torch workload (cnn-train, transformer-train): what the launcher said
(the training operator's or torchrun's MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK), joining
the group over `env://`, and the few collectives the workloads use (throughput sums, rank 0's stop
decision, the parameter-sync check). One place, so both families join and leave a group the same way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kaliper import settings
from kaliper.errors import WorkloadError

DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")
PROCESS_GROUP_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True)
class DistEnv:
    """What the launcher (the training operator, torchrun) told this process about the job."""

    world_size: int
    rank: int
    env: dict[str, str]


def distributed_env(environ: Mapping[str, str] | None = None) -> DistEnv:
    """World size and rank from the env; WORLD_SIZE > 1 without the rest of the variables is an error."""
    given = settings.of(environ)
    named = {name: given.text(name) for name in (*DIST_ENV, settings.LOCAL_RANK.name)}
    env = {name: value for name, value in named.items() if value is not None}
    seen = dict(env)
    text = env.get("WORLD_SIZE", "").strip()
    world = int(text) if text.isdigit() else 1
    if world <= 1:
        return DistEnv(1, 0, seen)
    missing = [k for k in DIST_ENV if not env.get(k)]
    if missing:
        raise WorkloadError(
            f"WORLD_SIZE={world} but {', '.join(missing)} not set: a distributed run needs "
            "MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (a PyTorchJob with a Master sets them)"
        )
    rank_text = env["RANK"].strip()
    if not rank_text.isdigit() or int(rank_text) >= world:
        raise WorkloadError(f"RANK={env['RANK']!r} is not a rank of WORLD_SIZE={world}")
    return DistEnv(world, int(rank_text), seen)


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()]
    return next((name for name in names if name == "lo" or name.startswith("lo")), "lo")


class ProcessGroup:
    """This rank's membership of the job's process group: the collectives the workload uses."""

    def __init__(self, dist_env: DistEnv, backend: str, comm_device: Any) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.world_size = dist_env.world_size
        self.rank = dist_env.rank
        self.backend = backend
        self.comm_device = comm_device
        if (
            backend == "gloo"
            and settings.current()[settings.GLOO_SOCKET_IFNAME] is None
            and is_loopback(dist_env.env["MASTER_ADDR"])
        ):
            os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
        # nccl: bind the group to this rank's GPU (barrier() and eager init then need no guessing).
        bound: dict[str, Any] = {"device_id": comm_device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, init_method="env://", timeout=PROCESS_GROUP_TIMEOUT, **bound)

    def sum(self, values: list[float]) -> list[float]:
        import torch

        tensor = torch.tensor(values, dtype=torch.float64, device=self.comm_device)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)
        return [float(v) for v in tensor.cpu().tolist()]

    def max(self, values: list[float]) -> list[float]:
        """Each value's largest over the ranks (trace-replay: the slowest rank's sample is the step's)."""
        import torch

        tensor = torch.tensor(values, dtype=torch.float64, device=self.comm_device)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX)
        return [float(v) for v in tensor.cpu().tolist()]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value` (a small picklable object), in rank order, on every rank."""
        found: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(found, value)
        return found

    def agree(self, code: int) -> int:
        """Rank 0's stop code, on every rank."""
        import torch

        tensor = torch.tensor([code], dtype=torch.int64, device=self.comm_device)
        self.dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def params_max_abs_diff(self, model: Any) -> float:
        """max |p - p_rank0| over every parameter element, the same on every rank."""
        import torch

        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            reference = flat.clone()
            self.dist.broadcast(reference, src=0)
            diff = (flat - reference).abs().max().reshape(1).to(torch.float64)
            self.dist.all_reduce(diff, op=self.dist.ReduceOp.MAX)
        return float(diff.item())

    def close(self, clean: bool) -> None:
        if not self.dist.is_initialized():
            return
        if clean:
            self.dist.barrier()  # rank 0 hosts the store: leaving before the others can abort them
        self.dist.destroy_process_group()


def rank_device(device: Any, dist_env: DistEnv) -> Any:
    """This rank's device: on CUDA the GPU LOCAL_RANK names (0 when not distributed), made current so
    kernels and nccl land on it; any other device as given."""
    if device.type != "cuda":
        return device
    import torch

    local_rank = int(settings.current()[settings.LOCAL_RANK] or "0") if dist_env.world_size > 1 else 0
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def process_group(dist_env: DistEnv, device: Any, join: bool = True) -> Iterator[ProcessGroup | None]:
    """This rank's process group for the body (nccl on CUDA, gloo otherwise), or None when the job is one
    process or the workload does not `join` (inference exchanges nothing). Leaving waits for the other
    ranks at a barrier only when the body finished: after an error they may never arrive."""
    if not join or dist_env.world_size <= 1:
        yield None
        return
    import torch

    backend = "nccl" if device.type == "cuda" else "gloo"
    group = ProcessGroup(dist_env, backend, device if backend == "nccl" else torch.device("cpu"))
    clean = False
    try:
        yield group
        clean = True
    finally:
        group.close(clean)
