"""The failed-login throttle (pure, with a fake clock) and its master.yaml keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import MasterConfigError, load_master_config
from master.login_throttle import LoginThrottle, ThrottleLimits, parse_limits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(users: int = 3, addresses: int = 5) -> tuple[LoginThrottle, Clock]:
    clock = Clock()
    return LoginThrottle(ThrottleLimits(users, addresses, window=60, lockout=120), clock), clock


def test_a_user_is_locked_after_the_limit_and_released_after_the_lockout() -> None:
    t, clock = make()
    assert t.failed("bob", "a1") == [] and t.failed("bob", "a2") == []
    started = t.failed("bob", "a3")
    assert [(s.kind, s.key, s.retry_after) for s in started] == [("user", "bob", 120)]
    clock.now += 100
    lock = t.check("bob", "a9")
    assert lock is not None and lock.kind == "user" and lock.retry_after == pytest.approx(20)
    assert t.check("alice", "a9") is None  # another user from another address
    clock.now += 21
    assert t.check("bob", "a9") is None


def test_failures_older_than_the_window_do_not_count() -> None:
    t, clock = make()
    t.failed("bob", "a")
    t.failed("bob", "a")
    clock.now += 61
    assert t.failed("bob", "a") == []
    assert t.check("bob", "a") is None


def test_success_clears_the_user_but_not_the_address() -> None:
    t, _ = make(users=3, addresses=5)
    t.failed("bob", "a")
    t.failed("bob", "a")
    t.succeeded("bob")
    assert t.failed("bob", "a") == [] and t.failed("bob", "a") == []  # the user count restarted
    started = t.failed("carol", "a")  # the address's fifth failure: none of its were cleared
    assert [s.kind for s in started] == ["address"]
    lock = t.check("dave", "a")
    assert lock is not None and lock.kind == "address" and lock.key == "a"


def test_limits_parse_from_master_yaml(tmp_path: Path) -> None:
    assert parse_limits(None) == ThrottleLimits()
    path = tmp_path / "master.yaml"
    path.write_text("login_throttle: {max_failures_per_user: 4, lockout: 30}\n")
    cfg = load_master_config(path)
    assert cfg.login_throttle == ThrottleLimits(max_failures_per_user=4, lockout=30.0)
    for bad, said in (
        ("{max_failures: 3}", "unknown key 'max_failures'"),
        ("{window: 0}", "window must be a positive number"),
        ("{max_failures_per_address: 2.5}", "must be a whole number"),
        ("[1]", "must be a mapping"),
    ):
        path.write_text(f"login_throttle: {bad}\n")
        with pytest.raises(MasterConfigError, match=said):
            load_master_config(path)
