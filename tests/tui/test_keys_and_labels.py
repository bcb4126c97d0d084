"""Pilot tests of keys typed in a burst, navigation between views, and what the labels say."""

from __future__ import annotations

from textual import events

from tui.app import DetTUI
from tui.fake import FakeClient
from tui.screens.cluster import ClusterScreen
from tui.screens.experiment import ExperimentScreen
from tui.screens.experiments import ExperimentsScreen
from tui.screens.logs import LogsScreen
from tui.screens.queue import QueueScreen
from tui.screens.trial import TrialScreen
from tui.widgets.table import ResourceTable

from .helpers import fake_app, prompt_open, settle, sync, wait_until

SIZE = (140, 40)
KEY_NAMES = {":": "colon", " ": "space", "/": "slash", "\r": "enter"}


def burst(app: DetTUI, text: str) -> None:
    """Every key of `text` at once, as a terminal delivers a fast typist's (or tmux's) keys:
    nothing waits for the screen between them."""
    for ch in text:
        app.post_message(events.Key(KEY_NAMES.get(ch, ch), None if ch == "\r" else ch))


@sync
async def test_a_command_typed_in_one_burst_is_not_lost() -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        burst(app, ":exp 1\r")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentScreen), what="exp 1")
        assert app.screen.exp_id == 1
        # none of the letters reached the experiments view as keys (e = ..., x = kill, p = pause)
        assert not [c for c in app.api.calls if c[0] in ("kill", "pause")]
        burst(app, ":queue\r")
        await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen), what="queue")
        burst(app, ":trial 101\r")
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen), what="trial")


@sync
async def test_keys_typed_while_the_app_is_busy_wait_in_the_prompt() -> None:
    """The prompt takes the keys that follow `:` even when the UI thread is stalled (a loaded
    machine): here it is blocked between `:` and the rest."""
    import time

    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        burst(app, ":")
        app.call_later(lambda: time.sleep(0.5))  # the UI thread stalls for half a second
        burst(app, "logs 101\r")
        await wait_until(pilot, lambda: isinstance(app.screen, LogsScreen), what="logs 101")


@sync
async def test_a_filter_typed_in_one_burst_is_not_lost() -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResourceTable)
        burst(app, "/alice\r")
        await wait_until(pilot, lambda: table.filter_text == "alice", what="the filter")
        assert len(table.view) == 3
        assert not prompt_open(app)


@sync
async def test_view_keys_and_exps_show_the_list_after_a_trial_or_logs_view() -> None:
    app = fake_app(("queue", None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("colon", *"trial 101", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen), what="trial")
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), what="3")
        await pilot.press("2")  # the queue, not the trial opened from it
        await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen), what="2")
        assert len(app.screen_stack) == 1
        await pilot.press("3", "colon", *"logs 101", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, LogsScreen), what="logs")
        await pilot.press("1")
        await wait_until(pilot, lambda: isinstance(app.screen, ClusterScreen), what="1")
        await pilot.press("colon", *"exps", "enter")  # the list, not the logs
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), what="exps")
        assert len(app.screen_stack) == 1


@sync
async def test_view_switches_show_the_last_rows_at_once() -> None:
    """Coming back to a view shows what it had while a worker fetches the new data."""

    class SlowClient(FakeClient):
        def list_experiments(self, *a, **kw):  # type: ignore[no-untyped-def]
            import time

            if self.slow:
                time.sleep(1.0)
            return super().list_experiments(*a, **kw)

    api = SlowClient()
    api.slow = False  # type: ignore[attr-defined]
    app = fake_app(api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        api.slow = True  # type: ignore[attr-defined]
        await pilot.press("2")
        await wait_until(pilot, lambda: isinstance(app.screen, QueueScreen))
        await pilot.press("3")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen))
        assert len(app.screen.query_one(ResourceTable).view) == 6  # not waiting for the fetch


@sync
async def test_trials_waiting_for_promotion_and_latest_metric() -> None:
    app = fake_app(("exp", 2))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        rows = {r.key: r for r in app.screen.query_one(ResourceTable).rows}
        assert rows["203"].cells[1].plain == "waiting for promotion"
        assert rows["204"].cells[1].plain == "QUEUED"
        latest = rows["201"].cells[6]
        assert latest == "0.5000", latest  # validation_loss of {"validation_loss": 0.5, ...}
        await pilot.press("colon", *"trial 201", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen))
        await settle(pilot)
        info = str(app.screen.query_one("#trial-info").render())
        assert "latest validation_loss 0.5000 · accuracy 0.6667 · top5_accuracy" in info, info
        assert "{" not in info
        await pilot.press("colon", *"trial 203", "enter")
        await wait_until(pilot, lambda: getattr(app.screen, "trial_id", None) == 203)
        await wait_until(
            pilot,
            lambda: "waiting for promotion" in str(app.screen.query_one("#trial-info").render()),
            what="the trial header's state",
        )


@sync
async def test_cpu_slots_say_their_load_is_the_hosts() -> None:
    api = FakeClient()
    api.agents[2]["state"] = "ACTIVE"  # the CPU-only agent
    app = fake_app(("gpu", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        slots = {r.key: r for r in app.screen.query_one("#slots", ResourceTable).rows}
        cpu, gpu = slots["cpu-box/0"], slots["gpu-node-00/1"]
        assert cpu.cells[3].plain.startswith("host ") and cpu.cells[3].plain.endswith("12%")
        assert "host load" in cpu.cells[-1].plain
        assert "host" not in gpu.cells[3].plain
        agents = {r.key: r for r in app.screen.query_one("#agents", ResourceTable).rows}
        assert agents["cpu-box"].cells[6].plain.startswith("host ")


@sync
async def test_logs_are_offered_only_where_there_are_some() -> None:
    app = fake_app(("gpu", None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        table = screen.query_one("#slots", ResourceTable)
        table.move_to_key("gpu-node-00/0")  # trial 101 on it
        await pilot.pause()
        assert screen.check_action("logs", ()) is True
        table.move_to_key("gpu-node-01/3")  # a free GPU
        await pilot.pause()
        assert screen.check_action("logs", ()) is False
        await pilot.press("tab")  # the agents table: no trial there
        await wait_until(pilot, lambda: screen.focused is screen.query_one("#agents"))
        assert screen.check_action("logs", ()) is False


@sync
async def test_keys_typed_right_behind_enter_reach_the_view() -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        opened: list[str] = []
        app.screen_stack[0].app.screen_change_signal.subscribe(
            app, lambda screen: opened.append(type(screen).__name__)
        )
        burst(app, ":exp 1\r3")  # the `3` arrives while the prompt still has the focus
        await wait_until(pilot, lambda: "ExperimentScreen" in opened, what="exp 1 opened")
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, ExperimentsScreen) and len(app.screen_stack) == 1,
            what="3: back to the list",
        )


@sync
async def test_an_experiment_opened_again_shows_what_it_had_at_once() -> None:
    class SlowClient(FakeClient):
        slow = False

        def describe_experiment(self, exp_id: int):  # type: ignore[no-untyped-def]
            import time

            if self.slow:
                time.sleep(2.0)
            return super().describe_experiment(exp_id)

    api = SlowClient()
    app = fake_app(("exp", 1), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen))
        api.slow = True
        await pilot.press("colon", *"exp 1", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentScreen))
        await pilot.pause()
        table = app.screen.query_one(ResourceTable)
        assert [r.key for r in table.rows] == ["101", "102", "103"]  # before the slow answer


@sync
async def test_escape_from_the_first_view_goes_to_the_list() -> None:
    app = fake_app(("trial", 101))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ExperimentsScreen), what="list")
