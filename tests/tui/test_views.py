"""Pilot tests of every view on fixed data (a fake client): keys, permissions, 404 states."""

from __future__ import annotations

import pytest

from tui.app import DetTUI, parse_args
from tui.fake import FakeClient
from tui.screens.common import Confirm, Help
from tui.screens.experiment import ExperimentScreen
from tui.screens.logs import LogsScreen
from tui.screens.queue import QueueScreen
from tui.screens.trial import SERIES_NOT_AVAILABLE, TrialScreen
from tui.widgets.chart import MetricChart
from tui.widgets.logview import LogView
from tui.widgets.table import ResourceTable

from .helpers import fake_app, prompt_open, settle, sync, wait_until

SIZE = (140, 40)


def queue_order(api: FakeClient, pool: str = "default") -> list[str]:
    return [j["job_id"] for p in api.pools if p["name"] == pool for j in p["jobs"]]


@sync
async def test_queue_priority_and_move_keys_change_the_queue() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        assert [r.key for r in table.view] == ["2", "3", "1"]
        await pilot.press("j")  # job 3 (priority 42)
        assert table.current.key == "3"
        await pilot.press("plus")
        await wait_until(pilot, lambda: ("update_job", ("3",), {"priority": 41}) in api.calls)
        await pilot.press("K")
        await wait_until(pilot, lambda: queue_order(api)[0] == "3", what="job 3 first")
        await wait_until(pilot, lambda: [r.key for r in table.view][0] == "3", what="redrawn")
        assert table.current.key == "3"  # the cursor follows its row
        await pilot.press("J")
        await wait_until(pilot, lambda: queue_order(api) == ["2", "3", "1"], what="moved back")
        await pilot.press("minus")
        await wait_until(pilot, lambda: ("update_job", ("3",), {"priority": 42}) in api.calls)
        assert any("moved up" in m for m, _ in app.toast_log)


@sync
async def test_bulk_marks_and_pool_change() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        await pilot.press("space", "space")  # marks jobs 2 and 3
        assert table.marked == {"2", "3"}
        await pilot.press("plus")
        await wait_until(
            pilot,
            lambda: {c[1][0] for c in api.calls if c[0] == "update_job"} == {"2", "3"},
            what="both updated",
        )
        await pilot.press("P")
        assert prompt_open(app)
        await pilot.press(*"a100", "enter")
        await wait_until(pilot, lambda: set(queue_order(api, "a100")) >= {"2", "3"})


@sync
async def test_kill_asks_first() -> None:
    api = FakeClient()
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("j")  # job 3, alice's own
        await pilot.press("x")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        assert not isinstance(app.screen, Confirm)
        assert not [c for c in api.calls if c[0] == "kill"]
        await pilot.press("x", "y")
        await wait_until(pilot, lambda: ("kill", (3,), {}) in api.calls)
        await wait_until(pilot, lambda: any("killed experiment 3" in m for m, _ in app.toast_log))


@sync
async def test_actions_on_other_users_jobs_are_not_offered() -> None:
    api = FakeClient()  # alice, not an admin; job 2 belongs to bob
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert screen.query_one(ResourceTable).current.key == "2"
        assert screen.check_action("kill", ()) is False
        assert screen.check_action("raise_priority", ()) is False
        await pilot.press("x", "plus")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm)
        assert not [c for c in api.calls if c[0] in ("kill", "update_job")]
        await pilot.press("j")
        assert screen.check_action("kill", ()) is True


@sync
async def test_readonly_hides_every_action() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("queue", None), api=api, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for action in ("kill", "pause", "raise_priority", "move_ahead", "change_pool"):
            assert app.screen.check_action(action, ()) is False
        await pilot.press("x", "plus", "K")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm)
        assert not [c for c in api.calls if c[0] in ("kill", "update_job")]


@sync
async def test_queue_not_available_on_an_old_master() -> None:
    app = fake_app(("queue", None), api=FakeClient(queue=False))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        assert "not available on this master" in table.empty
        assert app.screen.check_action("kill", ()) is False
        assert app.cluster.summary["queued"] is None


@sync
async def test_chart_not_available_on_an_old_master() -> None:
    app = fake_app(("trial", 101), api=FakeClient(series=False))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.screen.query_one(MetricChart).message == SERIES_NOT_AVAILABLE


@sync
async def test_metric_picker_cycles() -> None:
    app = fake_app(("trial", 101))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TrialScreen)
        assert screen.metrics == ["loss", "lr", "accuracy"]
        assert screen.metric == "loss"
        await pilot.press("m")
        await wait_until(
            pilot, lambda: screen.query_one(MetricChart).series[0].label == "training lr"
        )
        await pilot.press("m")
        await wait_until(
            pilot, lambda: len(screen.query_one(MetricChart).series) == 2, what="train + val"
        )


@sync
async def test_palette_opens_views_and_escape_goes_back() -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("colon", *"exp 1", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentScreen))
        await settle(pilot)
        await pilot.press("enter")  # the first trial
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen))
        await pilot.press("l")
        await wait_until(pilot, lambda: isinstance(app.screen, LogsScreen))
        await pilot.press("escape", "escape", "escape")
        await wait_until(pilot, lambda: app.screen.VIEW == "experiments")
        await pilot.press("colon", *"queue", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen))
        await pilot.press("colon", *"nonsense", "enter")
        await wait_until(pilot, lambda: any("unknown" in m for m, _ in app.toast_log))


