"""Failed-login throttling per username and per client address (pure: an injectable clock).

Only failures count, so a test suite or a lab that logs in often from one address never trips it.
After `max_failures_per_user` failures for one username (or `max_failures_per_address` from one
address) within `window` seconds, every attempt for that username (or from that address) is
refused for `lockout` seconds, the right password included: otherwise a guesser would learn
which guess was right. A successful login clears its username's failures, never its address's
(a guesser must not reset the address count by logging into an account of their own).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

# Entries kept at most per kind (usernames, addresses); past it, stale ones are dropped first.
MAX_KEYS = 100_000


@dataclass(frozen=True)
class ThrottleLimits:
    max_failures_per_user: int = 10
    max_failures_per_address: int = 50
    window: float = 300.0  # seconds in which failures add up
    lockout: float = 300.0  # seconds every attempt is refused once a limit is reached


def parse_limits(raw: Any) -> ThrottleLimits:
    """`login_throttle` of master.yaml (a mapping of ThrottleLimits' keys); ValueError if bad."""
    if raw is None:
        return ThrottleLimits()
    if isinstance(raw, ThrottleLimits):
        return raw
    if not isinstance(raw, dict):
        raise ValueError("login_throttle must be a mapping")
    names = {f.name for f in fields(ThrottleLimits)}
    for key, value in raw.items():
        if key not in names:
            raise ValueError(f"login_throttle: unknown key {key!r} (known: {sorted(names)})")
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            raise ValueError(f"login_throttle.{key} must be a positive number, got {value!r}")
        if key.startswith("max_") and int(value) != value:
            raise ValueError(f"login_throttle.{key} must be a whole number, got {value!r}")
    kwargs: dict[str, Any] = {
        k: (int(v) if k.startswith("max_") else float(v)) for k, v in raw.items()
    }
    return ThrottleLimits(**kwargs)


@dataclass(frozen=True)
class Lockout:
    """Why an attempt is refused: which key is locked and for how many more seconds."""

    kind: str  # "user" | "address"
    key: str
    retry_after: float


class _Counter:
    """Failure times of one kind of key, and the keys locked until when."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failures: dict[str, deque[float]] = {}
        self.locked_until: dict[str, float] = {}

    def locked(self, key: str, now: float) -> float | None:
        until = self.locked_until.get(key)
        if until is None:
            return None
        if until <= now:
            del self.locked_until[key]
            return None
        return until - now

    def fail(self, key: str, now: float, limits: ThrottleLimits) -> bool:
        """Record a failure; True if it locks the key."""
        times = self.failures.setdefault(key, deque())
        while times and times[0] <= now - limits.window:
            times.popleft()
        times.append(now)
        if len(times) >= self.limit:
            del self.failures[key]
            self.locked_until[key] = now + limits.lockout
            return True
        return False

    def prune(self, now: float, limits: ThrottleLimits) -> None:
        if len(self.failures) + len(self.locked_until) <= MAX_KEYS:
            return
        for key in [k for k, t in self.failures.items() if not t or t[-1] <= now - limits.window]:
            del self.failures[key]
        for key in [k for k, until in self.locked_until.items() if until <= now]:
            del self.locked_until[key]
        if len(self.failures) > MAX_KEYS:  # a flood of fresh keys: forget failures, keep locks
            self.failures.clear()


class LoginThrottle:
    def __init__(self, limits: ThrottleLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        self._users = _Counter(limits.max_failures_per_user)
        self._addresses = _Counter(limits.max_failures_per_address)

    def check(self, username: str, address: str) -> Lockout | None:
        """Whether an attempt may be tried at all (before looking at the password)."""
        now = self._clock()
        with self._lock:
            wait = self._addresses.locked(address, now)
            if wait is not None:
                return Lockout("address", address, wait)
            wait = self._users.locked(username, now)
            if wait is not None:
                return Lockout("user", username, wait)
        return None

    def failed(self, username: str, address: str) -> list[Lockout]:
        """Record a failed attempt; the lockouts it starts (empty if none)."""
        now = self._clock()
        started = []
        with self._lock:
            if self._users.fail(username, now, self.limits):
                started.append(Lockout("user", username, self.limits.lockout))
            if self._addresses.fail(address, now, self.limits):
                started.append(Lockout("address", address, self.limits.lockout))
            self._users.prune(now, self.limits)
            self._addresses.prune(now, self.limits)
        return started

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._users.failures.pop(username, None)
