"""DistributedContext: the local collectives built on global ones, and the torch wrapper."""

from __future__ import annotations

import os
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


_WORKER = """
import os, sys, time
import torch.distributed as dist
from harness.core import DistributedContext

rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
d = DistributedContext.from_torch_distributed()  # the script's group, as in Determined's tutorial
flag = store + ".rank1-closing"
asked = time.monotonic()  # rank 1's, taken before its flag: the chief's comes after it
if rank == 1:
    open(flag, "w").close()
else:  # the chief is still storing its last checkpoint until rank 1 is already inside close()
    while not os.path.exists(flag):
        time.sleep(0.01)
    asked = time.monotonic()
print("close", asked, flush=True)
d.close()
print("closed", time.monotonic(), flush=True)
print("after", d.allgather(rank), flush=True)  # the script's group outlives the context
d.close()  # idempotent
"""


def test_script_created_group_ranks_leave_together_and_group_outlives_context(
    tmp_path: Path,
) -> None:
    """Determined's distributed tutorial never destroys its group: the ranks meet at close (a
    rank leaving while the chief still works could abort with "terminate called without an
    active exception"), the group stays usable, and it is destroyed at exit: both exit 0."""
    pytest.importorskip("torch.distributed")
    import subprocess
    import sys

    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(tmp_path / "store")],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "terminate called" not in err
    times = [
        {w.split()[0]: float(w.split()[1]) for w in out.splitlines() if w.startswith("close")}
        for out, _ in outs
    ]
    # rank 1 asked to close first but left only once the chief had arrived
    assert times[1]["close"] <= times[0]["close"] <= times[1]["closed"]
    assert all("after [0, 1]" in out for out, _ in outs)


_DEEPSPEED_WORKER = """
from harness.core import DistributedContext
import os, sys
ctx = DistributedContext.from_deepspeed(pub_port=int(sys.argv[1]))
print(ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.cross_rank, ctx.cross_size,
      ctx.allgather(ctx.rank * 10), ctx.broadcast(os.getpid() if ctx.rank == 0 else None) > 0)
ctx.close()
"""


def test_from_deepspeed_reads_the_launchers_environment_and_collects() -> None:
    """Two workers as DeepSpeed's launcher starts them (its env names), the chief hosting the
    object store at MASTER_ADDR: the ranks are the launcher's and the collectives work."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    procs = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_SIZE": "2",
            "CROSS_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _DEEPSPEED_WORKER, str(port)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    for rank, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, err
        assert out.strip() == f"{rank} 2 {rank} 2 0 1 [0, 10] True"


def test_from_deepspeed_names_what_the_environment_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="RANK, WORLD_SIZE and LOCAL_RANK"):
        DistributedContext.from_deepspeed()
