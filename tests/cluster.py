"""A real cluster for tests: det-master and det-agent processes on 127.0.0.1, driven like a user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ADMIN_PASSWORD = "test-admin-pw"
AGENT_TOKEN = "test-agent-token"


def free_port() -> int:
    """A port free now; under pytest-xdist, from this worker's own range (tests/xdist_groups.py)."""
    from tests import xdist_groups

    index = xdist_groups.worker_index()
    if index is not None:
        return xdist_groups.worker_port(index)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_admin_url() -> str:
    return os.environ.get("DET_TEST_DB_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_pg_database(prefix: str = "detlab_test", *, migrated: bool = True) -> str:
    """A fresh PostgreSQL database; returns its URL. `migrated` (the default): a copy of the
    migrated template (tests/pgtemplate.py), as a master would leave it after its migrations but
    before its first start; else empty (the migration tests)."""
    import psycopg2

    from tests import pgtemplate

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    if migrated:
        pgtemplate.create_from_template(pg_admin_url(), name)
    else:
        conn = psycopg2.connect(pg_admin_url())
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
    return pgtemplate.db_url(pg_admin_url(), name)


def drop_pg_database(url: str) -> None:
    import psycopg2

    name = url.rsplit("/", 1)[1]
    conn = psycopg2.connect(pg_admin_url())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


class ProcessExited(RuntimeError):
    """A process a test waits on has exited: waiting longer cannot help (`wait_for` re-raises)."""


def wait_for(
    pred: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = ""
) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            val = pred()
            if val:
                return val
        except ProcessExited:
            # A master that crashed on start used to be polled for the full 120 s.
            raise
        except Exception as e:  # noqa: BLE001 - keep polling until the deadline
            last_exc = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what or pred}: {last_exc}")


# How long a test helper rides out the master's "busy, retry" answers before failing.
MASTER_BUSY_S = 60.0
RETRY_STATUSES = (429, 503)


def call_master(method: str, url: str, **kw: Any) -> requests.Response:
    """Every test helper's call to the master goes through here. A 503 (its database is busy or
    away: "retry shortly", with Retry-After) or a 429 is answered before anything was kept, so it
    is retried like every client of the master must (harness/api/_retry.py), for up to
    MASTER_BUSY_S; the last answer is returned as it is. Tests that assert on the 503 itself (the
    outage tests) call requests directly."""
    from harness.api._retry import FIRST_DELAY_S, MAX_DELAY_S

    deadline = time.monotonic() + MASTER_BUSY_S
    delay = FIRST_DELAY_S
    while True:
        r = requests.request(method, url, **kw)
        if r.status_code not in RETRY_STATUSES or time.monotonic() + delay > deadline:
            return r
        try:
            after = float(r.headers.get("Retry-After") or delay)
        except ValueError:
            after = delay
        time.sleep(min(max(after, 0.05), MAX_DELAY_S))
        delay = min(delay * 2, MAX_DELAY_S)


# The agents of these tests run as root and their trials as other Unix users
# (agent/identity.py), which must pass through to their work directories and checkpoints as they
# would through any operator's --work-dir. pytest keeps its temporary directories under
# /tmp/pytest-of-USER, which every pytest session resets to 0700, so a cluster's directory lives
# here instead (search permission for others, no listing), linked from the test's tmp_path.
CLUSTERS_ROOT = Path(tempfile.gettempdir()) / "detlab-test-clusters"


def let_trials_run_python() -> None:
    """This machine's interpreter may live in root's 0700 home (pyenv): give other users search
    permission (not listing) on the directories above it, as an installation for trials running
    as other users needs (det-agent refuses to start isolated otherwise, naming them)."""
    from agent.identity import unreachable_ancestors
    from agent.runtime.process import python_dirs

    for path in python_dirs():
        for d in unreachable_ancestors(path):
            os.chmod(d, os.stat(d).st_mode & 0o7777 | 0o001)


def cluster_dir(tmp_path: Path, name: str) -> Path:
    """A fresh directory for one cluster that trials running as other users can pass through;
    `tmp_path/name` links to it (see `release_cluster_dir`)."""
    let_trials_run_python()
    CLUSTERS_ROOT.mkdir(mode=0o711, exist_ok=True)
    CLUSTERS_ROOT.chmod(0o711)
    path = Path(tempfile.mkdtemp(prefix=f"{tmp_path.name[:40]}-{name}-", dir=CLUSTERS_ROOT))
    path.chmod(0o711)
    (tmp_path / name).symlink_to(path, target_is_directory=True)
    return path


