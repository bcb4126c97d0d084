"""Start N torch.distributed workers, supervise them, and stop them all when one fails.

The launcher of container 0 hosts the TCPStore that torch.distributed's `env://` rendezvous of
every worker connects to (`TORCHELASTIC_USE_AGENT_STORE=True`, as under torchrun), so there is no
port race between workers. With several containers the launchers first learn container 0's
address from the master (`POST /allocations/{id}/rendezvous`), then exchange their slot counts
through the store to compute global ranks.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlparse

logger = logging.getLogger("harness.launch")

RENDEZVOUS_TIMEOUT = float(os.environ.get("DET_RENDEZVOUS_TIMEOUT", "600"))
KILL_GRACE = float(os.environ.get("DET_WORKER_KILL_GRACE", "10"))
# After one worker exited cleanly, how long the others may take before they count as hung.
FINISH_GRACE = float(os.environ.get("DET_WORKER_FINISH_GRACE", "300"))


@dataclass
class Workers:
    """Where this container's workers sit in the trial's process group."""

    nproc: int
    base_rank: int
    world_size: int
    container_rank: int
    num_containers: int
    master_addr: str
    master_port: int
    store: Any = None  # the TCPStore (server in container 0): kept alive while workers run

    def env(self, local_rank: int) -> dict[str, str]:
        return {
            "RANK": str(self.base_rank + local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.nproc),
            "GROUP_RANK": str(self.container_rank),
            "GROUP_WORLD_SIZE": str(self.num_containers),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }


def local_slots(env: Mapping[str, str] | None = None) -> int:
    """This container's slots (`DET_SLOT_IDS`), at least 1."""
    env = os.environ if env is None else env
    raw = env.get("DET_SLOT_IDS", "").strip()
    if not raw:
        return 1
    try:
        slots = json.loads(raw)
    except ValueError:
        return 1
    return max(len(slots), 1) if isinstance(slots, list) else 1


def my_address(master_url: str) -> str:
    """This host's address as the master (and so the other containers) would reach it."""
    host = urlparse(master_url if "://" in master_url else f"http://{master_url}").hostname or ""
    if host in ("localhost", "") or host.startswith("127.") or host == "::1":
        return "127.0.0.1"
    port = urlparse(master_url).port or 80
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))  # UDP: no packet is sent, only the route is looked up
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def rendezvous_address(env: Mapping[str, str], master_url: str) -> str:
    """The address this container gives the others: the chosen interface's (the Slurm RM's
    rendezvous_network_interface, agent/netif.py), else the one of its route to the master."""
    return env.get("DET_RENDEZVOUS_ADDR") or my_address(master_url)


def rendezvous(
    container_rank: int, num_containers: int, addr: str, port: int, timeout: float
) -> list[str]:
    """Post this container's address; returns every container's `addr:port` by rank."""
    from harness._info import get_cluster_info
    from harness.api import APIError, MasterUnreachable, NotFound, Session, outage_from_env
    from harness.api.client import Client

    info = get_cluster_info()
    if info is None:
        raise RuntimeError("a trial spanning several containers needs the DET_* environment")
    client = Client(Session(info.master_url, info.session_token, outage_s=outage_from_env()))
    body = {"container_rank": container_rank, "addr": addr, "port": port}
    deadline = time.monotonic() + timeout
    logger.info("rendezvous: container %d of %d at %s", container_rank, num_containers, addr)
    while True:
        try:
            reply = client.rendezvous(info.allocation_id, body, timeout=90.0)
            addrs = reply.get("addrs") if isinstance(reply, dict) else None
            if addrs and len(addrs) == num_containers:
                return [str(a) for a in addrs]
        except NotFound as e:
            raise RuntimeError(
                f"the master has no rendezvous for allocation {info.allocation_id}: {e}"
            ) from e
        except MasterUnreachable as e:
            logger.warning("rendezvous: %s; retrying", e)
            time.sleep(1.0)
        except APIError as e:
            if e.status != 408:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rendezvous: not every one of the {num_containers} containers arrived "
                f"within {timeout:g} s"
            )


