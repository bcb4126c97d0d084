"""DistributedContext: the local collectives built on global ones, and the torch wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.core import DistributedContext


class Recorded:
    """A backend for worker 3 of 4 (2 nodes x 2) whose peers send fixed values."""

    def __init__(self, peers: list[Any]) -> None:
        self.peers = peers

    def allgather(self, obj: Any) -> list[Any]:
        return [*self.peers[:3], obj]

    def broadcast(self, obj: Any) -> Any:
        return self.peers[0]

    def gather(self, obj: Any) -> list[Any] | None:
        return None


def test_local_collectives() -> None:
    peers = [(0, "a"), (0, "b"), (1, "c")]
    d = DistributedContext(
        rank=3, size=4, local_rank=1, local_size=2, cross_rank=1, cross_size=2,
        backend=Recorded(peers),
    )  # fmt: skip
    assert d.allgather_local("d") == ["c", "d"]
    assert d.broadcast_local("d") == "c"
    assert d.gather_local("d") is None  # not the local chief
    assert d.broadcast("x") == (0, "a")
    assert not d.is_chief and d.get_cross_rank() == 1


def test_size_above_one_needs_a_backend() -> None:
    with pytest.raises(ValueError, match="backend"):
        DistributedContext(rank=0, size=2)


def test_from_torch_distributed_single_process(tmp_path: Path) -> None:
    dist = pytest.importorskip("torch.distributed")
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedContext.from_torch_distributed()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        d = DistributedContext.from_torch_distributed()
        assert (d.rank, d.size) == (0, 1)
        assert d.allgather({"x": 1}) == [{"x": 1}]
        assert d.broadcast("hi") == "hi"
        assert d.gather(5) == [5]
    finally:
        dist.destroy_process_group()
