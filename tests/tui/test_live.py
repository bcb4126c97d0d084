"""Pilot tests of det-tui against a real master + agent with running trials."""

from __future__ import annotations

import asyncio
import io
import tarfile
import time

import pytest

from harness.api import Client, Session
from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config
from tui.app import DetTUI
from tui.screens.common import Confirm
from tui.screens.logs import LogsScreen
from tui.widgets.logview import LogView
from tui.widgets.table import ResourceTable

from .helpers import prompt_open, settle, sync, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = (140, 40)


def submit(cluster: Cluster, tmp_path, name: str, **hparams) -> int:  # type: ignore[no-untyped-def]
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(
        make_config(cluster.ckpt_dir, batches=100000, name=name, hparams={"sleep": 0.05, **hparams})
    )
    return int(client(cluster).create_experiment(cfg.read_text(), model_tar())["id"])


def model_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(SCRIPTED_DIR.rglob("*")):
            if "__pycache__" not in p.parts:
                tar.add(p, arcname=str(p.relative_to(SCRIPTED_DIR)), recursive=False)
    return buf.getvalue()


def client(cluster: Cluster) -> Client:
    return Client(Session(cluster.url, cluster.token))


def running_trial(cluster: Cluster, exp_id: int) -> int:
    def check() -> int | None:
        trials = cluster.experiment(exp_id)["trials"]
        return trials[0]["id"] if trials and trials[0].get("display_state") == "RUNNING" else None

    return wait_for(check, 120, 0.2, what=f"a running trial of experiment {exp_id}")


