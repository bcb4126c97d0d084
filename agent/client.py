"""The agent's calls to the master, retried through outages.

The master can restart or vanish for a while; the agent must outlive that without crashing and
without flooding its log, so transient failures are retried with capped exponential backoff and
logged once per outage. Errors the master means (4xx) are raised at once: retrying cannot fix them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from harness.api import API_PREFIX, APIError, Session, retry_call
from harness.api import Backoff as Backoff  # the one delay sequence; agent.py and logs.py use it
from harness.api import is_transient as api_is_transient

log = logging.getLogger(__name__)

T = TypeVar("T")

# The long poll may hold the request up to `wait` seconds; allow this much on top before giving up.
POLL_SLACK_S = 15.0
DOWNLOAD_TIMEOUT_S = 300.0


def is_unavailable(err: BaseException) -> bool:
    """Whether the master (or its database) is away or busy, as opposed to failing on this
    request: only these are worth retrying the very same request for as long as it takes."""
    if isinstance(err, APIError):
        return err.status in (429, 502, 503, 504)
    return is_transient(err)


def is_transient(err: BaseException) -> bool:
    """Whether retrying later may succeed: network trouble, 5xx, 429, or a garbled reply."""
    if api_is_transient(err):  # the rule every detlab client shares (harness/api/_retry.py)
        return True
    return isinstance(err, ValueError)  # a 200 whose body is not JSON (proxy page, cut off)


class AgentClient:
    """poll / ship_logs / download_model_def for one agent, over the shared `Session`.

    `abort` ends every retry loop (shutdown): the call raises its last error instead of waiting.
    A call given a `deadline` (time.monotonic()) retries until then and ignores `abort`, so the
    agent's last poll during shutdown still gets its chance.
    """

    def __init__(
        self, session: Session, agent_id: str, abort: threading.Event | None = None
    ) -> None:
        self.session = session
        self.agent_id = agent_id
        self.abort = abort or threading.Event()
        self._base = f"/agents/{quote(agent_id, safe='')}"
        self._lock = threading.Lock()
        self._down_since: float | None = None

    @property
    def master_url(self) -> str:
        return self.session.master

    def poll(
        self,
        payload: dict[str, Any] | Callable[[], dict[str, Any]],
        *,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """POST /agents/{id}/poll; returns the reply ({"actions": [...], "poll_interval": s}).

        Given a function, each attempt sends what it builds then: a poll retried across a master
        outage must say what the agent runs *now*. A body built before an allocation started,
        re-sent to a restarted master that knows the allocation RUNNING, would read as "the
        agent no longer runs it" and cost its trial a restart.
        """
        build = payload if callable(payload) else (lambda: payload)

        def attempt() -> Any:
            body = build()
            timeout = float(body.get("wait") or 0) + POLL_SLACK_S
            return self.session.post(f"{self._base}/poll", json=body, timeout=timeout)

        reply = self._retry("poll", attempt, deadline)
        return reply if isinstance(reply, dict) else {}

    def interruption(self, notice: str) -> dict[str, Any]:
        """POST /agents/{id}/interruption: this spot/preemptible instance is going away."""
        reply = self._retry(
            "report interruption",
            lambda: self.session.post(f"{self._base}/interruption", json={"notice": notice}),
            time.monotonic() + 60.0,
        )
        return reply if isinstance(reply, dict) else {}

    def ship_logs(self, lines: list[dict[str, Any]], *, deadline: float | None = None) -> None:
        """POST /agents/{id}/logs with one batch of log lines."""
        # A 500 is raised to the shipper rather than retried here: it may be this batch that
        # fails (a line the master cannot store), and the shipper isolates such a line.
        self._retry(
            "ship logs",
            lambda: self.session.post(f"{self._base}/logs", json={"logs": lines}),
            deadline,
            retry_if=is_unavailable,
        )

    def log_tail(self, allocation_id: str, limit: int = 2000) -> list[dict[str, Any]]:
        """GET the newest trial-output lines this agent shipped for an allocation (oldest
        first): {stream, timestamp, line} each. Retried for up to 30 s."""
        path = f"{self._base}/allocations/{quote(allocation_id, safe='')}/logs"
        reply = self._retry(
            "read log tail",
            lambda: self.session.get(path, params={"limit": limit}),
            time.monotonic() + 30.0,
        )
        logs = reply.get("logs") if isinstance(reply, dict) else None
        return logs if isinstance(logs, list) else []

    def download_model_def(self, url: str, *, deadline: float | None = None) -> bytes:
        """GET the experiment's model definition (.tar.gz bytes) from `model_def_url`."""
        path = api_path(url)
        return self._retry(
            "download model definition",
            lambda: self.session.request("GET", path, timeout=DOWNLOAD_TIMEOUT_S).content,
            deadline,
        )

    def _retry(
        self,
        what: str,
        fn: Callable[[], T],
        deadline: float | None,
        retry_if: Callable[[BaseException], bool] = is_transient,
    ) -> T:
        # With a deadline: the last wait is cut to it, and `abort` is ignored; without one, an
        # abort raises the last error at once, even mid-wait.
        def wait_for(err: BaseException, delay: float) -> float:
            return delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic()))

        def give_up(wait: float) -> bool:
            return deadline is not None and deadline - time.monotonic() <= 0

        result = retry_call(
            fn,
            retry_if=lambda e: isinstance(e, Exception) and retry_if(e),
            first=0.2,
            cap=5.0,
            wait_for=wait_for,
            give_up=give_up,
            interrupt=self.abort if deadline is None else None,
            on_retry=lambda err, wait, failures: self._note_down(what, err),
        )
        self._note_up()
        return result

    def _note_down(self, what: str, err: BaseException) -> None:
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
        if first:
            log.warning("master unreachable (%s): %s; retrying in the background", what, err)

    def _note_up(self) -> None:
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            log.info("master reachable again after %.1f s", time.monotonic() - since)


def api_path(url: str) -> str:
    """A model_def_url (absolute, or a path with or without /api/v1) as a Session path.

    The host part is ignored on purpose: the agent reaches the master at the URL it was given.
    """
    parts = urlsplit(url)
    path = parts.path or "/"
    if path.startswith(API_PREFIX + "/"):
        path = path[len(API_PREFIX) :]
    if parts.query:
        path += "?" + parts.query
    return path
