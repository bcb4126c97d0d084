"""Riding out a master (or database) outage: which failures are worth retrying, and for how long.

One mechanism for every client that must survive a master restart (the harness's calls above
all): `Session(outage_s=...)` retries a call marked safe to repeat (`GET`s, and writes the master
de-duplicates) with backoff while the master is unreachable or answers 5xx, until `outage_s`
seconds have passed; only then does the caller see the error.

`retry_call` is the one retry loop every detlab client uses (this outage budget, the metrics
shipper, the agent's calls), and `Backoff` the one delay sequence of loops that poll on their own.
Both stand on tenacity: its stop/wait/retry strategies replace six hand-written loops, and it is
pure Python without dependencies, so the Docker runtime injects it next to the harness.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import tenacity

from harness.api._errors import APIError, MasterUnreachable

logger = logging.getLogger("harness.api")

OUTAGE_ENV = "DET_MASTER_OUTAGE_S"
DEFAULT_OUTAGE_S = 120.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 5.0

T = TypeVar("T")


def outage_from_env(default: float = DEFAULT_OUTAGE_S) -> float:
    """`DET_MASTER_OUTAGE_S`: how long a trial's calls wait for a master that went away."""
    raw = os.environ.get(OUTAGE_ENV)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{OUTAGE_ENV} must be a number of seconds, not {raw!r}") from None
    if not value >= 0:  # also rejects NaN
        raise ValueError(f"{OUTAGE_ENV} must be >= 0, not {raw!r}")
    return value


def is_transient(err: BaseException) -> bool:
    """The master is away, its database is, or it is busy (429): worth another try. Other 4xx
    answers are the caller's mistake and never retried."""
    if isinstance(err, MasterUnreachable):
        return True
    return isinstance(err, APIError) and (err.status >= 500 or err.status == 429)


def next_delay(err: BaseException, delay: float) -> float:
    """The master's `Retry-After` when it sent one (capped), else our own backoff step."""
    after = getattr(err, "retry_after", None)
    if isinstance(after, int | float) and after > 0:
        return min(float(after), MAX_DELAY_S)
    return delay


class Backoff:
    """Capped exponential delays for loops that poll on their own (agent polls, log shipping,
    the preemption and searcher long polls): `first`, twice that, ... up to `cap`; `reset()`
    after a success. The same sequence `retry_call` waits (tenacity's `wait_exponential`)."""

    def __init__(self, first: float = 0.2, cap: float = 5.0, factor: float = 2.0) -> None:
        self.first = first
        self.cap = cap
        self._wait = tenacity.wait_exponential(multiplier=first, max=cap, exp_base=factor)
        self._attempt = 0

    def next(self) -> float:
        self._attempt += 1
        return float(self._wait(cast(Any, _AttemptState(self._attempt))))

    def reset(self) -> None:
        self._attempt = 0


class _AttemptState:
    """What tenacity's wait strategies read of a retry state: the attempt number."""

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number


class _Interrupted(Exception):
    """The retry loop's wait was cut short (the caller's `interrupt` event): stop now."""


def retry_call(
    call: Callable[[], T],
    *,
    retry_if: Callable[[BaseException], bool],
    first: float,
    cap: float,
    give_up: Callable[[float], bool] = lambda wait: False,
    wait_for: Callable[[BaseException, float], float] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    interrupt: threading.Event | None = None,
    on_retry: Callable[[BaseException, float, int], None] | None = None,
    on_give_up: Callable[[BaseException, int], None] | None = None,
    on_recovered: Callable[[int], None] | None = None,
) -> T:
    """The one retry loop (on tenacity): `call()` until it succeeds, retrying errors `retry_if`
    accepts after capped exponential waits (`first`, doubling, up to `cap`).

    `wait_for(err, step)` may replace a wait (a 503's Retry-After); `give_up(wait)` stops before
    a wait that would pass a deadline. An `interrupt` event makes the waits interruptible: set,
    the last error is raised at once. `on_retry(err, wait, failures)` runs before each wait,
    `on_give_up(err, failures)` when a call that failed before finally fails for good, and
    `on_recovered(failures)` when it succeeds after failing. The error raised is always the
    call's own (never tenacity's RetryError).
    """
    step = tenacity.wait_exponential(multiplier=first, max=cap)
    failures = 0
    last: BaseException | None = None

    def wait(state: tenacity.RetryCallState) -> float:
        delay = float(step(state))
        err = state.outcome.exception() if state.outcome else None
        return wait_for(err, delay) if wait_for and err is not None else delay

    def before_sleep(state: tenacity.RetryCallState) -> None:
        nonlocal failures, last
        failures += 1
        last = state.outcome.exception() if state.outcome else None
        if on_retry is not None and last is not None:
            on_retry(last, state.upcoming_sleep, failures)

    def pause(seconds: float) -> None:
        if interrupt is None:
            sleep(seconds)
        elif interrupt.wait(seconds):
            raise _Interrupted

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retry_if),
        wait=wait,
        stop=lambda state: (
            give_up(state.upcoming_sleep) or (interrupt is not None and interrupt.is_set())
        ),
        sleep=pause,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        result = retrying(call)
    except _Interrupted:
        assert last is not None
        raise last from None
    except BaseException as e:
        if failures and on_give_up is not None:
            on_give_up(e, failures)
        raise
    if failures and on_recovered is not None:
        on_recovered(failures)
    return result


def call_through_outage(
    call: Callable[[], T],
    outage_s: float,
    what: str,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()` until it answers; transient failures are retried for up to `outage_s` seconds."""
    deadline = clock() + outage_s

    def on_retry(err: BaseException, wait: float, failures: int) -> None:
        if failures == 1:
            logger.warning("%s: %s; retrying for up to %.0f s", what, err, outage_s)

    def on_give_up(err: BaseException, failures: int) -> None:
        logger.error("%s: gave up after %d retries over %.0f s: %s", what, failures, outage_s, err)

    def on_recovered(failures: int) -> None:
        logger.warning("%s: the master answered again after %d retries", what, failures)

    return retry_call(
        call,
        retry_if=is_transient,
        first=FIRST_DELAY_S,
        cap=MAX_DELAY_S,
        wait_for=next_delay,
        give_up=lambda wait: clock() + wait > deadline,
        sleep=sleep,
        on_retry=on_retry,
        on_give_up=on_give_up,
        on_recovered=on_recovered,
    )
