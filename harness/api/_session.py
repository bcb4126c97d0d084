"""A thin, thread-safe HTTP session to the master: base URL, bearer token, JSON, error mapping."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import requests

from harness.api._errors import MasterUnreachable, error_for
from harness.api._retry import call_through_outage

API_PREFIX = "/api/v1"


class Session:
    """Speaks to one master with one token. Safe to share between threads.

    `path` arguments are relative to `/api/v1` (e.g. `"/experiments/3"`).

    With `outage_s` > 0 (the harness: `DET_MASTER_OUTAGE_S`), calls that are safe to repeat
    (GETs, and writes passed `retry=True` because the master de-duplicates them) ride out a
    master restart or a database outage for that long (`harness.api._retry`).
    """

    def __init__(
        self,
        master: str,
        token: str | None = None,
        timeout: float = 30.0,
        outage_s: float = 0.0,
    ) -> None:
        self.master = master.rstrip("/")
        if "://" not in self.master:
            self.master = "http://" + self.master
        self.token = token
        self.timeout = timeout
        self.outage_s = outage_s
        self._local = threading.local()

    def _http(self) -> requests.Session:
        # requests.Session is not guaranteed thread-safe: one per thread, each keeps its pool.
        s = getattr(self._local, "http", None)
        if s is None:
            s = requests.Session()
            self._local.http = s
        return s

    def url(self, path: str) -> str:
        return f"{self.master}{API_PREFIX}{path}"

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        data: Any = None,
        files: Any = None,
        timeout: float | None = None,
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
        retry: bool | None = None,
    ) -> requests.Response:
        """One call; `retry` (default: only for GET) marks it safe to repeat through an outage."""
        if retry is None:
            retry = method.upper() == "GET"

        def once() -> requests.Response:
            return self._request_once(
                method,
                path,
                json=json,
                params=params,
                data=data,
                files=files,
                timeout=timeout,
                stream=stream,
                headers=headers,
            )

        if not retry or self.outage_s <= 0:
            return once()
        return call_through_outage(once, self.outage_s, f"{method.upper()} {path}")

    def _request_once(
        self,
        method: str,
        path: str,
        *,
        json: Any,
        params: Mapping[str, Any] | None,
        data: Any,
        files: Any,
        timeout: float | None,
        stream: bool,
        headers: Mapping[str, str] | None,
    ) -> requests.Response:
        hdrs = dict(headers or {})
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        try:
            resp = self._http().request(
                method,
                self.url(path),
                json=json,
                params=params,
                data=data,
                files=files,
                timeout=timeout if timeout is not None else self.timeout,
                stream=stream,
                headers=hdrs,
            )
        except requests.RequestException as e:
            raise MasterUnreachable(
                f"cannot reach the master at {self.master}: {_reason(e)}"
            ) from e
        if resp.status_code >= 400:
            raise _to_error(resp)
        return resp

    def get(self, path: str, **kw: Any) -> Any:
        return _loads(self.request("GET", path, **kw).content)

    def post(self, path: str, json: Any = None, **kw: Any) -> Any:
        resp = self.request("POST", path, json=json if json is not None else {}, **kw)
        return resp.json() if resp.content else {}

    def patch(self, path: str, json: Any = None, **kw: Any) -> Any:
        return self.request("PATCH", path, json=json or {}, **kw).json()

    def delete(self, path: str, **kw: Any) -> Any:
        resp = self.request("DELETE", path, **kw)
        return resp.json() if resp.content else {}


def _reason(e: requests.RequestException) -> str:
    """A short cause instead of urllib3's multi-line repr (CLI users read this)."""
    text = str(e)
    if isinstance(e, requests.Timeout):
        return "timed out"
    for needle, short in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "unknown host"),
        ("nodename nor servname", "unknown host"),
        ("No route to host", "no route to host"),
        ("Connection reset", "connection reset"),
        ("RemoteDisconnected", "connection closed by the master"),
    ):
        if needle in text:
            return short
    return text


try:  # orjson decodes large listings (a 10,000-job queue) several times faster
    from orjson import loads as _orjson_loads

    def _loads(content: bytes) -> Any:
        return _orjson_loads(content)

except ImportError:  # the harness inside a bare container image: the stdlib is enough
    import json

    def _loads(content: bytes) -> Any:
        return json.loads(content)


def _to_error(resp: requests.Response) -> Exception:
    message, code, path = f"HTTP {resp.status_code}", "error", None
    try:
        body = resp.json()
        err = body.get("error", {}) if isinstance(body, dict) else {}
        message = err.get("message") or message
        code = err.get("code") or code
        path = err.get("path")
    except ValueError:
        text = resp.text.strip()
        if text:
            message = f"HTTP {resp.status_code}: {text[:300]}"
    err = error_for(resp.status_code, message, code, path)
    err.retry_after = _retry_after(resp.headers.get("Retry-After"))
    return err


def _retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (the master sends seconds, never an HTTP date)."""
    try:
        return float(value) if value else None
    except ValueError:
        return None
