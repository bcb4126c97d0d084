"""The proxy's listener: aiohttp on its own port and thread, beside waitress.

Every request to `/proxy/<task_id>/...` is authorized (access.py, in a worker thread: it reads
the database), then carried to the task's agent with the user's credentials taken out and the
task's own token put in (`Authorization: token ...`, Jupyter's form). HTTP bodies stream both
ways; a WebSocket is bridged message by message. Each request and message marks the task
active (activity.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from flask import Flask
from multidict import CIMultiDict

from master.errors import APIError, Forbidden
from master.proxy.access import Target, authorize
from master.proxy.activity import ActivityBook

log = logging.getLogger(__name__)

# Not forwarded upstream: hop-by-hop headers, the user's own credentials (the task gets its
# own token instead), and the browser's origin (the proxy checks it; Jupyter would compare it
# with the upstream Host and refuse).
_DROP_UP = frozenset(
    h.lower()
    for h in (
        "Host", "Authorization", "Connection", "Keep-Alive", "Proxy-Authorization", "TE",
        "Trailer", "Transfer-Encoding", "Upgrade", "Origin", "Referer", "Content-Length",
        "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Extensions",
        "Sec-WebSocket-Protocol",
    )
)  # fmt: skip
_DROP_DOWN = frozenset(
    h.lower()
    for h in ("Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Content-Encoding")
)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SMALL_BODY = 256 * 1024  # answered in one piece; larger ones stream
AUTH_CACHE_S = 2.0  # an authorization is reused this long (a revoked token: at most this late)


def _cookies_without_session(cookie: str | None, session_cookie: str) -> str:
    """The Cookie header minus detlab's session (the task must never see it)."""
    if not cookie:
        return ""
    parts = [c.strip() for c in cookie.split(";")]
    return "; ".join(p for p in parts if p and not p.startswith(session_cookie + "="))


def same_origin(origin: str | None, host: str | None) -> bool:
    """True when a browser's Origin names the host:port it sent the request to."""
    if not origin or not host:
        return False
    return urlsplit(origin).netloc.lower() == host.lower()


