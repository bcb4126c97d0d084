"""`retry_call` and `Backoff` (harness/api/_retry.py): the one retry loop and delay sequence of
every detlab client, on tenacity. Each caller's semantics: what is retried, how long it waits,
when it gives up and what it reports."""

from __future__ import annotations

import threading
import time

import pytest

from harness.api import Backoff, MasterUnreachable, retry_call
from harness.api._errors import APIError


def flaky(failures: list[BaseException], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = []

    def call() -> str:
        calls.append(time.monotonic())
        if failures:
            raise failures.pop(0)
        return result

    return call, calls


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(first=1.0, cap=10.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    b.reset()
    assert b.next() == 1.0
    slow = Backoff(first=0.25, cap=1.0, factor=1.5)
    assert [slow.next() for _ in range(5)] == [0.25, 0.375, 0.5625, 0.84375, 1.0]


def test_retried_with_capped_exponential_waits_then_recovered() -> None:
    call, _ = flaky([MasterUnreachable("down")] * 5)
    waits: list[float] = []
    seen: list[tuple[str, float, int]] = []
    recovered: list[int] = []
    out = retry_call(
        call,
        retry_if=lambda e: isinstance(e, MasterUnreachable),
        first=0.5,
        cap=3.0,
        sleep=waits.append,
        on_retry=lambda e, w, n: seen.append((str(e), w, n)),
        on_recovered=recovered.append,
    )
    assert out == "ok"
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [n for _, _, n in seen] == [1, 2, 3, 4, 5] and recovered == [5]


def test_an_error_not_retried_is_raised_as_itself_at_once() -> None:
    call, calls = flaky([APIError(400, "bad")])
    with pytest.raises(APIError) as info:
        retry_call(call, retry_if=lambda e: False, first=0.1, cap=1.0, sleep=lambda s: None)
    assert info.value.status == 400 and len(calls) == 1


def test_give_up_raises_the_calls_own_error_and_reports_it() -> None:
    call, calls = flaky([MasterUnreachable(f"down {i}") for i in range(10)])
    gave_up: list[tuple[str, int]] = []
    with pytest.raises(MasterUnreachable, match="down 3"):
        retry_call(
            call,
            retry_if=lambda e: True,
            first=1.0,
            cap=1.0,
            give_up=lambda wait: len(calls) > 3,  # a deadline reached after the 4th call
            sleep=lambda s: None,
            on_give_up=lambda e, n: gave_up.append((str(e), n)),
        )
    assert len(calls) == 4 and gave_up == [("down 3", 3)]


def test_wait_for_replaces_a_wait() -> None:
    err = APIError(503, "busy")
    err.retry_after = 0.7
    call, _ = flaky([err, MasterUnreachable("x")])
    waits: list[float] = []
    retry_call(
        call,
        retry_if=lambda e: True,
        first=0.2,
        cap=5.0,
        wait_for=lambda e, step: getattr(e, "retry_after", None) or step,
        sleep=waits.append,
    )
    assert waits == [0.7, 0.4]


def test_an_interrupt_ends_the_wait_and_raises_the_last_error_at_once() -> None:
    stop = threading.Event()
    call, calls = flaky([MasterUnreachable(f"down {i}") for i in range(100)])
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(MasterUnreachable):
        retry_call(call, retry_if=lambda e: True, first=30.0, cap=30.0, interrupt=stop)
    # The 30 s wait was cut short by the event: no further call was made after it.
    assert time.monotonic() - started < 10 and len(calls) == 1
    with pytest.raises(MasterUnreachable):  # already set: the first failure is the last
        retry_call(
            flaky([MasterUnreachable("x")])[0],
            retry_if=lambda e: True,
            first=1,
            cap=1,
            interrupt=stop,
        )


def _unreachable_client(abort: threading.Event | None = None):  # type: ignore[no-untyped-def]
    from agent.client import AgentClient
    from harness.api import Session
    from tests.cluster import free_port

    return AgentClient(Session(f"http://127.0.0.1:{free_port()}", "t"), "a1", abort)


def test_the_agents_calls_retry_until_their_deadline_ignoring_abort() -> None:
    abort = threading.Event()
    abort.set()  # shutting down: a call with a deadline still gets until then
    client = _unreachable_client(abort)
    started = time.monotonic()
    with pytest.raises(MasterUnreachable):
        client.ship_logs([], deadline=started + 1.5)
    took = time.monotonic() - started
    assert 1.4 <= took < 10, took  # the last wait is cut to the deadline, not the 5 s cap


def test_the_agents_calls_stop_mid_wait_on_abort() -> None:
    abort = threading.Event()
    client = _unreachable_client(abort)
    threading.Timer(1.0, abort.set).start()
    started = time.monotonic()
    with pytest.raises(MasterUnreachable):
        client.download_model_def("/experiments/1/model_def")
    assert time.monotonic() - started < 10
