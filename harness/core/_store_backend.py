"""Object collectives over a TCP key-value store the chief hosts (`DistributedContext(rank=...,
size=..., chief_ip=...)` built by hand, as Determined's custom-launcher examples do).

torch's `TCPStore` carries the bytes (torch is imported only when such a context is built).
Each collective has a sequence number; every worker writes its pickled object under its key and
reads the others', and the last reader removes the keys.
"""

from __future__ import annotations

import datetime
import os
import pickle
from typing import Any


class StoreBackend:
    def __init__(self, rank: int, size: int, chief_ip: str, port: int) -> None:
        from torch.distributed import TCPStore

        timeout = datetime.timedelta(seconds=float(os.environ.get("DET_DIST_TIMEOUT", "1800")))
        self.rank = rank
        self.size = size
        self._seq = 0
        self._store = TCPStore(
            chief_ip,
            port,
            world_size=size,
            is_master=rank == 0,
            timeout=timeout,
            wait_for_workers=True,
        )

    def _exchange(self, obj: Any, writers: list[int], readers: list[int]) -> list[Any] | None:
        self._seq += 1
        base = f"det/{self._seq}"
        if self.rank in writers:
            self._store.set(f"{base}/{self.rank}", pickle.dumps(obj))  # type: ignore[arg-type]
        out = None
        if self.rank in readers:
            out = [pickle.loads(self._store.get(f"{base}/{r}")) for r in writers]
            if self._store.add(f"{base}/read", 1) == len(readers):
                for r in writers:
                    self._store.delete_key(f"{base}/{r}")
                self._store.delete_key(f"{base}/read")
        return out

    def allgather(self, obj: Any) -> list[Any]:
        everyone = list(range(self.size))
        out = self._exchange(obj, everyone, everyone)
        assert out is not None
        return out

    def broadcast(self, obj: Any) -> Any:
        out = self._exchange(obj, [0], list(range(self.size)))
        assert out is not None
        return out[0]

    def gather(self, obj: Any) -> list[Any] | None:
        return self._exchange(obj, list(range(self.size)), [0])
