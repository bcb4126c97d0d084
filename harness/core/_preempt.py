"""`core_context.preempt`: has the master asked this trial to stop (pause, cancel, reschedule)?

A background thread long-polls the master; `should_preempt()` only reads a flag, so it is cheap
enough to call after every batch.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

from harness.api import APIError, Backoff, MasterUnreachable, Unauthenticated
from harness.api.client import Client
from harness.core._distributed import DistributedContext

logger = logging.getLogger("harness.core.preempt")


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    ExplicitSync = "EXPLICIT_SYNC"


class _Watcher(threading.Thread):
    def __init__(
        self,
        client: Client,
        allocation_id: str,
        on_orphaned: Callable[[str], None],
        poll_timeout: float,
    ) -> None:
        super().__init__(name="det-preemption", daemon=True)
        self.client = client
        self.allocation_id = allocation_id
        self.on_orphaned = on_orphaned
        self.poll_timeout = poll_timeout
        self.flag = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        backoff = Backoff(first=0.5, cap=10.0)
        while not self.stopping.is_set():
            try:
                if self.client.get_preemption(self.allocation_id, timeout=self.poll_timeout):
                    self.flag.set()
                    return
                backoff.reset()
            except Unauthenticated as e:
                self.on_orphaned(f"the master rejected this trial's session token ({e})")
                return
            except (MasterUnreachable, APIError) as e:
                delay = backoff.next()
                logger.debug("preemption poll failed (%s); retrying in %.1fs", e, delay)
                self.stopping.wait(delay)


class PreemptContext:
    def __init__(
        self,
        client: Client | None,
        allocation_id: str | None,
        distributed: DistributedContext,
        preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
        on_orphaned: Callable[[str], None] | None = None,
        poll_timeout: float = 30.0,
    ) -> None:
        self._client = client
        self._allocation_id = allocation_id
        self._dist = distributed
        self._mode = preempt_mode
        self._acked = False
        self._watcher: _Watcher | None = None
        if client is not None and allocation_id and distributed.rank == 0:
            self._watcher = _Watcher(
                client, allocation_id, on_orphaned or (lambda msg: None), poll_timeout
            )
            self._watcher.start()

    def _chief_flag(self) -> bool:
        return self._watcher is not None and self._watcher.flag.is_set()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the master wants this trial to checkpoint and exit.

        With `WorkersAskChief` and several workers this is a collective (the chief broadcasts):
        every worker must call it at the same point.
        """
        if self._dist.size > 1 and self._mode == PreemptMode.WorkersAskChief:
            flag = bool(self._dist.broadcast(self._chief_flag() if self._dist.rank == 0 else None))
        elif self._dist.rank == 0:
            flag = self._chief_flag()
        elif self._mode == PreemptMode.ChiefOnly:
            raise RuntimeError("PreemptMode.ChiefOnly: only the chief may call should_preempt()")
        else:
            flag = False
        if flag and auto_ack:
            self.acknowledge_preemption_signal()
        return flag

    def acknowledge_preemption_signal(self) -> None:
        """Tell the master we saw the signal (it then waits for us instead of killing). Once."""
        if self._acked or self._dist.rank != 0:
            return
        self._acked = True
        if self._client is not None and self._allocation_id:
            try:
                self._client.ack_preemption(self._allocation_id)
            except (MasterUnreachable, APIError) as e:
                if isinstance(e, Unauthenticated):
                    raise
                logger.warning("could not acknowledge preemption: %s", e)

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds for the signal (tests and idle loops)."""
        if self._watcher is None:
            time.sleep(timeout)
            return False
        return self._watcher.flag.wait(timeout)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stopping.set()
