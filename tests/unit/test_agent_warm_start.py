"""Warm starts: Python trials forked from a warm interpreter behave like fresh interpreters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.runtime.process import ProcessRuntime
from agent.runtime.warm import WarmForm, warm_form
from detlab.protocol import ReportedState
from tests.unit.runtime_support import (
    REPO,
    Sink,
    alive,
    make_tarball,
    spec,
    state,
    wait_exited,
)

PY = os.path.dirname(sys.executable)


def form(argv: list[str], tmp_path: Path, **env: str) -> WarmForm | None:
    (tmp_path / "train.py").write_text("pass\n")
    return warm_form(argv, {"PATH": PY, **env}, tmp_path, {})


def test_which_entrypoints_start_warm(tmp_path: Path) -> None:
    assert form(["python3", "train.py", "--lr", "1"], tmp_path) == WarmForm(
        "path", "train.py", ["--lr", "1"]
    )
    assert form([sys.executable, "-u", "train.py"], tmp_path) == WarmForm("path", "train.py", [])
    assert form(["python3", "-m", "harness.launch", "m:T"], tmp_path) == WarmForm(
        "module", "harness.launch", ["m:T"]
    )
    # Cold: inline code, other interpreters and programs, options, a missing script, opt-out,
    # and start-up settings the warm interpreter would not honour.
    assert form(["python3", "-c", "print(1)"], tmp_path) is None
    assert form(["/usr/bin/env", "python3", "train.py"], tmp_path) is None
    assert form(["python3", "-O", "train.py"], tmp_path) is None
    assert form(["python3", "-m"], tmp_path) is None
    assert form(["python3", "missing.py"], tmp_path) is None
    assert form(["python3", "train.py"], tmp_path, DET_WARM_START="0") is None
    assert form(["python3", "train.py"], tmp_path, PYTHONHASHSEED="0") is None
    assert form([], tmp_path) is None


FRESH_PY = textwrap.dedent(
    """
    import json, os, random, sys
    fresh = "harness" not in sys.modules  # the trial imports its own harness
    import harness
    print("FACTS " + json.dumps({
        "name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
        "trial": os.environ.get("DET_TRIAL_ID"), "token": os.environ.get("DET_AGENT_TOKEN"),
        "fresh_harness": fresh, "harness": os.path.dirname(os.path.dirname(harness.__file__)),
        "random": random.random(), "parent": os.getppid(), "session": os.getsid(0) == os.getpid(),
    }))
    print("to stderr", file=sys.stderr)
    if sys.argv[1:] == ["fail"]:
        raise RuntimeError("boom from the trial")
    sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
    """
)


def facts(sink: Sink, aid: str) -> dict:
    line = next(ln for ln in sink.of(aid, "stdout") if ln.startswith("FACTS "))
    return json.loads(line.removeprefix("FACTS "))


def test_a_warm_trial_looks_freshly_started(
    runtime: ProcessRuntime, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_AGENT_TOKEN", "cluster-secret")
    tarball = make_tarball(tmp_path / "m.tar.gz", {"train.py": FRESH_PY})
    runs = {}
    for aid, args in (("w1", "3"), ("w2", "0"), ("w3", "fail")):
        runtime.start(spec(aid, f"python3 train.py {args}"), tarball)
        runs[aid] = wait_exited(runtime, aid)
    assert [runs[a]["exit_code"] for a in ("w1", "w2", "w3")] == [3, 0, 1]

    f1, f2 = facts(sink, "w1"), facts(sink, "w2")
    workdir = str(tmp_path / "work" / "w1")
    assert f1["name"] == "__main__" and f1["argv"] == ["train.py", "3"]
    assert f1["path0"] == workdir and f1["cwd"] == workdir
    assert f1["trial"] == "7" and f1["token"] is None
    assert f1["fresh_harness"] and f1["harness"] == str(REPO)
    assert f1["session"], "a trial leads its own session so its process group can be killed"
    assert f1["parent"] != os.getpid(), "forked by the warm-start server, not started cold"
    assert f1["random"] != f2["random"], "every fork reseeds random"
    assert sink.of("w1", "stderr") == ["to stderr"]
    err = sink.of("w3", "stderr")
    assert err[1].startswith("Traceback") and err[-1] == "RuntimeError: boom from the trial", err
    # the user's frames only, as `python3 train.py` shows them: no warm-start server, no runpy
    assert err[2].startswith('  File "') and "train.py" in err[2] and "<module>" in err[2], err
    assert not any("runpy" in ln or "_zygote" in ln for ln in err), err


def test_module_entrypoint_starts_warm(runtime: ProcessRuntime, sink: Sink, tmp_path: Path) -> None:
    tarball = make_tarball(
        tmp_path / "m.tar.gz",
        {"pkg/__init__.py": "", "pkg/main.py": FRESH_PY},
    )
    runtime.start(spec("m1", "python3 -m pkg.main 5"), tarball)
    assert wait_exited(runtime, "m1")["exit_code"] == 5
    f = facts(sink, "m1")
    assert f["name"] == "__main__" and f["argv"][1:] == ["5"]
    assert f["argv"][0].endswith(os.path.join("pkg", "main.py"))
    assert f["path0"] == str(tmp_path / "work" / "m1")


SLEEPER_PY = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"


def test_kill_a_warm_trial(runtime: ProcessRuntime, sink: Sink, tmp_path: Path) -> None:
    tarball = make_tarball(tmp_path / "m.tar.gz", {"sleep.py": SLEEPER_PY})
    runtime.start(spec("k", "python3 sleep.py"), tarball)
    sink.wait_for("k", "up")
    assert state(runtime, "k")["state"] == ReportedState.RUNNING
    runtime.kill("k")
    assert wait_exited(runtime, "k")["exit_code"] == -signal.SIGTERM


def test_a_dead_server_takes_its_trials_and_comes_back(
    runtime: ProcessRuntime, sink: Sink, tmp_path: Path
) -> None:
    tarball = make_tarball(tmp_path / "m.tar.gz", {"sleep.py": SLEEPER_PY, "train.py": FRESH_PY})
    runtime.start(spec("s1", "python3 sleep.py"), tarball)
    sink.wait_for("s1", "up")
    trial_pid = state(runtime, "s1")["pid"]
    server = runtime._warm._server  # type: ignore[union-attr]
    assert server is not None
    server.kill()
    assert wait_exited(runtime, "s1")["exit_code"] == -signal.SIGKILL
    end = time.monotonic() + 30
    while alive(trial_pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(trial_pid), "the trial outlived the warm-start server"
    runtime.start(spec("s2", "python3 train.py"), tarball)
    assert wait_exited(runtime, "s2")["exit_code"] == 0
    assert facts(sink, "s2")["parent"] != server.pid


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from pathlib import Path
    from agent.runtime import RuntimeContext
    from agent.runtime.process import ProcessRuntime
    from detlab.protocol import StartSpec

    work = Path(sys.argv[1])
    lines = []
    ctx = RuntimeContext(work_dir=work / "work", master_url="http://m:1", agent_id="x",
                         slots=[{"index": 0, "type": "cpu"}], log_sink=lambda *a: lines.append(a))
    rt = ProcessRuntime(ctx)
    spec = StartSpec.parse({"allocation_id": "o", "trial_id": 1, "experiment_id": 1,
                             "entrypoint": "python3 sleep.py"})
    t = threading.Thread(target=rt.start, args=(spec, Path(sys.argv[2])))
    t.start(); t.join()
    while not lines:
        time.sleep(0.01)
    print(rt.states()[0].pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_warm_trials_die_with_a_killed_agent(tmp_path: Path) -> None:
    tarball = make_tarball(tmp_path / "m.tar.gz", {"sleep.py": SLEEPER_PY})
    env = {**os.environ, "PATH": f"{PY}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path), str(tarball)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == -9, proc.stderr
    pid = int(proc.stdout.split()[0])
    end = time.monotonic() + 30
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(pid), "the warm trial outlived its agent"
