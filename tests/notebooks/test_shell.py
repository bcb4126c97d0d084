"""`det shell start` in a pseudo-terminal, as a user at a keyboard drives it (issue 38): the
remote shell sees our window's size and its change, Ctrl-C interrupts the remote command (not
det), and det exits with the remote shell's status, as ssh does."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from tests.cluster import BIN, Cluster, wait_for

pytestmark = pytest.mark.integration


class Terminal:
    """A process on the slave side of a pty whose controlling terminal it is."""

    def __init__(self, argv: list[str], env: dict[str, str], rows: int, cols: int) -> None:
        self.master, slave = os.openpty()
        self.resize(rows, cols, fd=slave)
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.seen = b""

    def resize(self, rows: int, cols: int, fd: int | None = None) -> None:
        size = struct.pack("HHHH", rows, cols, 0, 0)
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ, size)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, pattern: str, timeout: float = 60) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern.encode())
        while time.monotonic() < deadline:
            found = regex.search(self.seen)
            if found:
                self.seen = self.seen[found.end() :]
                return found
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the process closed the terminal
                    break
        raise AssertionError(f"no {pattern!r} on the terminal; it shows: {self.seen[-2000:]!r}")


def test_a_shell_in_a_terminal(cluster: Cluster) -> None:
    env = {**cluster.env(), "TERM": "xterm"}
    term = Terminal([str(BIN / "det"), "shell", "start"], env, rows=31, cols=97)
    try:
        term.expect(r"Launched shell \(id: ([0-9a-f-]+)\)")
        term.type("stty size; echo ready-$((6*7))\n")
        term.expect(r"31 97\s+ready-42")

        term.resize(40, 120)  # det gets SIGWINCH and tells the remote terminal
        wait_for(
            lambda: term.type("stty size\n") or term.expect(r"40 120", timeout=2),
            30,
            what="the new size remotely",
        )

        term.type("sleep 31; echo not-interrupted\n")
        # The key goes once the remote `sleep` runs (the test runs as root on the agent's machine,
        # so it sees the shell's processes), not after a guessed delay.
        wait_for(
            lambda: (
                subprocess.run(["pgrep", "-f", "^sleep 31$"], capture_output=True).returncode == 0
            ),
            30,
            what="the remote sleep to start",
        )
        term.type("\x03")  # Ctrl-C goes to the remote command, not to det
        term.type("echo after-$?\n")
        term.expect(r"after-130")

        term.type("id -u; exit 3\n")
        uid = int(term.expect(r"[\r\n](\d+)\r\n").group(1))
        assert uid != 0  # its owner's Unix identity, not the agent's
        assert term.proc.wait(30) == 3  # the remote shell's status is det's
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
        os.close(term.master)

    shells = cluster.det_json("shell", "list")
    assert [s["state"] for s in shells] == ["ACTIVE"]  # the task stays up between sessions
    # A command instead of a shell, as `ssh host CMD`: its output and status.
    run = cluster.det(
        "shell", "open", shells[0]["id"], "--", "sh", "-c", "echo hi; exit 4", check=False
    )
    assert run.returncode == 4 and "hi" in run.stdout
    cluster.det("shell", "kill", shells[0]["id"])
    wait_for(
        lambda: cluster.det_json("shell", "list")[0]["state"] == "CANCELED", 60, what="CANCELED"
    )
