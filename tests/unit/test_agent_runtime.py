"""The process runtime with real processes: env, output, exit codes, kills, failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.runtime import RuntimeContext
from agent.runtime.process import ProcessRuntime, build_argv
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

TRAIN_PY = textwrap.dedent(
    """
    import json, os, sys
    import harness
    keys = ["DET_MASTER", "DET_AGENT_ID", "DET_TRIAL_ID", "DET_ALLOCATION_ID",
            "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "PYTHONPATH", "MY_VAR", "DET_AGENT_TOKEN"]
    env = {k: os.environ.get(k) for k in keys}
    env["executable"] = sys.executable
    env["harness"] = os.path.dirname(os.path.dirname(harness.__file__))
    env["cwd"] = os.getcwd()
    env["helper"] = open("data/helper.txt").read()
    print("ENV " + json.dumps(env))
    for i in range(200):
        print(f"out {i}")
    print("to stderr", file=sys.stderr)
    sys.exit(3)
    """
)


def test_env_output_and_exit_code(
    runtime: ProcessRuntime, sink: Sink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_AGENT_TOKEN", "cluster-secret")
    tarball = make_tarball(
        tmp_path / "model.tar.gz", {"train.py": TRAIN_PY, "data/helper.txt": "from the tarball"}
    )
    s = spec("a1", "python3 train.py", environment={"environment_variables": ["MY_VAR=hi=there"]})
    runtime.start(s, tarball)
    st = wait_exited(runtime, "a1")
    assert st["exit_code"] == 3 and st["error"] is None and isinstance(st["pid"], int)

    out = sink.of("a1", "stdout")
    env = json.loads(out[0].removeprefix("ENV "))
    assert out[1:] == [f"out {i}" for i in range(200)]
    assert sink.of("a1", "stderr") == ["to stderr"]
    assert env["DET_MASTER"] == "http://master.test:8080"
    assert env["DET_AGENT_ID"] == "agent-t"
    assert env["DET_TRIAL_ID"] == "7" and env["DET_ALLOCATION_ID"] == "a1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["MY_VAR"] == "hi=there"
    assert env["DET_AGENT_TOKEN"] is None, "the cluster token must not leak into trials"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
    assert env["harness"] == str(REPO)
    assert os.path.dirname(env["executable"]) == os.path.dirname(sys.executable)
    assert env["helper"] == "from the tarball"
    assert Path(env["cwd"]) == tmp_path / "work" / "a1"
    assert not (tmp_path / "work" / "a1").exists(), "the workdir is removed after exit"


def test_cuda_visible_devices_for_gpu_slots(tmp_path: Path, sink: Sink) -> None:
    ctx = RuntimeContext(
        work_dir=tmp_path,
        master_url="http://m:1",
        agent_id="g",
        slots=[{"index": i, "type": "gpu", "uuid": f"GPU-{i}"} for i in range(4)],
        log_sink=sink,
    )
    rt = ProcessRuntime(ctx)
    try:
        env = rt.build_env(spec("g1", "true", slot_indexes=[1, 3]), tmp_path)
        assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        per_device = {"environment_variables": {"cpu": ["A=cpu"], "cuda": ["A=cuda"]}}
        env = rt.build_env(spec("g2", "true", environment=per_device), tmp_path)
        assert env["A"] == "cuda"
    finally:
        rt.shutdown(timeout=1)


def test_shell_entrypoint_and_long_lines(runtime: ProcessRuntime, sink: Sink) -> None:
    long = "x" * 300_000
    cmd = "echo first && python3 -c \"print('x' * 300_000)\" && echo last >&2"
    runtime.start(spec("sh", cmd), None)
    assert wait_exited(runtime, "sh")["exit_code"] == 0
    assert sink.of("sh", "stdout") == ["first", long]
    assert sink.of("sh", "stderr") == ["last"]


def test_kill_escalates_to_sigkill_after_grace(runtime: ProcessRuntime, sink: Sink) -> None:
    code = textwrap.dedent(
        """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, ignoring it", flush=True))
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
        """
    )
    runtime.start(spec("k1", ["python3", "-c", code]), None)
    sink.wait_for("k1", "ready")
    assert state(runtime, "k1")["state"] == ReportedState.RUNNING
    t0 = time.monotonic()
    runtime.kill("k1")
    runtime.kill("k1")  # idempotent
    st = wait_exited(runtime, "k1")
    elapsed = time.monotonic() - t0
    assert st["exit_code"] == -9
    assert elapsed >= 0.9, "SIGKILL only after the 1 s grace"
    assert "got SIGTERM, ignoring it" in sink.of("k1", "stdout")
    assert any("SIGKILL" in ln for ln in sink.of("k1", "stderr"))


def test_kill_graceful(runtime: ProcessRuntime, sink: Sink) -> None:
    runtime.start(
        spec("k2", ["python3", "-c", "import time; print('up', flush=True); time.sleep(60)"]), None
    )
    sink.wait_for("k2", "up")
    runtime.kill("k2")
    assert wait_exited(runtime, "k2")["exit_code"] == -15  # SIGTERM ended it: no escalation
    assert not any("did not exit within" in ln for ln in sink.of("k2", "stderr"))


def test_missing_executable(runtime: ProcessRuntime, sink: Sink) -> None:
    runtime.start(spec("bad", "no-such-program-xyz --epochs 3"), None)
    st = wait_exited(runtime, "bad")
    assert st["exit_code"] == 127
    assert "no-such-program-xyz" in st["error"] and "not found" in st["error"]
    assert any("no-such-program-xyz" in ln for ln in sink.of("bad", "stderr"))


@pytest.mark.parametrize(
    "content",
    [b"this is not a tarball", "traversal"],
    ids=["garbage", "path-traversal"],
)
def test_bad_model_def(
    runtime: ProcessRuntime, sink: Sink, tmp_path: Path, content: bytes | str
) -> None:
    path = tmp_path / "bad.tar.gz"
    if content == "traversal":
        make_tarball(path, {"../escaped.txt": "gotcha"})
    else:
        path.write_bytes(content)  # type: ignore[arg-type]
    runtime.start(spec("m", "python3 -c pass"), path)
    st = wait_exited(runtime, "m")
    assert st["exit_code"] == 1
    assert "model definition" in st["error"]
    assert sink.of("m", "stderr")
    assert not (tmp_path / "work" / "escaped.txt").exists()


def test_empty_entrypoint(runtime: ProcessRuntime) -> None:
    runtime.start(spec("e", "   "), None)
    st = wait_exited(runtime, "e")
    assert st["exit_code"] == 1 and "entrypoint is empty" in st["error"]


def test_kill_before_start_and_idempotent_start(runtime: ProcessRuntime, sink: Sink) -> None:
    assert runtime.reserve("p")
    assert not runtime.reserve("p")
    assert state(runtime, "p") == {
        "id": "p",
        "state": ReportedState.RUNNING,
        "exit_code": None,
        "pid": None,
        "error": None,
        "cause": None,
    }
    runtime.kill("p")
    assert state(runtime, "p")["state"] == ReportedState.EXITED
    runtime.start(spec("p", "python3 -c 'print(1)'"), None)  # arrives late: must not run
    runtime.forget("p")
    assert runtime.states() == []
    runtime.start(spec("p", "python3 -c 'print(1)'"), None)  # a duplicate after forgetting
    assert runtime.states() == [] and sink.of("p", "stdout") == []


def test_forget_only_exited(runtime: ProcessRuntime, sink: Sink) -> None:
    runtime.start(
        spec("f", ["python3", "-c", "import time; print('up', flush=True); time.sleep(30)"]), None
    )
    sink.wait_for("f", "up")
    runtime.forget("f")
    assert state(runtime, "f")["state"] == ReportedState.RUNNING
    runtime.start(spec("f", "python3 -c pass"), None)  # idempotent while running
    assert len(runtime.states()) == 1
    runtime.changed.clear()
    runtime.kill("f")
    wait_exited(runtime, "f")
    assert runtime.changed.is_set()
    runtime.forget("f")
    assert runtime.states() == []


def test_build_argv() -> None:
    assert build_argv("python3 train.py --lr 0.1") == ["python3", "train.py", "--lr", "0.1"]
    assert build_argv("python3 'my script.py'") == ["python3", "my script.py"]
    assert build_argv("cd x && python3 t.py") == ["/bin/sh", "-c", "cd x && python3 t.py"]
    assert build_argv("FOO=1 python3 t.py") == ["/bin/sh", "-c", "FOO=1 python3 t.py"]
    assert build_argv(["a", "b c"]) == ["a", "b c"]
    with pytest.raises(ValueError):
        build_argv("")


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from agent.runtime import RuntimeContext
    from agent.runtime.process import ProcessRuntime

    lines = []
    ctx = RuntimeContext(work_dir=Path(sys.argv[1]), master_url="http://m:1", agent_id="x",
                         slots=[{"index": 0, "type": "cpu"}], log_sink=lambda *a: lines.append(a))
    rt = ProcessRuntime(ctx)
    # started from a short-lived thread, like the agent does
    import threading
    from detlab.protocol import StartSpec
    spec = StartSpec.parse({"allocation_id": "o", "trial_id": 1, "experiment_id": 1,
        "entrypoint": ["python3", "-c", "import time; print('up', flush=True); time.sleep(60)"]})
    t = threading.Thread(target=rt.start, args=(spec, None))
    t.start(); t.join()
    while not lines:
        time.sleep(0.01)
    print(rt.states()[0].pid, flush=True)
    time.sleep(0.3)
    assert rt.states()[0].state == "RUNNING", "the trial died with its launcher thread"
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_trials_die_with_a_killed_agent(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
    )
    assert proc.returncode == -9, proc.stderr
    pid = int(proc.stdout.split()[0])
    end = time.monotonic() + 30
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(pid), "the trial outlived its agent"
