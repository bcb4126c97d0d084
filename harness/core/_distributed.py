"""`DistributedContext`: ranks and small object collectives across the workers of one trial.

Size 1 (`DummyDistributedContext`) off-cluster and for single-slot trials; the real thing comes
from `DistributedContext.from_torch_distributed()` (torch imported only there).
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any, Protocol

# Set by the harness launcher in the worker processes it starts, which leave with os._exit: a
# gloo/nccl group destroyed while a peer tears its own down can abort the process inside the
# library's threads ("terminate called without an active exception", SIGABRT; seen after
# completed trials in -n 2 suite runs), so there the group ends with the process instead.
LEAVE_GROUP_TO_EXIT = False

logger = logging.getLogger("harness.core.distributed")


class _Backend(Protocol):
    def allgather(self, obj: Any) -> list[Any]: ...
    def broadcast(self, obj: Any) -> Any: ...
    def gather(self, obj: Any) -> list[Any] | None: ...


class DistributedContext:
    """Ranks of this worker (global, local to the node, node index) and object collectives.

    The `*_local` collectives run over the workers of this node; they are built on the global
    ones, so every worker must call them, like any collective.
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int = 0,
        local_size: int = 1,
        cross_rank: int = 0,
        cross_size: int = 1,
        chief_ip: str | None = None,
        pub_port: int = 12360,
        pull_port: int = 12376,
        port_offset: int = 0,
        force_tcp: bool = False,
        backend: _Backend | None = None,
        owns_process_group: bool = False,
    ) -> None:
        if size > 1 and backend is None:
            # Determined's standalone form (hand-written launchers): the chief hosts a store at
            # chief_ip:pub_port+port_offset that every worker connects to.
            if chief_ip is None:
                raise ValueError(
                    "a DistributedContext with size > 1 needs chief_ip (the chief worker's "
                    "address, e.g. ClusterInfo.container_addrs[0]) or a backend"
                )
            from harness.core._store_backend import StoreBackend

            backend = StoreBackend(rank, size, chief_ip, pub_port + port_offset)
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self.chief_ip = chief_ip
        self._backend = backend
        self._owns_process_group = owns_process_group
        self._closed = False

    # Determined offers getters as well as attributes.
    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def allgather(self, obj: Any) -> list[Any]:
        """Every worker's `obj`, ordered by rank, on every worker."""
        if self._backend is None:
            return [obj]
        return self._backend.allgather(obj)

    def broadcast(self, obj: Any) -> Any:
        """The chief's `obj` on every worker."""
        if self._backend is None:
            return obj
        return self._backend.broadcast(obj)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every worker's `obj`, ordered by rank, on the chief; None elsewhere."""
        if self._backend is None:
            return [obj]
        return self._backend.gather(obj)

    def allgather_local(self, obj: Any) -> list[Any]:
        tagged = self.allgather((self.cross_rank, obj))
        return [o for cross, o in tagged if cross == self.cross_rank]

    def gather_local(self, obj: Any) -> list[Any] | None:
        local = self.allgather_local(obj)
        return local if self.local_rank == 0 else None

    def broadcast_local(self, obj: Any) -> Any:
        return self.allgather_local(obj)[0]

    def close(self, wait_for_peers: bool = True) -> None:
        """Let the workers leave together, and never leave a gloo group to interpreter exit.

        A gloo group still alive when the interpreter finalizes can abort the process
        ("terminate called without an active exception") while its C++ threads are destroyed;
        so can a rank that tears down while a peer still uses its end (rank 0 storing the last
        checkpoint, say). So ranks first meet at a barrier, bounded by the group's timeout,
        unless the worker is failing and its peers may be gone (`wait_for_peers=False`). The
        worker that built the group destroys it now. A group the script created (Determined's
        distributed tutorial calls `init_process_group` itself and never destroys it) stays
        usable after the context; it is destroyed at exit, before finalization, if the script
        has not done so.
        """
        if self._closed or not isinstance(self._backend, _TorchBackend):
            return
        self._closed = True  # a second close neither waits nor destroys
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        if wait_for_peers and self.size > 1:
            try:
                dist.barrier()
            except Exception as e:  # noqa: BLE001 - tearing down anyway
                logger.warning("peers did not reach the end of training together: %s", e)
        if self._owns_process_group:
            self._owns_process_group = False
            if not LEAVE_GROUP_TO_EXIT:
                dist.destroy_process_group()
        else:
            atexit.register(_destroy_default_group)

    @classmethod
    def from_torch_distributed(
        cls, chief_ip: str | None = None, *, owns_process_group: bool = False
    ) -> DistributedContext:
        """Wrap an initialized `torch.distributed` process group (e.g. under torchrun).

        Ranks come from torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
        `LOCAL_WORLD_SIZE`, `GROUP_RANK`), falling back to the process group itself.
        """
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call "
                "torch.distributed.init_process_group() before from_torch_distributed()"
            )
        size = int(os.environ.get("WORLD_SIZE", dist.get_world_size()))
        rank = int(os.environ.get("RANK", dist.get_rank()))
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        cross_rank = int(os.environ.get("GROUP_RANK", rank // max(local_size, 1)))
        return cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=max(size // max(local_size, 1), 1),
            chief_ip=chief_ip or os.environ.get("MASTER_ADDR"),
            backend=_TorchBackend(rank, size),
            owns_process_group=owns_process_group,
        )

    @classmethod
    def from_deepspeed(
        cls, chief_ip: str | None = None, *, pub_port: int = 12360
    ) -> DistributedContext:
        """Determined 0.38's form for DeepSpeed scripts: ranks from the DeepSpeed launcher's
        environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_SIZE`, `CROSS_RANK`), or
        torchrun's names (`LOCAL_WORLD_SIZE`, `GROUP_RANK`) under
        `determined.launch.torch_distributed`. The object collectives do not ride on
        DeepSpeed's process group: the chief (`chief_ip`, else `DET_CHIEF_IP`, else
        `MASTER_ADDR`) hosts a store at `pub_port` (a detlab keyword; Determined's default).
        `determined.launch.deepspeed` sets DeepSpeed's names (docs/determined-compat.md)."""
        env = os.environ
        try:
            size = int(env["WORLD_SIZE"])
            rank = int(env["RANK"])
            local_rank = int(env["LOCAL_RANK"])
        except (KeyError, ValueError) as e:
            raise RuntimeError(
                "from_deepspeed() reads RANK, WORLD_SIZE and LOCAL_RANK from the launcher's "
                f"environment; {e} is missing or not an integer"
            ) from None
        local_size = int(env.get("LOCAL_SIZE") or env.get("LOCAL_WORLD_SIZE") or size)
        cross_rank = int(env.get("CROSS_RANK") or env.get("GROUP_RANK") or rank // local_size)
        return cls(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=max(size // max(local_size, 1), 1),
            chief_ip=chief_ip or env.get("DET_CHIEF_IP") or env.get("MASTER_ADDR"),
            pub_port=pub_port,
        )


def _destroy_default_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class _TorchBackend:
    """Object collectives over the default torch.distributed process group."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size

    def allgather(self, obj: Any) -> list[Any]:
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        import torch.distributed as dist

        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out


class DummyDistributedContext(DistributedContext):
    """A single worker: every collective returns its own input."""

    def __init__(self) -> None:
        super().__init__()


def from_env() -> DistributedContext | None:
    """The workers' `DistributedContext` when a launcher started several (`WORLD_SIZE` > 1).

    Initializes the default torch.distributed process group from the launcher's environment
    (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`; gloo on CPU, nccl with CUDA, or
    `DET_DIST_BACKEND`) unless the script already did. None for a single process.
    """
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return None
    if size <= 1:
        return None
    import datetime

    import torch
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        backend = os.environ.get("DET_DIST_BACKEND") or (
            "nccl" if torch.cuda.is_available() else "gloo"
        )
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        timeout = float(os.environ.get("DET_DIST_TIMEOUT", "1800"))
        dist.init_process_group(
            backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout)
        )
    return DistributedContext.from_torch_distributed(owns_process_group=created)
