"""A real terminal for the det-tui tests: a tmux server of their own, keys in, screen out.

Every wait is for what the screen shows (no fixed sleeps), so the tests pass on a loaded machine.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import uuid

import pytest

from tests.cluster import wait_for

# The program runs under `sh -c '...; echo "[exit-status=N]"'`: tmux 3.3a sometimes marks a pane
# dead (its terminal closed) and never fills in `pane_dead_status` (seen with det-tui quitting:
# about one run in two, the status stayed empty for good), so the program's status is read from
# the line its shell prints instead.
_EXIT_MARK = re.compile(r"\[exit-status=(\d+)\]")


def require_tmux() -> None:
    if shutil.which("tmux") is None:
        pytest.fail(
            "tmux is not installed (apt-get install tmux), or set DET_SKIP_TMUX_TESTS=1 to leave "
            "this test out",
            pytrace=False,
        )


class Terminal:
    """One tmux session on a server of its own (-L): other tmux sessions on the machine neither
    see nor touch it. The pane stays after its program exits, so a crash shows its traceback."""

    def __init__(self, command: str, width: int = 140, height: int = 35) -> None:
        self.socket = f"detlab-test-{uuid.uuid4().hex[:8]}"
        self.session = f"dettui-{uuid.uuid4().hex[:8]}"
        self.tmux("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height))
        self.tmux("set-option", "-t", self.session, "remain-on-exit", "on")
        self.tmux("resize-window", "-t", self.session, "-x", str(width), "-y", str(height))
        wrapped = f'{command}; echo "[exit-status=$?]"'
        self.tmux("respawn-pane", "-k", "-t", self.session, f"sh -c {shlex.quote(wrapped)}")

    def tmux(self, *args: str, check: bool = True) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        ).stdout

    def close(self) -> None:
        self.tmux("kill-server", check=False)

    def dead(self) -> str | None:
        """The program's exit status once it has exited (its shell has printed it and ended),
        else None."""
        flag = self.tmux("display-message", "-p", "-t", self.session, "#{pane_dead}").strip()
        if flag != "1":
            return None
        text = self.tmux("capture-pane", "-p", "-S", "-200", "-t", self.session)
        found = _EXIT_MARK.findall(text)
        return found[-1] if found else None

    def screen(self) -> str:
        text = self.tmux("capture-pane", "-p", "-t", self.session)
        if (status := self.dead()) is not None and status != "0":
            raise AssertionError(f"the program exited with status {status}:\n{text}")
        return text

    def shows(self, text: str, timeout: float = 60) -> str:
        try:
            return wait_for(
                lambda: text in (s := self.screen()) and s, timeout, 0.2, what=repr(text)
            )
        except TimeoutError:
            raise AssertionError(f"{text!r} not on the screen:\n{self.screen()}") from None

    def gone(self, text: str, timeout: float = 60) -> None:
        try:
            wait_for(lambda: text not in self.screen(), timeout, 0.2, what=f"{text!r} to go")
        except TimeoutError:
            raise AssertionError(f"{text!r} still on the screen:\n{self.screen()}") from None

    def bottom(self) -> str:
        lines = [ln.strip() for ln in self.screen().splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    def keys(self, *keys: str) -> None:
        """tmux key names (Enter, Escape, C-c) or single characters."""
        self.tmux("send-keys", "-t", self.session, *keys)

    def type(self, text: str) -> None:
        """Literal text, in one burst."""
        self.tmux("send-keys", "-t", self.session, "-l", text)

    def command(self, text: str) -> None:
        # `:` and the command in one burst, as a fast typist (or a loaded machine's lagging
        # screen) delivers them: nothing waits for the prompt to appear, and no key may be lost.
        # The caller then waits for the screen the command opens.
        self.type(f":{text}")
        self.keys("Enter")

    def prompt_closed(self) -> None:
        try:
            wait_for(lambda: not self.bottom().startswith(":"), 60, 0.2, what="the prompt to close")
        except TimeoutError:
            raise AssertionError(f"the prompt stayed open:\n{self.screen()}") from None

    def exits(self, timeout: float = 60) -> str:
        return str(wait_for(self.dead, timeout, 0.2, what="the program to exit"))
