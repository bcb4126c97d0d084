"""The poll loop and det-agent itself, against a tiny fake master in a thread."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent.agent import Agent
from agent.client import AgentClient
from agent.devices import discover_slots
from agent.logs import LogShipper
from agent.main import main
from agent.modeldef import ModelDefCache
from agent.runtime import RuntimeContext
from agent.runtime.process import ProcessRuntime
from harness.api import Session

REPO = Path(__file__).resolve().parents[2]
TOKEN = "agent-token"
CRED = "detagent-the-agents-own"

Decide = Callable[[dict[str, Any]], list[dict[str, Any]]]


class FakeMaster:
    """Just enough of the master: poll (long-poll), logs, model_def. `decide(body)` scripts it."""

    def __init__(self, decide: Decide, model_defs: dict[str, bytes] | None = None) -> None:
        self.decide = decide
        self.model_defs = model_defs or {}
        self.polls: list[dict[str, Any]] = []
        self.logs: list[dict[str, Any]] = []
        self.model_def_gets = 0
        self.lock = threading.Lock()
        master = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, obj: Any = None, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") in (f"Bearer {TOKEN}", f"Bearer {CRED}"):
                    return True
                self._reply(401, {"error": {"code": "unauthenticated", "message": "bad token"}})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                with master.lock:
                    master.model_def_gets += 1
                data = master.model_defs.get(self.path)
                if data is None:
                    msg = {
                        "error": {"code": "not_found", "message": f"no model def at {self.path}"}
                    }
                    self._reply(404, msg)
                else:
                    self._reply(200, raw=data)

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/credential"):  # the join token for the agent's own
                    self._reply(201, {"agent_id": self.path.split("/")[-2], "credential": CRED})
                    return
                if self.path.endswith("/logs"):
                    with master.lock:
                        master.logs.extend(body["logs"])
                    self._reply(200, {"accepted": len(body["logs"])})
                    return
                assert self.path.startswith("/api/v1/agents/") and self.path.endswith("/poll")
                with master.lock:
                    master.polls.append(body)
                end = time.monotonic() + min(float(body.get("wait") or 0), 0.3)
                while True:
                    with master.lock:
                        actions = master.decide(body)
                    if actions or time.monotonic() >= end:
                        break
                    time.sleep(0.03)
                self._reply(200, {"actions": actions, "poll_interval": 0.0})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lines(self, aid: str) -> list[str]:
        with self.lock:
            return [ln["line"] for ln in self.logs if ln["allocation_id"] == aid]

    def reported(self, aid: str) -> list[dict[str, Any]]:
        """Every report of allocation `aid`, in poll order."""
        with self.lock:
            return [a for p in self.polls for a in p["allocations"] if a["id"] == aid]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_until(cond: Callable[[], Any], timeout: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or cond}")


def tarball(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


TRAIN = "import os, time\nprint('hello from', os.environ['DET_ALLOCATION_ID'], flush=True)\n" + (
    "time.sleep(60)\n"
)
MODEL = tarball({"train.py": TRAIN})
# The master always sends the sha256; the agent caches only what it can verify.
MODEL_SHA = hashlib.sha256(MODEL).hexdigest()


def start_action(aid: str, **extra: Any) -> dict[str, Any]:
    spec = {
        "allocation_id": aid,
        "trial_id": 1,
        "experiment_id": 3,
        "entrypoint": "python3 train.py",
        "slot_indexes": [0],
        "env": {"DET_ALLOCATION_ID": aid, "DET_SESSION_TOKEN": "s"},
        "environment": {"environment_variables": {}},
        "model_def_url": "/api/v1/experiments/3/model_def",
        "model_def_sha256": MODEL_SHA,
        **extra,
    }
    return {"type": "start", "spec": spec}


class StartThenKill:
    """Hands out starts, then kills each allocation once its first log line has arrived."""

    def __init__(self, master: Callable[[], FakeMaster], starts: list[dict[str, Any]]) -> None:
        self.master = master
        self.starts = starts
        self.sent_starts = False
        self.killed: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.sent_starts:
            self.sent_starts = True
            return list(self.starts)
        actions = []
        logs = self.master().logs
        for a in body["allocations"]:
            aid = a["id"]
            hello = any(ln["allocation_id"] == aid and "hello" in ln["line"] for ln in logs)
            if a["state"] == "RUNNING" and a["pid"] and hello and aid not in self.killed:
                self.killed.add(aid)
                actions.append({"type": "kill", "allocation_id": aid})
        return actions


@pytest.fixture
def fake_master() -> Iterator[Callable[..., FakeMaster]]:
    made: list[FakeMaster] = []

    def make(decide: Decide, model_defs: dict[str, bytes] | None = None) -> FakeMaster:
        m = FakeMaster(decide, model_defs)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def test_poll_loop_start_then_kill(tmp_path: Path, fake_master: Callable[..., FakeMaster]) -> None:
    starts = [
        start_action("a1"),
        start_action("a1"),  # a duplicate start is ignored
        start_action("a2"),  # same experiment: the model def is downloaded once
        start_action("a3", model_def_url="/api/v1/experiments/99/model_def", experiment_id=99),
    ]
    holder: list[FakeMaster] = []
    master = fake_master(
        StartThenKill(lambda: holder[0], starts),
        {"/api/v1/experiments/3/model_def": MODEL},
    )
    holder.append(master)

    client = AgentClient(Session(master.url, TOKEN), "t-agent")
    shipper = LogShipper(client).start()
    slots = discover_slots(2)
    runtime = ProcessRuntime(
        RuntimeContext(
            work_dir=tmp_path,
            master_url=master.url,
            agent_id="t-agent",
            slots=slots,
            log_sink=shipper.add,
            kill_grace=2.0,
        )
    )
    agent = Agent(
        agent_id="t-agent",
        client=client,
        runtime=runtime,
        shipper=shipper,
        model_defs=ModelDefCache(tmp_path / "cache", client),
        slots=slots,
        poll_wait=0.5,
    )
    agent.start()
    try:

        def exited(aid: str) -> list[dict[str, Any]]:
            return [a for a in master.reported(aid) if a["state"] == "EXITED"]

        wait_until(lambda: all(exited(a) for a in ("a1", "a2", "a3")), 60, "three exits")
        for aid in ("a1", "a2"):
            reports = master.reported(aid)
            assert any(a["state"] == "RUNNING" and a["pid"] for a in reports)
            assert exited(aid)[0]["exit_code"] == -15
            assert exited(aid)[0]["error"] is None, "the master asked for this kill"
            assert f"hello from {aid}" in master.lines(aid)
        assert master.lines("a1").count("hello from a1") == 1, "a1 ran once"
        bad = exited("a3")[0]
        assert bad["exit_code"] == 1 and "model definition" in bad["error"]
        assert any("no model def" in ln for ln in master.lines("a3"))
        assert master.model_def_gets == 2  # experiment 3 once, experiment 99 once

        # once a poll has carried the exit, the agent forgets the allocation
        n = len(master.polls)
        wait_until(lambda: len(master.polls) > n + 1, 60, "more polls")
        assert master.polls[-1]["allocations"] == []
        assert runtime.states() == []
    finally:
        agent.shutdown(final_poll_timeout=2)

    first = master.polls[0]
    assert first["resource_pool"] == "default" and first["runtime"] == "process"
    assert first["version"] and first["hostname"] and first["wait"] == 0.5
    assert [s["uuid"] for s in first["slots"]] == ["cpu-0", "cpu-1"]
    assert "util_percent" in first["slots"][0]["stats"]
    assert any(p["wait"] == 0 for p in master.polls), "changes are reported with wait: 0"
    assert not list(tmp_path.glob("a*")), "workdirs are removed"


def _agent_cmd(master: FakeMaster, data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agent.main", "--master", master.url, "--agent-id", "cli-agent",
        "--slots", "1", "--poll-wait", "1", "--kill-grace", "3", "--data-dir", str(data_dir),
        "--runtime", "process",
        # As this machine's test user: trials here need not be isolated from each other.
        "--shared-unisolated", *extra,
    ]  # fmt: skip


def _env_without_token() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DET_AGENT_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    return env


def test_det_agent_sigterm_kills_trials_and_reports(
    tmp_path: Path, fake_master: Callable[..., FakeMaster]
) -> None:
    code = "import time\nprint('hello', flush=True)\ntime.sleep(60)"
    start = start_action("s1", entrypoint=["python3", "-c", code], model_def_url=None)
    sent: list[bool] = []

    def decide(body: dict[str, Any]) -> list[dict[str, Any]]:
        if sent:
            return []
        sent.append(True)
        return [start]

    master = fake_master(decide)
    (tmp_path / "agent_token").write_text(TOKEN + "\n")  # written by a master on this machine
    proc = subprocess.Popen(
        _agent_cmd(master, tmp_path),
        env=_env_without_token(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        wait_until(lambda: "hello" in master.lines("s1"), 60, "the trial's first line")
        wait_until(lambda: any(a["pid"] for a in master.reported("s1")), 60, "RUNNING with pid")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    last = master.polls[-1]
    assert last["wait"] == 0
    assert last["allocations"] == [
        {"id": "s1", "state": "EXITED", "exit_code": -15, "pid": last["allocations"][0]["pid"],
         "error": "killed because det-agent is shutting down", "cause": "agent_shutdown"}
    ]  # fmt: skip
    assert "[agent cli-agent]" in out
    assert (tmp_path / "agent-cli-agent").is_dir(), "default work dir is <data-dir>/agent-<id>"


def test_det_agent_rejected_token_exits_2(
    tmp_path: Path, fake_master: Callable[..., FakeMaster]
) -> None:
    master = fake_master(lambda body: [])
    env = _env_without_token()
    env["DET_AGENT_TOKEN"] = "wrong"
    proc = subprocess.run(
        _agent_cmd(master, tmp_path), env=env, capture_output=True, text=True, timeout=20, cwd=REPO
    )
    assert proc.returncode == 2
    assert "refused this agent's join token (HTTP 401" in proc.stderr


def test_missing_token_and_docker_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DET_AGENT_TOKEN", raising=False)
    assert main(["--data-dir", str(tmp_path), "--slots", "1"]) == 2
    assert "DET_AGENT_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("DET_AGENT_TOKEN", "x")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # no engine, whatever runs here
    assert main(["--data-dir", str(tmp_path), "--slots", "1", "--runtime", "docker"]) == 2
    assert "Docker engine does not answer" in capsys.readouterr().err
