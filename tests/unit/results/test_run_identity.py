"""Who a replica is, from its environment: a TrainJob's rank takes its index from torchrun's RANK, because
one pod's environment is shared by all its ranks and the template sets no KALIPER_REPLICA_INDEX."""

from __future__ import annotations

import pytest

from kaliper.errors import InputError
from kaliper.results.protocol import RunIdentity


@pytest.fixture
def pod_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("KALIPER_REPLICA_TYPE", "KALIPER_REPLICA_INDEX", "RANK"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_node_replica_is_its_torchrun_rank(pod_env: pytest.MonkeyPatch) -> None:
    pod_env.setenv("KALIPER_REPLICA_TYPE", "Node")
    pod_env.setenv("RANK", "3")
    identity = RunIdentity.from_env()
    assert (identity.replica_type, identity.replica_index) == ("Node", 3)
    pod_env.setenv("KALIPER_REPLICA_TYPE", "node")  # the label's spelling is read the same
    assert RunIdentity.from_env().replica_index == 3


def test_an_explicit_index_wins_over_rank(pod_env: pytest.MonkeyPatch) -> None:
    pod_env.setenv("KALIPER_REPLICA_TYPE", "Node")
    pod_env.setenv("KALIPER_REPLICA_INDEX", "1")
    pod_env.setenv("RANK", "3")
    assert RunIdentity.from_env().replica_index == 1


def test_v1_replicas_never_read_rank(pod_env: pytest.MonkeyPatch) -> None:
    # A PyTorchJob Worker 0 has RANK 1 (the Master is rank 0): its index must stay the template's.
    pod_env.setenv("KALIPER_REPLICA_TYPE", "Worker")
    pod_env.setenv("RANK", "1")
    assert RunIdentity.from_env().replica_index == 0
    pod_env.setenv("KALIPER_REPLICA_INDEX", "0")
    assert RunIdentity.from_env().replica_index == 0


@pytest.mark.parametrize("rank", [None, "", "one", "-1"])
def test_a_node_replica_without_index_or_rank_is_a_clear_error(
    pod_env: pytest.MonkeyPatch, rank: str | None
) -> None:
    pod_env.setenv("KALIPER_REPLICA_TYPE", "Node")
    if rank is not None:
        pod_env.setenv("RANK", rank)
    with pytest.raises(InputError) as caught:
        RunIdentity.from_env()
    message = str(caught.value)
    assert "RANK" in message and "KALIPER_REPLICA_INDEX" in message and "torchrun" in message
