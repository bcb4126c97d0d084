"""tests/cluster.py's `wait_for`: it polls through errors until its deadline, except a process
that has exited, which no amount of waiting brings back: that fails at once, with its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster import Cluster, ProcessExited, wait_for


def test_errors_are_polled_through_until_the_condition_holds() -> None:
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return True

    assert wait_for(flaky, timeout=30, interval=0.01) is True
    assert len(calls) == 3


def test_an_exited_process_ends_the_wait_on_the_first_poll() -> None:
    calls: list[int] = []

    def exited() -> bool:
        calls.append(1)
        raise ProcessExited("master exited: boom")

    with pytest.raises(ProcessExited, match="boom"):
        wait_for(exited, timeout=120, interval=0.01)
    assert calls == [1]


def test_a_master_that_exits_on_start_fails_with_its_log_not_a_timeout(tmp_path: Path) -> None:
    # A master.yaml that is not YAML: det-master refuses it and exits. Before, start_master kept
    # polling the dead process for its full 120 s and then raised TimeoutError.
    c = Cluster(tmp_path, None, master_yaml="scheduler: [unclosed\n")
    try:
        with pytest.raises(ProcessExited, match="master exited") as info:
            c.start_master()
    finally:
        c.stop()
    assert "master.yaml" in str(info.value) or "yaml" in str(info.value).lower()
