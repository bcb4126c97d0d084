"""A real cluster for tests: det-master and det-agent processes on 127.0.0.1, driven like a user."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_admin_url() -> str:
    return os.environ.get("DET_TEST_DB_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def create_pg_database(prefix: str = "detlab_test") -> str:
    """A fresh, empty PostgreSQL database; returns its URL."""
    import psycopg2

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = psycopg2.connect(pg_admin_url())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    base = pg_admin_url().rsplit("/", 1)[0]
    return f"{base}/{name}"


def drop_pg_database(url: str) -> None:
    import psycopg2

    name = url.rsplit("/", 1)[1]
    conn = psycopg2.connect(pg_admin_url())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


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
        except Exception as e:  # noqa: BLE001 - keep polling until the deadline
            last_exc = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what or pred}: {last_exc}")


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

    def start_master(self) -> None:
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
        self.master = subprocess.Popen(args, env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._healthy, 120, what="master health")

    def _healthy(self) -> bool:
        if self.master and self.master.poll() is not None:
            raise RuntimeError(f"master exited: {self.read_log('master')[-3000:]}")
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
        self, agent_id: str = "agent-1", slots: int = 1, *extra: str, runtime: str = "process"
    ) -> None:
        args = [
            str(BIN / "det-agent"),
            "--master",
            self.url,
            "--agent-id",
            agent_id,
            "--slots",
            str(slots),
            "--work-dir",
            str(self.tmp / f"work-{agent_id}"),
            "--kill-grace",
            "3",
            "--runtime",
            runtime,
            *extra,
        ]
        log = open(self.tmp / f"{agent_id}.log", "ab")  # noqa: SIM115
        self.agents[agent_id] = subprocess.Popen(
            args, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        wait_for(lambda: self._agent_state(agent_id) == "ACTIVE", 90, what=f"agent {agent_id}")

    def _agent_state(self, agent_id: str) -> str | None:
        proc = self.agents.get(agent_id)
        if proc and proc.poll() is not None:
            raise RuntimeError(f"agent exited: {self.read_log(agent_id)[-3000:]}")
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
            r = requests.post(
                self.url + "/api/v1/auth/login",
                json={"username": "admin", "password": ADMIN_PASSWORD},
                timeout=10,
            )
            r.raise_for_status()
            self._token = r.json()["token"]
        return self._token

    def get(self, path: str, **params: Any) -> Any:
        r = requests.get(
            self.url + "/api/v1" + path,
            params=params,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: Any = None) -> requests.Response:
        return requests.post(
            self.url + "/api/v1" + path,
            json=body or {},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )

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
        return wait_for(
            lambda: (t := self.get(f"/trials/{trial_id}")["trial"]) and pred(t) and t,
            timeout,
            0.1,
            what=what or f"trial {trial_id}",
        )

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
