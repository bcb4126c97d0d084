"""The idle rule (master/proxy/idle.py) alone: Determined's three notebook_idle_types, and a busy
kernel that always counts as use."""

from __future__ import annotations

import pytest

from master.proxy.idle import JupyterView, idle_for, in_use, shell_idle_for

NONE = JupyterView(kernels=(), terminals=0, last_activity=100.0)
IDLE_KERNEL = JupyterView(
    kernels=({"execution_state": "idle", "connections": 0},), terminals=0, last_activity=100.0
)
CONNECTED = JupyterView(
    kernels=({"execution_state": "idle", "connections": 1},), terminals=0, last_activity=100.0
)
BUSY = JupyterView(
    kernels=({"execution_state": "busy", "connections": 0},), terminals=0, last_activity=0.0
)
TERMINAL = JupyterView(kernels=(), terminals=1, last_activity=100.0)

TYPES = ("kernels_or_terminals", "kernel_connections", "activity")


@pytest.mark.parametrize("idle_type", TYPES)
def test_a_busy_kernel_is_always_use(idle_type: str) -> None:
    assert in_use(idle_type, BUSY)
    assert idle_for(idle_type, BUSY, now=1e9, since=0, last_in_use=0, proxy_last=0) == 0


def test_kernels_or_terminals() -> None:
    assert in_use("kernels_or_terminals", IDLE_KERNEL)
    assert in_use("kernels_or_terminals", TERMINAL)
    assert not in_use("kernels_or_terminals", NONE)


def test_kernel_connections() -> None:
    assert in_use("kernel_connections", CONNECTED)
    assert not in_use("kernel_connections", IDLE_KERNEL)


def test_idle_counts_from_the_last_use_or_the_start() -> None:
    kw = {"now": 500.0, "proxy_last": 450.0}
    assert idle_for("kernels_or_terminals", NONE, since=100, last_in_use=0, **kw) == 400
    assert idle_for("kernels_or_terminals", NONE, since=100, last_in_use=300, **kw) == 200


def test_activity_counts_jupyters_and_the_proxys() -> None:
    view = JupyterView(kernels=(), terminals=0, last_activity=420.0)
    assert idle_for("activity", view, now=500, since=100, last_in_use=0, proxy_last=0) == 80
    assert idle_for("activity", view, now=500, since=100, last_in_use=0, proxy_last=490) == 10


def test_a_shell_is_in_use_while_a_session_is_open() -> None:
    assert shell_idle_for(1, now=1e9, since=0, proxy_last=0) == 0
    assert shell_idle_for(0, now=500, since=100, proxy_last=450) == 50
    assert shell_idle_for(0, now=500, since=100, proxy_last=0) == 400


def test_a_tensorboard_is_idle_since_its_last_request_through_the_proxy() -> None:
    from master.proxy.idle import tensorboard_idle_for

    assert tensorboard_idle_for(now=100.0, since=10.0, proxy_last=0.0) == 90.0
    assert tensorboard_idle_for(now=100.0, since=10.0, proxy_last=95.0) == 5.0
    assert tensorboard_idle_for(now=100.0, since=100.0, proxy_last=0.0) == 0.0