class ProxyServer:
    """One aiohttp listener in its own thread and event loop."""

    def __init__(self, flask_app: Flask, activity: ActivityBook, session_cookie: str) -> None:
        self._flask = flask_app
        self.activity = activity
        self._session_cookie = session_cookie
        self._cache: dict[tuple[str, str, str], tuple[float, Target]] = {}
        self._loop = asyncio.new_event_loop()
        self._client: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle --

    def start(self, host: str, port: int) -> int:
        """Listen (blocking until bound); returns the port."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._listen(host, port))
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                failed.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        threading.Thread(target=run, name="proxy", daemon=True).start()
        ready.wait()
        if failed:
            raise failed[0]
        return self.port

    async def _listen(self, host: str, port: int) -> None:
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/proxy/{task_id}/{tail:.*}", self.handle)
        app.router.add_route("*", "/proxy/{task_id}", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # port 0 picked one
        self._client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            # Big reads: a download is copied in 1 MiB pieces, not aiohttp's default 64 KiB
            # (bench/proxy_overhead: the 100 MB download's throughput).
            read_bufsize=1 << 20,
        )

    def stop(self) -> None:
        async def close() -> None:
            if self._client is not None:
                await self._client.close()
            if self._runner is not None:
                await self._runner.cleanup()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- requests --

    async def _target(self, request: web.Request, task_id: str) -> Target:
        auth = request.headers.get("Authorization", "")
        cookie = request.headers.get("Cookie", "")
        key = (task_id, auth, cookie)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        loop = asyncio.get_running_loop()
        target = await loop.run_in_executor(
            None, authorize, self._flask, task_id, auth or None, cookie or None
        )
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (now + AUTH_CACHE_S, target)
        return target

    async def handle(self, request: web.Request) -> web.StreamResponse:
        task_id = request.match_info["task_id"]
        try:
            target = await self._target(request, task_id)
            # A cookie rides along on any site's request: only the master's own pages (the
            # same origin) may change things or open a socket with it.
            unsafe = request.method not in _SAFE_METHODS or _is_websocket(request)
            if (
                target.by_cookie
                and unsafe
                and not same_origin(request.headers.get("Origin"), request.host)
            ):
                raise Forbidden("a cross-site request with the session cookie")
        except APIError as e:
            return web.json_response(
                {"error": {"code": e.code, "message": str(e)}},
                status=e.status,
                headers={"Retry-After": "1"} if e.status == 503 else None,
            )
        self.activity.touch(task_id)
        headers = self._upstream_headers(request, target)
        url = f"http://{_host(target.host)}:{target.port}{request.path_qs}"
        if _is_websocket(request):
            return await self._websocket(request, target, url, headers)
        return await self._http(request, url, headers)

    def _upstream_headers(self, request: web.Request, target: Target) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_UP}
        headers.pop("Cookie", None)
        cookie = _cookies_without_session(request.headers.get("Cookie"), self._session_cookie)
        if cookie:
            headers["Cookie"] = cookie
        headers["Authorization"] = f"token {target.token}"
        headers["X-Forwarded-Proto"] = request.scheme
        return headers

    async def _http(
        self, request: web.Request, url: str, headers: dict[str, str]
    ) -> web.StreamResponse:
        assert self._client is not None
        body: Any = request.content if request.body_exists else None
        try:
            upstream = await self._client.request(
                request.method, url, headers=headers, data=body, allow_redirects=False
            )
        except aiohttp.ClientConnectorError as e:  # still starting (or gone): retry shortly
            return web.json_response(
                {"error": {"code": "not_ready", "message": f"the task does not answer yet: {e}"}},
                status=503,
                headers={"Retry-After": "1"},
            )
        except aiohttp.ClientError as e:
            return web.json_response(
                {"error": {"code": "bad_gateway", "message": f"the task's answer broke: {e}"}},
                status=502,
            )
        async with upstream:
            down = CIMultiDict(
                (k, v) for k, v in upstream.headers.items() if k.lower() not in _DROP_DOWN
            )
            if "Content-Encoding" in upstream.headers:  # passed through as it came
                down["Content-Encoding"] = upstream.headers["Content-Encoding"]
            size = upstream.content_length
            if size is not None and size <= SMALL_BODY:  # one read, one write: most API calls
                body = await upstream.read()
                return web.Response(
                    status=upstream.status, reason=upstream.reason, headers=down, body=body
                )
            out = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=down)
            if upstream.content_length is not None:
                out.content_length = upstream.content_length
            await out.prepare(request)
            async for chunk in upstream.content.iter_any():  # whatever has arrived
                await out.write(chunk)
            await out.write_eof()
            return out

    async def _websocket(
        self, request: web.Request, target: Target, url: str, headers: dict[str, str]
    ) -> web.StreamResponse:
        assert self._client is not None
        protocols = [
            p.strip()
            for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
            if p.strip()
        ]
        try:
            up = await self._client.ws_connect(
                url, headers=headers, protocols=protocols, max_msg_size=0, autoping=True
            )
        except (aiohttp.ClientError, aiohttp.WSServerHandshakeError) as e:
            status = getattr(e, "status", 502) or 502
            return web.json_response(
                {"error": {"code": "upstream", "message": f"the task refused the socket: {e}"}},
                status=status if 400 <= status < 600 else 502,
            )
        down = web.WebSocketResponse(
            protocols=[up.protocol] if up.protocol else (), max_msg_size=0, autoping=True
        )
        await down.prepare(request)
        tid = target.task_id
        self.activity.opened(tid)
        try:
            await asyncio.gather(
                _pump(down, up, lambda: self.activity.touch(tid)),
                _pump(up, down, lambda: self.activity.touch(tid)),
            )
        finally:
            self.activity.closed(tid)
            await up.close()
            await down.close()
        return down


async def _pump(src: Any, dst: Any, touch: Callable[[], None]) -> None:
    """Carry messages one way until either side closes."""
    async for msg in src:
        touch()
        if dst.closed:
            break
        if msg.type == aiohttp.WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == aiohttp.WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        else:
            break
    if not dst.closed:
        await dst.close()


def _is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