@sync
async def test_logs_view_follows_new_lines(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp = submit(cluster, tmp_path, "tui-logs", log_lines=5, report_every=10)
    trial = running_trial(cluster, exp)
    app = DetTUI(client(cluster), start=("logs", trial), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, LogsScreen)
        log = app.screen.query_one(LogView)
        await wait_until(pilot, lambda: len(log.entries) >= 5, 60, "the first lines")
        assert any("log line 1 of 5" in e.line for e in log.entries)
        assert log.following
        n = len(log.entries)
        # the scripted trial keeps printing (checkpoints, progress): new lines arrive and the
        # view stays at the bottom
        cluster.post(f"/experiments/{exp}/pause")
        await wait_until(pilot, lambda: len(log.entries) > n, 60, "new lines")
        assert log.following
        assert int(log.scroll_offset.y) == int(log.max_scroll_y)
    cluster.post(f"/experiments/{exp}/kill")


@sync
async def test_kill_asks_then_kills(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp = submit(cluster, tmp_path, "tui-kill")
    running_trial(cluster, exp)
    app = DetTUI(client(cluster), start=("exps", None), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: table.current and table.current.key == str(exp))
        await pilot.press("x")
        assert isinstance(app.screen, Confirm)
        await pilot.press("n")
        await pilot.pause(0.5)
        assert cluster.experiment(exp)["experiment"]["state"] == "ACTIVE"
        await pilot.press("x", "y")
        await wait_until(
            pilot,
            lambda: any(f"killed experiment {exp}" in m for m, _ in app.toast_log),
            30,
            "the kill toast",
        )
    cluster.wait_experiment(exp, {"CANCELED"}, timeout=60)


@sync
async def test_priority_keys_change_the_masters_queue(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    api = client(cluster)
    first = submit(cluster, tmp_path, "tui-q1")
    running_trial(cluster, first)  # holds the only slot
    second = submit(cluster, tmp_path, "tui-q2")
    third = submit(cluster, tmp_path, "tui-q3")

    def jobs() -> list[dict]:
        return [j for p in api.job_queues() for j in p["jobs"]]

    wait_for(lambda: len(jobs()) >= 3, 30, what="three jobs")
    app = DetTUI(api, start=("queue", None), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: str(third) in {r.key for r in table.rows}, 30)
        table.move_to_key(str(third))
        before = next(j for j in jobs() if j["job_id"] == str(third))["priority"]
        # Waits yield to the app's event loop (a blocking wait would stall its workers).
        await pilot.press("plus")
        await wait_until(
            pilot,
            lambda: next(j for j in jobs() if j["job_id"] == str(third))["priority"] == before - 1,
            30,
            "priority raised on the master",
        )
        await pilot.press("minus")
        await wait_until(
            pilot,
            lambda: next(j for j in jobs() if j["job_id"] == str(third))["priority"] == before,
            30,
            "priority lowered on the master",
        )
        order = [j["job_id"] for j in jobs()]
        if order.index(str(third)) > order.index(str(second)):
            # The view must show the master's current order before "move up" means "ahead of
            # the job above", and from answers fetched after `-` landed: the rows from before
            # `+` have the same order, and an answer fetched between `+` and `-` (the third job
            # first) could still land after them and make `K` say "already first" (run 11).
            # Two refreshes started now: rows built from anything older have landed by the
            # second one's end.
            for _ in range(2):
                fresh = app.refresh_cluster(now=True)
                assert fresh is not None
                await wait_until(pilot, lambda w=fresh: w.is_finished, 30, "a refresh after `-`")
                await wait_until(pilot, lambda: [r.key for r in table.rows] == order, 30, "order")
            await wait_until(pilot, lambda: table.current.key == str(third))
            # the key is offered (we know who we are, the row is ours) before it is pressed
            await wait_until(pilot, lambda: app.screen.check_action("move_ahead", ()), 30, "K")
            await pilot.press("K")
            await wait_until(
                pilot,
                lambda: (
                    [j["job_id"] for j in jobs()].index(str(third))
                    < [j["job_id"] for j in jobs()].index(str(second))
                ),
                30,
                "job moved ahead on the master",
            )
    for e in (first, second, third):
        cluster.post(f"/experiments/{e}/kill")


@sync
async def test_pause_activate_view_and_logs_keys_against_the_master(
    cluster: Cluster, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from tui.screens.cluster import ClusterScreen
    from tui.screens.experiments import ExperimentsScreen
    from tui.screens.queue import QueueScreen

    exp = submit(cluster, tmp_path, "tui-keys", log_lines=3)
    running_trial(cluster, exp)
    app = DetTUI(client(cluster), start=("exps", None), interval=0.5)

    def state() -> str:
        return cluster.experiment(exp)["experiment"]["state"]

    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: table.current and table.current.key == str(exp))
        await pilot.press("p")  # pause: the master pauses the experiment
        await wait_until(pilot, lambda: state() == "PAUSED", 60, "PAUSED on the master")
        # activate is offered once the view shows the experiment PAUSED (it refreshes right
        # after the action): only what can be done to the shown state is offered
        await wait_until(
            pilot,
            lambda: (
                table.current
                and table.current.key == str(exp)
                and table.current.data.get("state") == "PAUSED"
            ),
            30,
            "PAUSED in the view",
        )
        assert app.screen.check_action("activate", ()) and not app.screen.check_action("pause", ())
        await pilot.press("a")  # activate: it runs again
        await wait_until(pilot, lambda: state() == "ACTIVE", 60, "ACTIVE on the master")
        for key, view in (("1", ClusterScreen), ("2", QueueScreen), ("3", ExperimentsScreen)):
            await pilot.press(key)
            await wait_until(pilot, lambda v=view: isinstance(app.top_view(), v), 30, key)
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: table.current and table.current.key == str(exp))
        await pilot.press("l")  # the experiment's logs, from the master
        await wait_until(pilot, lambda: isinstance(app.top_view(), LogsScreen), 30, "logs")
        view = app.screen.query_one(LogView)
        await wait_until(
            pilot, lambda: any("log line 3 of 3" in e.line for e in view.entries), 60, "lines"
        )
        await pilot.press("g")  # to the top: no longer following
        await wait_until(pilot, lambda: not view.following, 30, "following stopped")
        await pilot.press("f")  # follow again: back at the bottom as lines arrive
        await wait_until(pilot, lambda: view.following, 30, "following again")
    cluster.post(f"/experiments/{exp}/kill")


@sync
async def test_queue_and_trial_keys_against_the_master(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tui.screens.experiment import ExperimentScreen
    from tui.screens.queue import QueueScreen
    from tui.screens.trial import TrialScreen

    api = client(cluster)
    first = submit(cluster, tmp_path, "tui-j1")
    trial = running_trial(cluster, first)  # holds the only slot
    second = submit(cluster, tmp_path, "tui-j2")
    third = submit(cluster, tmp_path, "tui-j3")

    def order() -> list[str]:
        return [j["job_id"] for p in api.job_queues() for j in p["jobs"]]

    wait_for(lambda: len(order()) >= 3, 30, what="three jobs")
    app = DetTUI(api, start=("queue", None), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: str(second) in {r.key for r in table.rows}, 30)
        table.move_to_key(str(second))
        assert order().index(str(second)) < order().index(str(third))
        await pilot.press("J")  # move down: behind the third job, on the master
        await wait_until(
            pilot,
            lambda: order().index(str(second)) > order().index(str(third)),
            30,
            "the second job moved behind the third on the master",
        )
        await wait_until(pilot, lambda: table.current is not None, 30)
        table.move_to_key(str(first))
        await pilot.press("e")  # the row's experiment
        await wait_until(
            pilot,
            lambda: isinstance(v := app.top_view(), ExperimentScreen) and v.exp_id == first,
            30,
            "experiment view",
        )
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.top_view(), QueueScreen), 30, "back")
        await pilot.press("colon", *f"trial {trial}", "enter")
        await wait_until(pilot, lambda: isinstance(app.top_view(), TrialScreen), 30, "trial")
        await pilot.press("l")  # the trial's logs
        await wait_until(pilot, lambda: isinstance(app.top_view(), LogsScreen), 30, "logs")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.top_view(), TrialScreen), 30, "back")
        await pilot.press("e")  # the trial's experiment
        await wait_until(
            pilot,
            lambda: isinstance(v := app.top_view(), ExperimentScreen) and v.exp_id == first,
            30,
            "the trial's experiment",
        )
    for exp in (first, second, third):
        cluster.post(f"/experiments/{exp}/kill")


