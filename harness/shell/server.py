"""A shell task's server: `python -m harness.shell.server`, started by the agent as the task's
owner. It listens on DET_TASK_PORT for the master's proxy and answers only requests carrying
the task's own token (`Authorization: token ...`, which only the proxy adds); each WebSocket
at `/proxy/<task id>/ws` gets its own pseudo-terminal running a login shell (or the command
asked for), as an ssh session would. See harness/shell/protocol.py for the messages.
"""

from __future__ import annotations

import asyncio
import fcntl
import hmac
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios

from aiohttp import WSMsgType, web

from harness.shell.protocol import (
    exit_message,
    exit_status,
    parse_command,
    parse_control,
    parse_size,
)


def set_size(fd: int, rows: int, cols: int) -> None:
    """The terminal's size; the kernel tells the foreground process (SIGWINCH)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _login_shell() -> list[str]:
    shell = os.environ.get("SHELL") or shutil.which("bash") or "/bin/sh"
    return [shell, "-l"] if os.path.basename(shell) in ("bash", "zsh", "sh") else [shell]


def _take_terminal() -> None:
    """preexec_fn: the pty (stdin) becomes the new session's controlling terminal, so Ctrl-C
    and job control reach the shell as they would in an ssh session."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def session(request: web.Request) -> web.StreamResponse:
    rows, cols = parse_size(request.query.get("rows"), request.query.get("cols"))
    argv = parse_command(request.query.get("cmd")) or _login_shell()
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    master, slave = os.openpty()
    set_size(slave, rows, cols)
    env = dict(os.environ)
    env["TERM"] = request.query.get("term") or "xterm-256color"
    for name in ("DET_SERVICE_TOKEN", "DET_TASK_PORT"):
        env.pop(name, None)  # the session's programs need neither
    try:
        proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_take_terminal,
            close_fds=True,
        )
    except OSError as e:
        os.close(master)
        os.close(slave)
        await ws.send_bytes(f"cannot start {argv[0]}: {e}\r\n".encode())
        await ws.send_str(exit_message(127))
        await ws.close()
        return ws
    os.close(slave)
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal has closed it
            data = b""
        if not data:
            loop.remove_reader(master)
        output.put_nowait(data)

    loop.add_reader(master, readable)

    async def to_client() -> None:
        while data := await output.get():
            await ws.send_bytes(data)

    async def from_client() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                os.write(master, msg.data)
            elif msg.type == WSMsgType.TEXT:
                size = parse_control(msg.data).get("resize")
                if size:
                    set_size(master, *size)
            else:
                break

    reader = asyncio.ensure_future(from_client())
    await to_client()  # until the terminal closes: the shell and what it started are gone
    code = exit_status(await loop.run_in_executor(None, proc.wait))
    reader.cancel()
    os.close(master)
    if not ws.closed:
        await ws.send_str(exit_message(code))
        await ws.close()
    if proc.poll() is None:  # the client left first: end its session
        os.killpg(proc.pid, signal.SIGHUP)
    return ws


@web.middleware
async def only_the_proxy(request: web.Request, handler):  # type: ignore[no-untyped-def]
    token = os.environ.get("DET_SERVICE_TOKEN", "")
    given = request.headers.get("Authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"token {token}".encode()):
        return web.json_response({"error": "the task's token is required"}, status=403)
    return await handler(request)


async def status(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


def main() -> int:
    task_id = os.environ.get("DET_TASK_ID", "")
    port = int(os.environ.get("DET_TASK_PORT") or 0)
    if not task_id or not port:
        print("harness.shell.server: DET_TASK_ID and DET_TASK_PORT must be set", file=sys.stderr)
        return 2
    app = web.Application(middlewares=[only_the_proxy])
    app.router.add_get(f"/proxy/{task_id}/ws", session)
    app.router.add_get(f"/proxy/{task_id}/status", status)
    print(f"shell server listening on port {port}", flush=True)
    web.run_app(app, host="0.0.0.0", port=port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
