"""A refresh that was overtaken by a newer one never undoes it, however late its answer lands.

The interleaving that once left the queue view showing a job where it was before `K` moved it
(tests/tui/test_views.py's move test, once in a full run): a cluster fetch reads the queue, passes
its own "was I superseded?" check, and is descheduled before it posts; the key's refresh then
fetches and shows the new order; the old answer lands last. These tests hold the first answer at
exactly that point (in `post_message`, after the check) to make the interleaving certain.
"""

from __future__ import annotations

import threading
from typing import Any

from textual.message import Message

from tui.app import ClusterFetched, DetTUI
from tui.fake import FakeClient
from tui.screens.common import ViewScreen
from tui.screens.queue import QueueScreen
from tui.widgets.table import ResourceTable

from .helpers import fake_app, settle, sync, wait_until

SIZE = (140, 40)


class Hold:
    """Wraps a `post_message`: the first message of `kind` posted from a worker thread waits there
    until `release()` (the test's hand on the scheduler)."""

    def __init__(self, post: Any, kind: type[Message]) -> None:
        self.post, self.kind = post, kind
        self.armed = False
        self.holding = threading.Event()
        self.released = threading.Event()
        self.delivered = threading.Event()

    def __call__(self, message: Message) -> bool:
        held = False
        if (
            self.armed
            and isinstance(message, self.kind)
            and threading.current_thread() is not threading.main_thread()
            and not self.holding.is_set()
        ):
            held = True
            self.holding.set()
            self.released.wait(30)
        ok = self.post(message)
        if held:
            self.delivered.set()
        return bool(ok)


def keys(table: ResourceTable) -> list[str]:
    return [r.key for r in table.view]


async def quiet(pilot: Any, app: DetTUI) -> None:
    """Every worker done and every message handled (what a stale answer would trigger, too)."""
    await wait_until(pilot, lambda: all(w.is_finished for w in app.workers), what="workers done")
    await pilot.pause()
    await wait_until(pilot, lambda: all(w.is_finished for w in app.workers), what="workers done")
    await pilot.pause()


@sync
async def test_a_late_cluster_answer_does_not_undo_a_move() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("queue", None), api=api)
    hold = Hold(app.post_message, ClusterFetched)
    app.post_message = hold  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        assert keys(table) == ["2", "3", "1"]
        await pilot.press("j")  # job 3
        hold.armed = True
        app.refresh_cluster(now=True)  # reads the queue before the move...
        await wait_until(pilot, hold.holding.is_set, what="the first answer held")
        await pilot.press("K")  # ...the move, and its own refresh, overtake it
        await wait_until(pilot, lambda: keys(table)[0] == "3", what="the move shown")
        hold.released.set()
        await wait_until(pilot, hold.delivered.is_set, what="the old answer delivered")
        await quiet(pilot, app)
        assert keys(table) == ["3", "2", "1"]
        assert app.cluster is not None and app.cluster.pools is not None
        assert [j["job_id"] for j in app.cluster.pools[0]["jobs"]][:1] == ["3"]


@sync
async def test_a_late_row_build_does_not_undo_a_newer_one() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, QueueScreen)
        table = screen.query_one(ResourceTable)
        hold = Hold(screen.post_message, ViewScreen.Fetched)
        screen.post_message = hold  # type: ignore[method-assign]
        hold.armed = True
        # The view skips rebuilding rows that did not change: forget what it shows, so this
        # refresh builds rows (from the queue before the move) as one after a change would.
        screen._shown = None
        screen.refresh_data(now=True)  # builds rows from the queue before the move...
        await wait_until(pilot, hold.holding.is_set, what="the first rows held")
        await pilot.press("j", "K")  # ...the move's rows overtake them
        await wait_until(pilot, lambda: keys(table)[0] == "3", what="the move shown")
        hold.released.set()
        await wait_until(pilot, hold.delivered.is_set, what="the old rows delivered")
        await quiet(pilot, app)
        assert keys(table) == ["3", "2", "1"]
