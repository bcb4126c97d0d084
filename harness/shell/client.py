"""`det shell start|open`'s side: the user's terminal bridged to a shell task's WebSocket
through the master's proxy, as ssh would: raw mode (so Ctrl-C and every key go to the remote
shell), the window's size on start and on every SIGWINCH, and the remote exit status as ours.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import termios
import threading
import tty
from typing import Any
from urllib.parse import urlencode

import websocket

from harness.shell.protocol import parse_control, resize_message

LOST = 255  # ssh's status when the connection, not the remote command, failed


def _size() -> tuple[int, int]:
    # The terminal's own size first, as ssh does: shutil.get_terminal_size prefers $COLUMNS and
    # $LINES, which go stale at the first resize and which some environments export (pytest-xdist
    # workers export 80x24), so the remote shell stayed 24x80 in a 31x97 terminal.
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            size = os.get_terminal_size(stream.fileno())
        except (AttributeError, ValueError, OSError):
            continue
        if size.lines > 0 and size.columns > 0:
            return size.lines, size.columns
    fallback = shutil.get_terminal_size((80, 24))
    return fallback.lines, fallback.columns


def session_url(ws_base: str, command: list[str] | None) -> str:
    rows, cols = _size()
    query: dict[str, Any] = {"rows": rows, "cols": cols, "term": os.environ.get("TERM", "xterm")}
    if command:
        query["cmd"] = json.dumps(command)
    return f"{ws_base}ws?{urlencode(query)}"


def run_session(url: str, token: str, command: list[str] | None = None) -> int:
    """Bridge stdin/stdout to the shell at `url` (ws://.../proxy/ID/) until it exits."""
    try:
        ws = websocket.create_connection(
            session_url(url, command), header=[f"Authorization: Bearer {token}"], timeout=30
        )
    except (OSError, websocket.WebSocketException) as e:
        sys.stderr.write(f"cannot open the shell: {e}\n")
        return LOST
    ws.settimeout(None)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    sent_lock = threading.Lock()

    def send(data: bytes | str) -> None:
        with sent_lock:
            if isinstance(data, str):
                ws.send(data)
            else:
                ws.send_binary(data)

    def on_winch(_sig: int, _frame: Any) -> None:
        try:
            send(resize_message(*_size()))
        except (OSError, websocket.WebSocketException):
            pass

    def pump_keys() -> None:
        try:
            while data := os.read(stdin, 4096):
                send(data)
        except (OSError, websocket.WebSocketException):
            return

    old_winch = signal.signal(signal.SIGWINCH, on_winch)
    if saved is not None:
        tty.setraw(stdin, termios.TCSANOW)  # keep what was typed ahead, as ssh does
    threading.Thread(target=pump_keys, name="keys", daemon=True).start()
    code = LOST
    try:
        code = _receive(ws)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, old_winch)
        try:
            ws.close()
        except (OSError, websocket.WebSocketException):
            pass
    if code == LOST:
        sys.stderr.write("the connection to the shell was lost\n")
    return code


def _receive(ws: websocket.WebSocket) -> int:
    """Write the shell's output until it says how it exited (LOST if the socket ends first)."""
    out = sys.stdout.buffer
    try:
        while True:
            opcode, data = ws.recv_data()
            if opcode == websocket.ABNF.OPCODE_BINARY:
                out.write(data)
                out.flush()
            elif opcode == websocket.ABNF.OPCODE_TEXT:
                control = parse_control(data.decode("utf-8", "replace"))
                if "exit" in control:
                    return int(control["exit"])
            else:
                return LOST
    except (OSError, websocket.WebSocketException):
        return LOST