def release_cluster_dir(tmp_path: Path, name: str) -> None:
    """Remove a `cluster_dir`, keeping its logs in tmp_path/name for a failed test's reader."""
    link = tmp_path / name
    if not link.is_symlink():
        return
    path = link.resolve()
    link.unlink()
    link.mkdir()
    for log in path.glob("*.log"):
        shutil.copyfile(log, link / log.name)
    shutil.rmtree(path, ignore_errors=True)


# What a failed `wait_trial` says about the trial.
_TRIAL_FIELDS = (
    "state",
    "steps_completed",
    "searcher_completed",
    "restarts",
    "allocation_id",
    "latest_checkpoint",
    "exit_reason",
)


class Cluster:
    """One master (+ agents) in a temp dir; everything is torn down by `stop()`."""

    def __init__(
        self,
        tmp: Path,
        db_url: str | None,
        *,
        agent_timeout: float = 30.0,
        master_yaml: str | None = None,
    ) -> None:
        self.tmp = tmp
        self.db_url = db_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = tmp / "master-data"
        self.ckpt_dir = tmp / "checkpoints"
        self.agent_timeout = agent_timeout
        self.master_yaml = master_yaml
        self.master: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        self._token: str | None = None

    # -- processes ---------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DET_ADMIN_PASSWORD=ADMIN_PASSWORD,
            DET_AGENT_TOKEN=AGENT_TOKEN,
            DET_MASTER=self.url,
            DET_USER="admin",
            DET_PASSWORD=ADMIN_PASSWORD,
            DET_CONFIG_DIR=str(self.tmp / "cli-config"),
            PYTHONUNBUFFERED="1",
        )
        env.pop("DET_DB_URL", None)
        return env

    def start_master(self, uid: int | None = None, gid: int | None = None) -> None:
        """Start det-master, as the test's user or, with `uid`, as that unprivileged Unix
        user (no supplementary groups; its data dir must be its own)."""
        as_user: dict[str, Any] = {}
        if uid is not None:
            as_user = {"user": uid, "group": gid if gid is not None else uid, "extra_groups": []}
        args = [
            str(BIN / "det-master"),
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--agent-timeout",
            str(self.agent_timeout),
        ]
        if self.db_url:
            args += ["--db", self.db_url]
        if self.master_yaml:
            cfg = self.tmp / "master.yaml"
            cfg.write_text(self.master_yaml)
            args += ["--config", str(cfg)]
        log = open(self.tmp / "master.log", "ab")  # noqa: SIM115
        self.master = subprocess.Popen(
            args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, **as_user
        )
        wait_for(self._healthy, 120, what="master health")

    def _healthy(self) -> bool:
        if self.master and self.master.poll() is not None:
            raise ProcessExited(f"master exited: {self.read_log('master')[-3000:]}")
        try:
            return requests.get(self.url + "/api/v1/health", timeout=1).ok
        except requests.RequestException:
            return False

    def stop_master(self, sig: int = signal.SIGTERM) -> None:
        if self.master and self.master.poll() is None:
            self.master.send_signal(sig)
            try:
                self.master.wait(15)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()
        self.master = None

    def start_agent(
        self,
        agent_id: str = "agent-1",
        slots: int = 1,
        *extra: str,
        runtime: str = "process",
        uid: int | None = None,
    ) -> None:
        """Start det-agent, as root (it isolates trials) or, with `uid`, as that ordinary Unix
        user (uid = gid, no groups: it cannot isolate), its work and data dirs made its own."""
        work, data = self.tmp / f"work-{agent_id}", self.tmp / f"data-{agent_id}"
        as_user: dict[str, Any] = {}
        if uid is not None:
            for d in (work, data):
                d.mkdir(mode=0o700, exist_ok=True)
                os.chown(d, uid, uid)
            as_user = {"user": uid, "group": uid, "extra_groups": []}
        args = [
            str(BIN / "det-agent"),
            "--master",
            self.url,
            "--agent-id",
            agent_id,
            "--slots",
            str(slots),
            "--work-dir",
            str(work),
            # Its own credential file (agent/credential.py), not one in the user's home that
            # another test's master issued.
            "--data-dir",
            str(data),
            "--kill-grace",
            "3",
            "--runtime",
            runtime,
            *extra,
        ]
        log = open(self.tmp / f"{agent_id}.log", "ab")  # noqa: SIM115
        self.agents[agent_id] = subprocess.Popen(
            args, env=self.env(), stdout=log, stderr=subprocess.STDOUT, **as_user
        )
        wait_for(lambda: self._agent_state(agent_id) == "ACTIVE", 90, what=f"agent {agent_id}")

    def _agent_state(self, agent_id: str) -> str | None:
        proc = self.agents.get(agent_id)
        if proc and proc.poll() is not None:
            raise ProcessExited(f"agent exited: {self.read_log(agent_id)[-3000:]}")
        for a in self.get("/agents")["agents"]:
            if a["id"] == agent_id:
                return a["state"]
        return None

    def stop_agent(self, agent_id: str, sig: int = signal.SIGTERM) -> None:
        proc = self.agents.pop(agent_id, None)
        if proc and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        for agent_id in list(self.agents):
            self.stop_agent(agent_id)
        self.stop_master()

    def read_log(self, name: str) -> str:
        p = self.tmp / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # -- REST --------------------------------------------------------------------------------
    @property
    def token(self) -> str:
        if self._token is None:
            r = call_master(
                "POST",
                self.url + "/api/v1/auth/login",
                json={"username": "admin", "password": ADMIN_PASSWORD},
                timeout=10,
            )
            r.raise_for_status()
            self._token = r.json()["token"]
        return self._token

    def request(self, method: str, path: str, **kw: Any) -> requests.Response:
        """A call to `/api/v1{path}` as the admin, through `call_master` (busy answers retried)."""
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        kw.setdefault("timeout", 60)
        return call_master(method, self.url + "/api/v1" + path, headers=headers, **kw)

    def get(self, path: str, **params: Any) -> Any:
        r = self.request("GET", path, params=params)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: Any = None) -> requests.Response:
        return self.request("POST", path, json=body or {})

    # -- CLI ---------------------------------------------------------------------------------
    def det(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(BIN / "det"), *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"det {' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout}\n"
                f"stderr: {proc.stderr}"
            )
        return proc

    def det_json(self, *args: str) -> Any:
        return json.loads(self.det(*args, "--json").stdout)

    # -- experiments -------------------------------------------------------------------------
    def experiment(self, exp_id: int) -> dict:
        return self.get(f"/experiments/{exp_id}")

    def wait_experiment(self, exp_id: int, states: set[str], timeout: float = 120) -> dict:
        def check() -> dict | None:
            d = self.experiment(exp_id)
            return d if d["experiment"]["state"] in states else None

        try:
            return wait_for(check, timeout, 0.2, what=f"experiment {exp_id} in {states}")
        except TimeoutError:
            raise AssertionError(self.diagnose(exp_id)) from None

    def wait_trial(
        self, trial_id: int, pred: Callable[[dict], bool], timeout: float = 120, what: str = ""
    ) -> dict:
        last: list[dict] = []

        def check() -> dict | None:
            t = self.get(f"/trials/{trial_id}")["trial"]
            last[:] = [t]
            return t if pred(t) else None

        try:
            return wait_for(check, timeout, 0.1, what=what or f"trial {trial_id}")
        except TimeoutError as e:
            # Say where the trial was: "waiting for paused: None" left its state unknown.
            seen = {k: last[0].get(k) for k in _TRIAL_FIELDS} if last else None
            raise TimeoutError(f"{e}; the trial was last seen as {seen}") from None

    def logs(self, trial_id: int) -> list[str]:
        return [
            entry["line"] for entry in self.get(f"/trials/{trial_id}/logs", limit=10000)["logs"]
        ]

    def diagnose(self, exp_id: int) -> str:
        d = self.experiment(exp_id)
        out = [json.dumps(d["experiment"]["state"]), json.dumps(d["trials"], indent=1)[:3000]]
        for t in d["trials"]:
            out.append("\n".join(self.logs(t["id"])[-60:]))
        out.append("MASTER LOG:\n" + self.read_log("master")[-4000:])
        for a in self.agents:
            out.append(f"AGENT {a} LOG:\n" + self.read_log(a)[-3000:])
        return "\n".join(out)
