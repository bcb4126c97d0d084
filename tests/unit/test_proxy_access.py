"""The proxy's rule (master/proxy/access.decide) and its header hygiene, alone."""

from __future__ import annotations

import pytest

from master.errors import Forbidden, NotFound, Unauthenticated
from master.proxy.access import Facts, NotReady, decide
from master.proxy.activity import ActivityBook
from master.proxy.server import _cookies_without_session, same_origin
from master.services.task.notebooks import parse_duration
from master.states import TaskState, TaskType

RUNNING = Facts(
    user_id=7,
    admin=False,
    task_type=TaskType.NOTEBOOK,
    task_state=TaskState.ACTIVE,
    owner_id=7,
    host="10.0.0.5",
    port=40000,
    token="svc",
)


def with_(**changes: object) -> Facts:
    return Facts(**{**RUNNING.__dict__, **changes})  # type: ignore[arg-type]


def test_the_owner_reaches_a_running_notebook() -> None:
    assert decide("t", RUNNING) == ("10.0.0.5", "svc")


def test_an_admin_reaches_anyones() -> None:
    assert decide("t", with_(user_id=1, admin=True)) == ("10.0.0.5", "svc")


@pytest.mark.parametrize(
    ("facts", "error"),
    [
        (with_(user_id=None), Unauthenticated),  # 401 before anything else is said
        (with_(user_id=None, task_type=None), Unauthenticated),
        (with_(user_id=8), Forbidden),  # 403: another user's
        (with_(task_type=None), NotFound),
        (with_(task_type=TaskType.COMMAND), NotFound),  # commands and trials serve nothing
        (with_(task_state=TaskState.CANCELED), NotFound),
        (with_(port=None), NotReady),  # scheduled, not listening yet: 503
        (with_(host=None), NotReady),
    ],
)
def test_everyone_else_is_told_why(facts: Facts, error: type) -> None:
    answer = decide("t", facts)
    assert isinstance(answer, error), answer


def test_the_session_cookie_never_reaches_the_task() -> None:
    cookie = "_xsrf=abc; detlab_session=SECRET; username-x=y"
    assert _cookies_without_session(cookie, "detlab_session") == "_xsrf=abc; username-x=y"
    assert _cookies_without_session(None, "detlab_session") == ""


def test_same_origin() -> None:
    assert same_origin("http://master:9000", "master:9000")
    assert not same_origin("http://evil.example", "master:9000")
    assert not same_origin(None, "master:9000")


def test_activity_counts_sockets_and_times() -> None:
    book = ActivityBook()
    assert book.last("t") == book.started
    book.touch("t", now=book.started + 5)
    assert book.last("t") == book.started + 5
    book.opened("t")
    book.opened("t")
    book.closed("t")
    assert book.open_sockets("t") == 1
    book.closed("t")
    assert book.open_sockets("t") == 0


def test_durations_in_determineds_forms() -> None:
    assert parse_duration("30m", "p") == 1800
    assert parse_duration("2h", "p") == 7200
    assert parse_duration(45, "p") == 45
    assert parse_duration(None, "p") is None
    for bad in ("soon", "-5m", 0, True):
        with pytest.raises(Exception, match="p must"):
            parse_duration(bad, "p")