@sync
async def test_logs_keys_against_the_master(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tui.screens.trial import TrialScreen

    cfg = make_config(
        cluster.ckpt_dir,
        batches=10,
        name="tui-logkeys",
        hparams={"log_lines": 4, "fail_at_step": 3},
    )
    exp = int(client(cluster).create_experiment(cfg, model_tar())["id"])
    d = cluster.wait_experiment(exp, {"ERROR", "COMPLETED"}, timeout=120)
    trial = d["trials"][0]["id"]
    saved = tmp_path / "saved.log"
    app = DetTUI(client(cluster), start=("logs", trial), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        log = app.screen.query_one(LogView)
        await wait_until(
            pilot, lambda: any("scripted failure" in e.line for e in log.entries), 60, "the lines"
        )
        await pilot.press("slash", *"log line", "enter")  # search
        await wait_until(pilot, lambda: log.search == "log line", 30, "search set")
        await pilot.press("ampersand")  # only the matching lines
        await wait_until(pilot, lambda: log.only_matching, 30, "only matching")
        await pilot.press("ampersand")
        await wait_until(pilot, lambda: not log.only_matching, 30, "all lines again")

        async def finds(key: str) -> None:
            # Each key moves to a line that exists (a miss would toast "no more ...").
            toasts, at = len(app.toast_log), log.current
            await pilot.press(key)
            await wait_until(pilot, lambda: log.current != at, 30, f"{key} moved")
            assert len(app.toast_log) == toasts, (key, app.toast_log[toasts:])

        await pilot.press("g")
        for key in ("n", "n", "N"):  # next match, the one after, back to the previous
            await finds(key)
        for key in ("e", "e", "E"):  # the same over error lines (the traceback)
            await finds(key)
        for key, attr in (("t", "timestamps"), ("w", "wrap")):
            before = getattr(log, attr)
            await pilot.press(key)
            await wait_until(pilot, lambda a=attr, b=before: getattr(log, a) != b, 30, key)
        await pilot.press("S")  # save: a prompt with a default file name
        await wait_until(pilot, lambda: prompt_open(app), 30, "save prompt")
        await pilot.press(*["backspace"] * 40, *str(saved), "enter")
        await wait_until(pilot, lambda: saved.exists(), 30, "the saved file")
        assert "log line 4 of 4" in saved.read_text()
        await pilot.press("o")  # the trial's view
        await wait_until(pilot, lambda: isinstance(app.top_view(), TrialScreen), 30, "trial")


@sync
async def test_table_keys_and_bulk_actions_against_the_master(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tui.screens.cluster import ClusterScreen

    exps = [submit(cluster, tmp_path, f"tui-t{i}") for i in (1, 2, 3)]
    running_trial(cluster, exps[0])
    app = DetTUI(client(cluster), start=("exps", None), interval=0.5)

    def state(exp: int) -> str:
        return cluster.experiment(exp)["experiment"]["state"]

    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        table = app.screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: len(table.view) == 3, 30, "three rows")
        await pilot.press("G")
        await wait_until(pilot, lambda: table.cursor == 2, 30, "G: last row")
        await pilot.press("g")
        await wait_until(pilot, lambda: table.cursor == 0, 30, "g: first row")
        await pilot.press("j")
        await wait_until(pilot, lambda: table.cursor == 1, 30, "j: down")
        await pilot.press("k")
        await wait_until(pilot, lambda: table.cursor == 0, 30, "k: up")
        await pilot.press("s")
        await wait_until(pilot, lambda: table.sort_column == 0, 30, "s: sort by a column")
        await pilot.press("S")
        await wait_until(pilot, lambda: table.sort_reverse, 30, "S: reversed")
        await pilot.press("slash", *"tui-t2", "enter")
        await wait_until(
            pilot,
            lambda: [r.key for r in table.view] == [str(exps[1])],
            30,
            "/: only the matching row",
        )
        await pilot.press("escape")  # clears the filter
        await wait_until(pilot, lambda: len(table.view) == 3, 30, "all rows again")
        # space marks rows; an action then applies to every marked row, on the master
        for exp in exps[1:]:
            table.move_to_key(str(exp))
            await pilot.press("space")
        await wait_until(pilot, lambda: len(table.marked) == 2, 30, "two marked")
        await pilot.press("p")
        await wait_until(
            pilot, lambda: all(state(e) == "PAUSED" for e in exps[1:]), 60, "both paused"
        )
        assert state(exps[0]) == "ACTIVE"
        await pilot.press("1")
        await wait_until(pilot, lambda: isinstance(app.top_view(), ClusterScreen), 30, "GPUs")
        await settle(pilot, 30)
        focused = app.focused
        await pilot.press("tab")  # agents <-> slots table
        await wait_until(pilot, lambda: app.focused is not focused, 30, "tab: other table")
    for exp in exps:
        cluster.post(f"/experiments/{exp}/kill")


TWO_POOLS = """
resource_pools:
  - name: default
  - name: spare
"""


@sync
async def test_queue_pool_and_weight_keys_against_the_master(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]

    cluster = cluster_factory(master_yaml=TWO_POOLS)
    cluster.start_agent("agent-1", slots=1)
    api = client(cluster)
    first = submit(cluster, tmp_path, "tui-p1")
    running_trial(cluster, first)
    second = submit(cluster, tmp_path, "tui-p2")

    def jobs_by_pool() -> dict[str, dict[str, dict]]:
        return {p["name"]: {j["job_id"]: j for j in p["jobs"]} for p in api.job_queues()}

    wait_for(lambda: str(second) in jobs_by_pool().get("default", {}), 30, what="queued")
    app = DetTUI(api, start=("queue", None), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, 30)
        screen = app.screen
        table = screen.query_one(ResourceTable)
        await wait_until(pilot, lambda: str(second) in {r.key for r in table.rows}, 30)
        table.move_to_key(str(second))
        await pilot.press("w")  # weight, on the master
        await wait_until(pilot, lambda: prompt_open(app), 30, "weight prompt")
        await pilot.press(*"2", "enter")
        await wait_until(
            pilot,
            lambda: jobs_by_pool()["default"][str(second)].get("weight") == 2,
            30,
            "weight 2 on the master",
        )
        await wait_until(pilot, lambda: table.current is not None, 30)
        table.move_to_key(str(second))
        await pilot.press("P")  # move the job to another pool, on the master
        await wait_until(pilot, lambda: prompt_open(app), 30, "pool prompt")
        await pilot.press(*"spare", "enter")
        await wait_until(
            pilot, lambda: str(second) in jobs_by_pool().get("spare", {}), 30, "moved to spare"
        )
        pool = screen.pool
        await pilot.press("right_square_bracket")  # the next pool's queue
        await wait_until(pilot, lambda: screen.pool != pool, 30, "]: next pool")
        await pilot.press("left_square_bracket")  # and back
        await wait_until(pilot, lambda: screen.pool == pool, 30, "[: previous pool")
    for exp in (first, second):
        cluster.post(f"/experiments/{exp}/kill")


@sync
async def test_asha_trials_waiting_for_promotion_say_so(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An ASHA trial that finished its rung and waits shows "waiting for promotion", not QUEUED
    (det-tui's experiment view and trial header, and `det experiment describe`)."""
    from tests.integration.test_search import asha_config
    from tui.screens.trial import TrialScreen

    api = client(cluster)
    exp = int(api.create_experiment(asha_config(cluster, sleep=0.5), model_tar())["id"])

    def waiting() -> int | None:
        trials = cluster.experiment(exp)["trials"]
        return next((t["id"] for t in trials if t.get("waiting_for") == "promotion"), None)

    trial = wait_for(waiting, 240, 0.5, what="a trial waiting for promotion")
    wait_for(
        lambda: "waiting for promotion" in cluster.det("experiment", "describe", str(exp)).stdout,
        60,
        0.5,
        what="det experiment describe showing the waiting trial",
    )
    app = DetTUI(api, start=("exp", exp), interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(ResourceTable)
        await wait_until(
            pilot,
            lambda: any(r.cells[1].plain == "waiting for promotion" for r in table.rows),
            60,
            "a row waiting for promotion",
        )
        await pilot.press("colon", *f"trial {trial}", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, TrialScreen), 30, "trial view")
        info = app.screen.query_one("#trial-info")
        await wait_until(
            pilot,
            lambda: "waiting for promotion" in str(info.render()) or waiting() != trial,
            60,
            "the trial header",
        )
    cluster.post(f"/experiments/{exp}/kill")


@sync
async def test_an_action_toast_shows_once(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from textual.widgets._toast import Toast as ToastWidget

    exp = submit(cluster, tmp_path, "tui-toast")
    running_trial(cluster, exp)
    app = DetTUI(client(cluster), start=("exp", exp), interval=0.5)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, 30)
        await pilot.press("p")
        await wait_until(pilot, lambda: app.toast_log, 30, "the pause toast")
        await wait_until(pilot, lambda: app.screen.query(ToastWidget), 30, "the toast shown")
        # refreshes, the master's answer and the view's redraws come and go for 2 s: still one
        # toast. Watch the whole window rather than look at its end: the toast lives 3 s from
        # when it was raised, and on a loaded machine (stop 51's CI) it was first seen late
        # enough that it had rightly gone by the end of the window.
        seen: set[tuple[str, str]] = set()
        most = 0
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            toasts = list(app.screen.query(ToastWidget))
            most = max(most, len(toasts))
            seen |= {(t._notification.identity, str(t._notification.message)) for t in toasts}
            await asyncio.sleep(0.05)
            await pilot.pause()
        assert app.toast_log == [(f"paused experiment {exp}", False)], app.toast_log
        assert [m for _, m in seen] == [f"paused experiment {exp}"], seen
        assert most == 1, most
    cluster.post(f"/experiments/{exp}/kill")
