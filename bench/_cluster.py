"""A throwaway detlab cluster for one benchmark: a PostgreSQL database, a master and an agent."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2

from harness.api import DetError, Session
from harness.api.client import Client

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TERMINAL = frozenset({"COMPLETED", "CANCELED", "ERROR"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bin_path(name: str) -> str:
    """A console script of the venv running the benchmark (else from PATH)."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


def tar_dir(path: Path) -> bytes:
    """The model directory as .tar.gz bytes, as `det experiment create` sends it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(path.rglob("*")):
            if "__pycache__" not in p.parts:
                tar.add(p, arcname=str(p.relative_to(path)), recursive=False)
    return buf.getvalue()


@contextlib.contextmanager
def database(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database (dropped first if left over, dropped again afterwards)."""

    def execute(sql: str) -> None:
        conn = psycopg2.connect(PG_ADMIN_DSN)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process group we started, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `cmd` in its own process group, stdout and stderr to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def wait_for(what: str, check, timeout: float, procs: list[subprocess.Popen] = ()) -> None:
    """Poll `check()` until true; fail early when one of `procs` exits."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: {p.args[0]} exited with {p.returncode}")
        with contextlib.suppress(DetError, OSError):
            if check():
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


@dataclass
class Cluster:
    url: str
    db_url: str
    client: Client
    work: Path
    logs: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def sql(self, query: str, *params: object) -> list[tuple]:
        conn = psycopg2.connect(self.db_url)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall()
        finally:
            conn.close()

    def wait_experiments(self, ids: list[int], timeout: float) -> dict[int, str]:
        """Wait until every experiment has ended; returns id -> final state."""
        states: dict[int, str] = {}
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i in ids:
                if i not in states:
                    state = self.client.get_experiment(i)["state"]
                    if state in TERMINAL:
                        states[i] = state
            if len(states) == len(ids):
                return states
            time.sleep(0.05)
        raise TimeoutError(f"experiments {sorted(set(ids) - set(states))} still running")


@contextlib.contextmanager
def cluster(
    name: str, slots: int, master_yaml: str | None = None, db_name: str = "detlab_bench"
) -> Iterator[Cluster]:
    """Master (on PostgreSQL `detlab_bench`) + one process-runtime agent with `slots` CPU slots
    (no agent with 0 slots: a master whose pools another resource manager runs, `master_yaml`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = RESULTS / "work" / f"{name}-{stamp}"
    logs = RESULTS / "logs" / f"{name}-{stamp}"
    work.mkdir(parents=True)
    password = secrets.token_urlsafe(12)
    env = {
        **os.environ,
        "DET_ADMIN_PASSWORD": password,
        "DET_AGENT_TOKEN": secrets.token_urlsafe(24),
        # `python3` in an entrypoint must be the venv's (it has the harness and its deps).
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("DET_MASTER", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # DET_BENCH_DB: another name, for runs beside someone else's on one PostgreSQL.
    with database(os.environ.get("DET_BENCH_DB", db_name)) as db_url:
        procs: list[subprocess.Popen] = []
        try:
            master_cmd = [bin_path("det-master"), "--db", db_url, "--host", "127.0.0.1"]
            master_cmd += ["--port", str(port), "--data-dir", str(work / "master")]
            if master_yaml is not None:
                (work / "master.yaml").write_text(master_yaml)
                master_cmd += ["--config", str(work / "master.yaml")]
            procs.append(spawn(master_cmd, logs / "master.log", env))
            client = Client(Session(url))
            wait_for("master health", lambda: client.health(), 60, procs)
            client.login("admin", password)
            if slots == 0:
                yield Cluster(url, db_url, client, work, logs, procs)
                return
            agent_cmd = [bin_path("det-agent"), "--master", url, "--slots", str(slots)]
            agent_cmd += ["--runtime", "process", "--data-dir", str(work / "master")]
            # e.g. "--shared-unisolated": the cost of trial isolation, measured both ways.
            agent_cmd += shlex.split(os.environ.get("DET_BENCH_AGENT_ARGS", ""))
            procs.append(spawn(agent_cmd, logs / "agent.log", env))
            wait_for(
                f"agent with {slots} slots",
                lambda: any(
                    a["state"] == "ACTIVE" and len(a["slots"]) == slots
                    for a in client.list_agents()
                ),
                60,
                procs,
            )
            yield Cluster(url, db_url, client, work, logs, procs)
        finally:
            for p in reversed(procs):
                stop(p)
            shutil.rmtree(work, ignore_errors=True)  # trial dirs and checkpoints; logs stay
