"""`o` on a running shell in det-tui's tasks view, in a real terminal (tmux) against a real
master and agent: det-tui steps aside for `det shell open`, the remote shell takes the keys, and
det-tui comes back when it exits (issue 38)."""

from __future__ import annotations

import os
import shlex

import pytest

from tests.cluster import BIN, Cluster, wait_for
from tests.tui.tmux import Terminal, require_tmux

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.tmux]


@pytest.mark.timeout(300)
def test_o_opens_a_running_shell_in_the_terminal_and_comes_back(cluster: Cluster) -> None:
    require_tmux()
    shell = cluster.det_json("shell", "start", "-d")
    shell_id = str(shell["id"])

    def running() -> bool:
        task = next(t for t in cluster.get("/tasks")["tasks"] if t["id"] == shell_id)
        return (task.get("allocation") or {}).get("state") == "RUNNING"

    wait_for(running, 120, what="the shell to run")
    env = cluster.env()
    exports = " ".join(
        f"{k}={shlex.quote(env[k])}"
        for k in ("DET_MASTER", "DET_USER", "DET_PASSWORD", "DET_CONFIG_DIR")
    )
    path = shlex.quote(f"{BIN}:{os.environ.get('PATH', '')}")
    term = Terminal(f"env {exports} PATH={path} PS1='lab$ ' bash --norc --noprofile")
    try:
        term.shows("lab$")
        term.type("det-tui")
        term.keys("Enter")
        term.shows("agents 1/1", 120)
        term.command("tasks")
        term.shows(shell_id[:8], 60)
        term.keys("o")
        term.gone("WAITING FOR", 60)  # det-tui stepped aside

        def remote_echo() -> bool:
            # Keys typed before det-tui has handed the terminal over (its input thread may still
            # read them) never reach the remote shell: type again until the remote shell answers.
            term.type("echo opened-$((6*7))")
            term.keys("Enter")
            try:
                term.shows("opened-42", 3)
            except AssertionError:
                return False
            return True

        wait_for(remote_echo, 60, what="the remote shell to run our command")
        term.type("exit 0")
        term.keys("Enter")
        term.shows(f"shell {shell_id[:8]} closed (exit 0)", 60)  # det-tui is back
        term.shows("WAITING FOR")
        term.keys("q")
        term.shows("lab$")
        assert "Traceback" not in term.screen()
    finally:
        term.close()
    # the shell task stays up between sessions, as `det shell open` leaves it
    assert [s["state"] for s in cluster.det_json("shell", "list")] == ["ACTIVE"]
    cluster.det("shell", "kill", shell_id)
