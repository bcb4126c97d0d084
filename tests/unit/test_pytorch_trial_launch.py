"""harness.launch: the multi-container rendezvous and the torch launcher for Core API scripts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from flask import jsonify, request

from harness.api.testing import FakeMaster
from harness.launch import Workers, plan_workers
from harness.launch._spawn import my_address

ROOT = Path(__file__).resolve().parents[2]


def test_my_address_is_loopback_for_a_local_master() -> None:
    assert my_address("http://127.0.0.1:8080") == "127.0.0.1"
    assert my_address("http://localhost:8080") == "127.0.0.1"


def test_two_containers_meet_through_the_masters_rendezvous() -> None:
    posted: dict[int, dict[str, Any]] = {}
    cond = threading.Condition()
    with FakeMaster() as fake:

        @fake.app.post("/api/v1/allocations/a-9/rendezvous")
        def rendezvous() -> Any:
            body = request.get_json()
            with cond:
                posted[body["container_rank"]] = body
                cond.notify_all()
                if not cond.wait_for(lambda: len(posted) == 2, timeout=5):
                    return jsonify(ready=False)
                addrs = [f"{posted[r]['addr']}:{posted[r]['port']}" for r in range(2)]
            return jsonify(addrs=addrs)

        base = {
            "DET_MASTER": fake.url,
            "DET_TRIAL_ID": "1",
            "DET_ALLOCATION_ID": "a-9",
            "DET_SESSION_TOKEN": "t",
            "DET_NUM_CONTAINERS": "2",
        }
        out: dict[int, Workers] = {}
        # os.environ is process-wide: set it once, the env argument carries the per-rank parts.
        with pytest.MonkeyPatch.context() as mp:
            for k, v in base.items():
                mp.setenv(k, v)
            threads = [
                threading.Thread(target=plan_workers_into, args=(out, base, r, s))
                for r, s in ((0, [0, 1]), (1, [0]))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
    assert posted[0]["port"] > 0 and posted[1]["port"] == 0
    assert posted[0]["addr"] == "127.0.0.1"
    w0, w1 = out[0], out[1]
    assert (w0.base_rank, w0.world_size, w0.nproc) == (0, 3, 2)
    assert (w1.base_rank, w1.world_size, w1.nproc) == (2, 3, 1)
    assert w1.master_addr == "127.0.0.1" and w1.master_port == w0.master_port == posted[0]["port"]
    assert w1.env(0)["RANK"] == "2" and w1.env(0)["GROUP_RANK"] == "1"


def plan_workers_into(
    out: dict[int, Workers], base: dict[str, str], rank: int, slots: list[int]
) -> None:
    env = {**base, "DET_CONTAINER_RANK": str(rank), "DET_SLOT_IDS": json.dumps(slots)}
    out[rank] = plan_workers(env=env)


CORE_SCRIPT = """
import harness, torch
with harness.core.init() as core:
    d = core.distributed
    got = d.allgather(d.rank * 10)
    chief = d.broadcast("from-%d" % d.rank)
    print("worker", d.rank, d.size, d.local_rank, got, chief, flush=True)
# The context built the process group, so closing it tore the group down.
print("group left", torch.distributed.is_initialized(), flush=True)
"""


def test_torch_launcher_runs_a_core_api_script_on_n_workers(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(CORE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, "-m", "harness.launch.torch_distributed", "--nproc", "2", "--",
         sys.executable, "script.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[rank=0] worker 0 2 0 [0, 10] from-0" in r.stdout
    assert "[rank=1] group left False" in r.stdout
    assert "[rank=1] worker 1 2 1 [0, 10] from-0" in r.stdout


def _two_workers_of(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script.py` on two workers of the torch launcher. The survivor waits (`signal.pause()`)
    for the SIGTERM the launcher sends once the other worker has failed."""
    (tmp_path / "script.py").write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "harness.launch.torch_distributed", "--nproc", "2", "script.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "DET_WORKER_KILL_GRACE": "2"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_torch_launcher_fails_when_a_worker_fails(tmp_path: Path) -> None:
    r = _two_workers_of(
        tmp_path,
        "import os, signal, sys\nif os.environ['RANK'] == '1': sys.exit(3)\nsignal.pause()\n",
    )
    assert r.returncode == 3
    assert "worker rank 1 exited with code 3" in r.stderr


def test_a_worker_that_aborts_shows_where_it_was(tmp_path: Path) -> None:
    """A native abort (as a library thread's "terminate called" raises) prints the worker's
    Python stack into its log before the launcher reports the signal."""
    r = _two_workers_of(
        tmp_path,
        "import os, signal\n"
        "def finishing():\n    os.abort()\n"
        "if os.environ['RANK'] == '1':\n    finishing()\nsignal.pause()\n",
    )
    assert "worker rank 1 exited with code -6" in r.stderr, r.stderr[-2000:]
    assert "[rank=1] Fatal Python error: Aborted" in r.stderr
    assert re.search(r"\[rank=1\] .*line 3 in finishing", r.stderr), r.stderr[-2000:]


def test_workers_found_dead_in_one_poll_are_all_named(capsys: pytest.CaptureFixture[str]) -> None:
    # Rank 1 fails and its broken collective takes rank 0 down within milliseconds: one poll of
    # the launcher finds both dead, and the log must not name only rank 0 (a -n 2 suite run
    # showed "worker rank 0 exited" for a failure injected in rank 1).
    from harness.launch._spawn import _supervise

    procs = [
        subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"]) for code in (4, 1)
    ]
    for p in procs:
        p.wait(timeout=60)
    workers = Workers(
        nproc=2,
        base_rank=2,
        world_size=4,
        container_rank=1,
        num_containers=2,
        master_addr="127.0.0.1",
        master_port=1,
    )
    rc = _supervise(procs, workers, {"signal": None})
    err = capsys.readouterr().err
    assert rc == 4
    assert "[launcher] worker rank 2 exited with code 4" in err
    assert "[launcher] worker rank 3 exited with code 1" in err
