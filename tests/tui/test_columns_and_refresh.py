"""Pilot tests: columns sized to their content, the ASHA rung, and a queue that is not rebuilt
while its jobs do not change (but whose WAIT column still ticks)."""

from __future__ import annotations

from tui.app import DetTUI
from tui.fake import NOW, FakeClient
from tui.screens.queue import QueueScreen
from tui.screens.trial import TrialScreen
from tui.widgets.table import ResourceTable

from .helpers import settle, sync, wait_until

LONG_HPARAMS = {
    "learning_rate": 5e-05,
    "warmup_steps": 500,
    "optimizer": "adamw",
    "dropout": 0.1,
}


def line_text(table: ResourceTable, y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


@sync
async def test_hparams_and_metric_names_get_the_room_the_screen_has() -> None:
    api = FakeClient()
    api.trials[101]["hparams"] = LONG_HPARAMS
    for e in api.experiments:
        e["searcher_metric"] = "validation_top5_accuracy_macro"
    app = DetTUI(api, clock=lambda: NOW, start=("exp", 1), interval=60.0)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        row = next(y for y in range(1, 5) if "101" in line_text(table, y))
        text = line_text(table, row)
        # every hparam whole (no `5…`), though longer than the column's 60-cell cap
        assert "learning_rate=5.00e-05" in text and "dropout=0.1000" in text, text
        assert "…" not in text
        await pilot.press("escape")  # the experiments list: the METRIC column
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        assert "validation_top5_accuracy_macro ↓" in line_text(table, 1), line_text(table, 1)
    narrow = DetTUI(api, clock=lambda: NOW, start=("exp", 1), interval=60.0)
    async with narrow.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        table = narrow.screen.query_one(ResourceTable)
        # no room: HPARAMS keeps its cap and the line is cut by the screen, not mid-column
        assert table._widths[-1] == 60


@sync
async def test_the_rung_of_an_asha_trial_in_the_experiment_and_trial_views() -> None:
    app = DetTUI(FakeClient(), clock=lambda: NOW, start=("exp", 2), interval=60.0)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        rung = [c.key for c in table.columns].index("rung")
        assert {r.key: r.cells[rung] for r in table.rows if r.key in ("201", "202", "203")} == {
            "201": "3",
            "202": "2",
            "203": "1",
        }
        assert "RUNG" in line_text(table, 0)
        app.screen.query_one(ResourceTable).move_to_key("202")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen), what="trial view")
        info = app.screen.query_one("#trial-info")
        await wait_until(pilot, lambda: "rung 2/3" in str(info.render()), what="rung in header")
    app = DetTUI(FakeClient(), clock=lambda: NOW, start=("exp", 1), interval=60.0)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)  # a search without rungs: the column is blank
        table = app.screen.query_one(ResourceTable)
        rung = [c.key for c in table.columns].index("rung")
        assert {r.cells[rung] for r in table.rows} == {""}


@sync
async def test_an_unchanged_queue_is_not_rebuilt_but_its_wait_column_ticks() -> None:
    api = FakeClient()
    api.user["admin"] = True
    now = [NOW]
    app = DetTUI(api, clock=lambda: now[0], start=("queue", None), interval=60.0)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, QueueScreen)
        table = screen.query_one(ResourceTable)
        builds, rows = len(screen.build_seconds), table.rows
        wait_col = [c.key for c in table.columns].index("wait")
        queued = next(i for i, r in enumerate(table.view) if r.data["state"] == "QUEUED")
        before = line_text(table, queued + 1)
        for _ in range(3):  # the app polls the master again: the same jobs
            skipped = screen.skipped
            app.refresh_cluster(now=True)
            await wait_until(pilot, lambda s=skipped: screen.skipped > s, what="a skipped build")
        assert len(screen.build_seconds) == builds and table.rows is rows  # nothing rebuilt
        now[0] += 3600 * 24  # a day later, still the same jobs: the wait shown moves on
        app.refresh_cluster(now=True)
        await wait_until(pilot, lambda: line_text(table, queued + 1) != before, what="tick")
        cell = table.view[queued].cells[wait_col]
        assert cell.text(now[0]) in line_text(table, queued + 1)
        assert table.rows is rows
        # a job changes on the master: the rows are rebuilt
        await pilot.press("j", "plus")
        await wait_until(pilot, lambda: len(screen.build_seconds) > builds, what="a rebuild")
        await wait_until(pilot, lambda: table.rows is not rows, what="new rows shown")
