"""Helpers for the TUI tests: an app on fixed data, and waiting for the views to settle."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual.pilot import Pilot

from tui.app import DetTUI
from tui.fake import NOW, FakeClient
from tui.widgets.chart import MetricChart
from tui.widgets.table import ResourceTable


def fake_app(start: tuple[str, int | None] = ("experiments", None), **kw: Any) -> DetTUI:
    api = kw.pop("api", None) or FakeClient()
    app = DetTUI(api, clock=lambda: NOW, start=start, interval=60.0, **kw)
    # a fixed utilisation history, so GPU sparklines are the same in every run
    for a in api.agents:
        for s in a["slots"]:
            for i in range(20):
                u = (s["stats"] or {}).get("util_percent") or 0
                app.history.add(f"{a['id']}/{s['index']}", max(0.0, u - 30 + (i * 7 % 31)))
    return app


def settled(app: DetTUI) -> bool:
    screen = app.screen
    if any(not t.loaded for t in screen.query(ResourceTable)):
        return False
    return all(c.message != "loading…" for c in screen.query(MetricChart))


async def settle(pilot: Pilot, timeout: float = 30.0) -> None:
    """Wait until every table on the screen has data (and the chart has drawn); fail otherwise."""
    end = time.monotonic() + timeout
    await pilot.pause()
    while not settled(pilot.app):  # type: ignore[arg-type]
        if time.monotonic() >= end:
            raise AssertionError(f"the screen did not settle within {timeout}s")
        await asyncio.sleep(0.05)
    await pilot.pause()
    await pilot.pause()


async def wait_until(pilot: Pilot, pred: Any, timeout: float = 30.0, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        await asyncio.sleep(0.05)
        await pilot.pause()
    # What the app told its user (an action's answer or error) is often the cause.
    toasts = getattr(pilot.app, "toast_log", [])[-5:]
    raise AssertionError(f"timed out waiting for {what or pred}; last toasts: {toasts}")


def sync(fn: Any) -> Any:
    """Run an async test with asyncio.run (no pytest-asyncio needed)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def prompt_open(app: DetTUI) -> bool:
    """Whether the view's prompt line (`:`, `/`, pool, weight, save) is open."""
    from tui.widgets.commandline import CommandLine

    return any(c.is_open for c in app.screen.query(CommandLine))