def plan_workers(nproc: int | None = None, env: Mapping[str, str] | None = None) -> Workers:
    """Ranks and the torch.distributed store for this container's `nproc` workers."""
    from torch.distributed import TCPStore

    env = os.environ if env is None else env
    nproc = nproc or local_slots(env)
    nnodes = int(env.get("DET_NUM_CONTAINERS") or 1)
    crank = int(env.get("DET_CONTAINER_RANK") or 0)
    timeout = datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT)
    if nnodes <= 1:
        local = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
        return Workers(nproc, 0, nproc, 0, 1, "127.0.0.1", local.port, local)
    master_url = env.get("DET_MASTER", "")
    addr = rendezvous_address(env, master_url)
    store = None
    port = 0
    if crank == 0:
        store = TCPStore(addr, 0, is_master=True, wait_for_workers=False, timeout=timeout)
        port = store.port
    addrs = rendezvous(crank, nnodes, addr, port, RENDEZVOUS_TIMEOUT)
    host, _, p = addrs[0].rpartition(":")
    host = host.strip("[]")
    if store is None:
        store = TCPStore(host, int(p), is_master=False, timeout=timeout)
    store.set(f"det/launch/slots/{crank}", str(nproc))
    counts = [int(store.get(f"det/launch/slots/{r}")) for r in range(nnodes)]
    workers = Workers(nproc, sum(counts[:crank]), sum(counts), crank, nnodes, host, int(p), store)
    logger.info(
        "container %d of %d: ranks %d..%d of %d, store at %s:%s",
        crank,
        nnodes,
        workers.base_rank,
        workers.base_rank + nproc - 1,
        workers.world_size,
        host,
        p,
    )
    return workers


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


def _pump(pipe: IO[bytes], out: IO[str], prefix: str) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            out.write(prefix + raw.decode("utf-8", errors="replace"))
            out.flush()
    except (OSError, ValueError):
        pass
    finally:
        pipe.close()


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def launch_workers(
    argv: Sequence[str], workers: Workers, extra_env: Mapping[str, str] | None = None
) -> int:
    """Run `argv` once per local worker; returns 0 when all succeed, else the first failure's
    exit code (the other workers are stopped: SIGTERM, SIGKILL after a grace period)."""
    procs: list[subprocess.Popen[bytes]] = []
    pumps: list[threading.Thread] = []
    for local in range(workers.nproc):
        env = dict(os.environ)
        env.update(extra_env or {})
        env.update(workers.env(local))
        env["PYTHONUNBUFFERED"] = "1"
        # A worker killed by a native signal (SIGABRT from a library's C++ thread, SIGSEGV)
        # prints every Python thread's stack first, so its log says where it was.
        env.setdefault("PYTHONFAULTHANDLER", "1")
        rank = workers.base_rank + local
        proc = subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        procs.append(proc)
        for pipe, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            t = threading.Thread(target=_pump, args=(pipe, out, f"[rank={rank}] "), daemon=True)
            t.start()
            pumps.append(t)

    stopping: dict[str, Any] = {"signal": None}

    def _forward(signum: int, _frame: Any) -> None:
        stopping["signal"] = signum
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass

    old = {s: signal.signal(s, _forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = _supervise(procs, workers, stopping)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for t in pumps:
            t.join(timeout=5)
    return rc


def _supervise(
    procs: list[subprocess.Popen[bytes]], workers: Workers, stopping: dict[str, Any]
) -> int:
    first_clean: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c is not None and c != 0]
        if failed:
            if stopping["signal"] is None:
                # Every worker found dead in this poll is named: the one that failed first
                # often takes its peers down within milliseconds (a broken collective), and
                # one poll cannot tell which went first, so naming only the lowest rank
                # would blame a bystander for the failure.
                for i, code in failed:
                    print(
                        f"[launcher] worker rank {workers.base_rank + i} exited with code "
                        f"{code}: stopping the other workers",
                        file=sys.stderr,
                        flush=True,
                    )
            _stop_all(procs)
            return _exit_code(failed[0][1])
        if all(c == 0 for c in codes):
            return 0
        if any(c == 0 for c in codes):
            first_clean = first_clean or time.monotonic()
            if time.monotonic() - first_clean > FINISH_GRACE:
                print(
                    f"[launcher] workers still running {FINISH_GRACE:g} s after another "
                    "finished: stopping them",
                    file=sys.stderr,
                    flush=True,
                )
                _stop_all(procs)
                return 1
        time.sleep(0.05)


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_GRACE
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
