"""Smoke test: det-tui in a real terminal (tmux) against a real master; keys in, screen out.

Every step waits for the screen to show what it expects (no fixed sleeps), so it passes on a
loaded machine. tmux missing fails the test; DET_SKIP_TMUX_TESTS=1 leaves it out on purpose.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid

import pytest

from tests.cluster import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tmux]


# A tmux server of its own (-L): other tmux sessions on the machine neither see nor touch it.
SOCKET = f"detlab-test-{uuid.uuid4().hex[:8]}"


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=check, timeout=30
    ).stdout


def test_det_tui_in_tmux(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("tmux") is None:
        pytest.fail(
            "tmux is not installed (apt-get install tmux), or set DET_SKIP_TMUX_TESTS=1 to leave "
            "this test out",
            pytrace=False,
        )
    from tests.fixtures.scripted_config import make_config
    from tests.tui.test_live import client, model_tar

    exp = client(cluster).create_experiment(
        make_config(cluster.ckpt_dir, batches=5, name="smoke-exp", hparams={"log_lines": 3}),
        model_tar(),
    )
    session = f"dettui-{uuid.uuid4().hex[:8]}"
    env = cluster.env()
    exports = " ".join(f"{k}={env[k]}" for k in ("DET_USER", "DET_PASSWORD", "DET_CONFIG_DIR"))
    cmd = f"env {exports} {sys.executable} -m tui -m {cluster.url} exps"
    tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "35", cmd)
    # Keep the pane after det-tui exits, so that a crash shows its traceback and exit status.
    tmux("set-option", "-t", session, "remain-on-exit", "on")
    tmux("resize-window", "-t", session, "-x", "140", "-y", "35", check=False)

    def dead() -> str | None:
        """det-tui's exit status once it has exited, else None (also while tmux has marked the
        pane dead but not yet filled in how it ended)."""
        out = tmux(
            "display-message",
            "-p",
            "-t",
            session,
            "#{pane_dead}|#{pane_dead_status}|#{pane_dead_signal}",
        )
        flag, status, signal = (out.strip().split("|") + ["", ""])[:3]
        if flag != "1":
            return None
        return status or (f"signal {signal}" if signal else None)

    def screen() -> str:
        text = tmux("capture-pane", "-p", "-t", session)
        if (status := dead()) is not None and status != "0":
            raise AssertionError(f"det-tui exited with status {status}:\n{text}")
        return text

    def shows(text: str, timeout: float = 60) -> str:
        try:
            return wait_for(lambda: text in (s := screen()) and s, timeout, 0.2, what=repr(text))
        except TimeoutError:
            raise AssertionError(f"{text!r} not on the screen:\n{screen()}") from None

    def gone(text: str, timeout: float = 60) -> None:
        try:
            wait_for(lambda: text not in screen(), timeout, 0.2, what=f"{text!r} to go")
        except TimeoutError:
            raise AssertionError(f"{text!r} still on the screen:\n{screen()}") from None

    def bottom() -> str:
        lines = [ln.strip() for ln in screen().splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def command(text: str) -> None:
        # `:` and the command in one burst, as a fast typist (or a loaded machine's lagging
        # screen) delivers them: nothing waits for the prompt to appear, and no key may be lost.
        # The caller then waits for the screen the command opens.
        tmux("send-keys", "-t", session, "-l", f":{text}")
        tmux("send-keys", "-t", session, "Enter")

    def prompt_closed() -> None:
        try:
            wait_for(lambda: not bottom().startswith(":"), 60, 0.2, what="the prompt to close")
        except TimeoutError:
            raise AssertionError(f"the prompt stayed open:\n{screen()}") from None

    try:
        shows("smoke-exp")
        shows("agents 1/1")
        shows("slots 0/1", 180)  # the 5-batch experiment has finished and freed its slot
        out = shows("queued 0")
        assert "detlab" in out
        command("gpu")
        out = shows("agent-1")
        assert "GPUs and slots" in out
        command(f"exp {exp['id']}")
        shows(f"Experiment {exp['id']}")
        prompt_closed()
        tmux("send-keys", "-t", session, "?")
        shows("everywhere")
        tmux("send-keys", "-t", session, "Escape")
        gone("everywhere")
        command("queue")
        shows("pools:")
        tmux("send-keys", "-t", session, "-l", "3")  # the experiments list (a view key)
        shows("PROGRESS")
        tmux("send-keys", "-t", session, "q")
        assert wait_for(dead, 60, 0.2, what="det-tui to quit") == "0", screen()
    finally:
        tmux("kill-server", check=False)
