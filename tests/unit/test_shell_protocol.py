"""What a shell's WebSocket carries (harness/shell/protocol.py), alone."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios

from harness.shell.protocol import (
    exit_message,
    exit_status,
    parse_command,
    parse_control,
    parse_size,
    resize_message,
)


def test_control_messages_round_trip() -> None:
    assert parse_control(resize_message(40, 120)) == {"resize": (40, 120)}
    assert parse_control(exit_message(3)) == {"exit": 3}


def test_nonsense_is_ignored_not_obeyed() -> None:
    for text in ("", "[]", "{", '{"resize": [0, 5]}', '{"resize": [true, 5]}', '{"exit": "1"}'):
        assert parse_control(text) == {}


def test_exit_status_as_a_shell_says_it() -> None:
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGINT) == 130
    assert exit_status(-signal.SIGKILL) == 137


def test_sizes_and_commands_from_the_url() -> None:
    assert parse_size("31", "97") == (31, 97)
    assert parse_size("x", "97") == (24, 80)
    assert parse_size(None, None) == (24, 80)
    assert parse_command(json.dumps(["sh", "-c", "exit 4"])) == ["sh", "-c", "exit 4"]
    assert parse_command("[]") is None
    assert parse_command("ls") is None


def test_the_client_takes_the_terminals_size_over_stale_columns_and_lines() -> None:
    # pytest-xdist workers (and some shells' rc files) export COLUMNS=80 LINES=24; the remote
    # shell must still get the terminal's real size, as ssh gives it.
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 31, 97, 0, 0))
        out = subprocess.run(
            [sys.executable, "-c", "from harness.shell.client import _size; print(_size())"],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "80", "LINES": "24"},
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        printed = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "(31, 97)" in printed, printed
