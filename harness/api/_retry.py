"""Riding out a master (or database) outage: which failures are worth retrying, and for how long.

One mechanism for every client that must survive a master restart (the harness's calls above
all): `Session(outage_s=...)` retries a call marked safe to repeat (`GET`s, and writes the master
de-duplicates) with backoff while the master is unreachable or answers 5xx, until `outage_s`
seconds have passed; only then does the caller see the error.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

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
    delay = FIRST_DELAY_S
    failures = 0
    while True:
        try:
            result = call()
        except (MasterUnreachable, APIError) as e:
            wait = next_delay(e, delay)
            if not is_transient(e) or clock() + wait > deadline:
                if failures:
                    logger.error(
                        "%s: gave up after %d retries over %.0f s: %s", what, failures, outage_s, e
                    )
                raise
            if failures == 0:
                logger.warning("%s: %s; retrying for up to %.0f s", what, e, outage_s)
            failures += 1
            sleep(wait)
            delay = min(delay * 2, MAX_DELAY_S)
            continue
        if failures:
            logger.warning("%s: the master answered again after %d retries", what, failures)
        return result