@sync
async def test_filter_sort_and_help() -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        assert len(table.view) == 6
        await pilot.press("slash", *"alice")
        assert len(table.view) == 3  # live
        await pilot.press("enter")
        assert table.filter_text == "alice"
        await pilot.press("escape")
        assert len(table.view) == 6
        await pilot.press("s")  # sort by id
        assert [r.key for r in table.view][0] == "1"
        await pilot.press("S")
        assert [r.key for r in table.view][0] == "6"
        await pilot.press("question_mark")
        assert isinstance(app.screen, Help)
        keys = dict(app.screen.keys)
        # experiment 6 is bob's and ERROR: nothing may be done to it, so nothing is offered
        assert "Open" in keys.values() and not {"Kill", "Pause", "Activate"} & set(keys.values())
        await pilot.press("escape")
        assert not isinstance(app.screen, Help)
        table.move_to_key("3")  # alice's, ACTIVE: pause and kill, not activate
        await pilot.press("question_mark")
        keys = dict(app.screen.keys)
        assert {"Kill", "Pause"} <= set(keys.values()) and "Activate" not in keys.values()
        await pilot.press("escape")


@sync
async def test_logs_search_errors_and_follow_badge(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = fake_app(("logs", 101))
    async with app.run_test(size=(100, 12)) as pilot:
        log = await wait_until(
            pilot,
            lambda: (
                len(app.screen.query_one(LogView).entries) >= 23 and app.screen.query_one(LogView)
            ),
        )
        assert log.following
        await pilot.press("k")  # scrolling up stops following
        assert not log.following
        assert "PAUSED" in str(app.screen.query_one("#log-status").render())
        await pilot.press("G")
        assert log.following
        await pilot.press("g", "e")
        assert log.view[log.current][0].line.startswith("Traceback")
        await pilot.press("slash", *"lr 0.05", "enter")
        assert log.search == "lr 0.05"
        await pilot.press("ampersand")
        assert len(log.view) == 5
        await pilot.press("t", "w")
        assert log.timestamps and log.wrap
        target = tmp_path / "out.log"
        await pilot.press("S")
        assert prompt_open(app)
        inp = app.screen.query_one("Input")
        inp.value = str(target)
        await pilot.press("enter")
        await wait_until(pilot, target.exists)
        assert "Traceback" in target.read_text()


@sync
async def test_logs_memory_is_bounded() -> None:
    from tui.widgets.logview import LogLine

    app = fake_app(("logs", 101), max_log_lines=1000)
    async with app.run_test(size=(100, 12)) as pilot:
        log = app.screen.query_one(LogView)
        for chunk in range(10):
            log.append(
                LogLine(i, "", "stdout", f"line {i}") for i in range(chunk * 500, (chunk + 1) * 500)
            )
        await pilot.pause()
        assert len(log.entries) <= 1000
        assert log.entries[-1].line == "line 4999"


def test_command_line() -> None:
    assert parse_args(["trial", "345"]).id == "345"
    assert parse_args([]).view == "exps"
    with pytest.raises(SystemExit):
        parse_args(["trial"])
    with pytest.raises(SystemExit):
        parse_args(["bogus"])


def test_app_is_importable_without_a_master() -> None:
    from tui.app import MODE_SCREENS

    assert MODE_SCREENS.keys() == {"cluster", "queue", "experiments", "models", "tasks"}
    assert DetTUI.__name__ == "DetTUI"


def test_fake_client_implements_the_api() -> None:
    """The fake and the real client both satisfy the one declared interface, signature by
    signature (a renamed or re-ordered parameter on either side fails here)."""
    import inspect

    from harness.api import Client
    from tui.api import ClusterAPI

    for cls in (Client, FakeClient):
        for name, declared in inspect.getmembers(ClusterAPI, inspect.isfunction):
            if name.startswith("_"):
                continue
            impl = getattr(cls, name)
            want = [p.name for p in inspect.signature(declared).parameters.values()]
            got = [p.name for p in inspect.signature(impl).parameters.values()][: len(want)]
            assert got == want, f"{cls.__name__}.{name}{inspect.signature(impl)}"


@sync
async def test_help_lists_each_key_once_and_fits_its_box() -> None:
    app = fake_app(("queue", None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, Help))
        await pilot.pause()
        lines = [str(s.render()) for s in app.screen.query("Static")]
        text = "\n".join(lines)
        assert text.count("ctrl+c") == 1
        assert "Copy" not in text
        box = app.screen.query_one("VerticalScroll")
        width = box.content_region.width
        assert all(len(line) <= width for line in text.splitlines()), width


@sync
async def test_pause_is_not_offered_on_finished_experiments() -> None:
    api = FakeClient()
    api.user["admin"] = True
    app = fake_app(("exp", 5), api=api)  # COMPLETED
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        await wait_until(pilot, lambda: screen.experiment is not None)
        for action in ("pause", "activate", "kill"):
            assert screen.check_action(action, ()) is False, action
        await pilot.press("p", "x")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm)
        assert not [c for c in api.calls if c[0] in ("pause", "kill")]
        footer = " ".join(b.binding.description for b in screen.active_bindings.values())
        assert "Pause" not in footer or not screen.check_action("pause", ())
    app = fake_app(("exp", 4), api=api)  # PAUSED: activate, not pause
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        await wait_until(pilot, lambda: screen.experiment is not None)
        assert screen.check_action("pause", ()) is False
        assert screen.check_action("activate", ()) is True
