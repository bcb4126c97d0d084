"""The `:tasks` view on fixed data: every task with type, owner, state and age; a command's log;
killing a command after confirmation (owner or admin only, commands only)."""

from __future__ import annotations

from tui.fake import NOW, FakeClient, iso
from tui.screens.common import Confirm
from tui.screens.logs import LogsScreen
from tui.screens.tasks import TasksScreen, browser_url, killable, openable, task_rows
from tui.widgets.table import ResourceTable

from .helpers import fake_app, settle, sync, wait_until

SIZE = (160, 40)
ALICE = {"username": "alice", "admin": False}


def test_rows_and_who_may_kill_are_pure() -> None:
    tasks = FakeClient().tasks
    rows = task_rows(tasks, NOW)
    assert [r.cells[0] for r in rows] == [
        "5f0c2a1e",
        "c41d7e22",
        "9a8b7c6d",
        "1.r101",
        "2.r201",
        "7e1f0b2c",
        "3c2b1a09",
    ]
    assert rows[0].key == tasks[0]["id"]  # the whole id, whatever is shown
    assert [r.cells[1] for r in rows][:4] == ["command", "command", "command", "trial"]
    assert rows[1].cells[7] == "waiting for 4 free slot(s)" and rows[0].cells[8] == "2m00s"
    mine, bobs, ended, trial = tasks[0], tasks[1], tasks[2], tasks[3]
    assert killable(mine, ALICE) and not killable(bobs, ALICE)
    assert killable(bobs, {"username": "root", "admin": True})
    assert not killable(ended, ALICE) and not killable(trial, ALICE)
    assert killable(bobs, None)  # who we are is not known yet: the master decides
    assert task_rows([{**mine, "created_at": iso(0)}], NOW)[0].cells[8] == "0s"
    # IDLE: the notebook idle for 25 minutes; the shell in use, commands and trials: "-".
    assert [r.cells[9] for r in rows] == ["-"] * 5 + ["25m00s", "-"]
    assert [r.cells[1] for r in rows][5:] == ["notebook", "shell"]


@sync
async def test_tasks_view_opens_a_commands_log_and_a_trials() -> None:
    app = fake_app(("experiments", None))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("5")
        await wait_until(pilot, lambda: isinstance(app.screen, TasksScreen), what="tasks")
        await settle(pilot)
        table = app.screen.query_one("#tasks", ResourceTable)
        assert len(table.view) == 7
        await pilot.press("l")
        screen = await wait_until(
            pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen, what="logs"
        )
        assert screen.task_id == table.view[0].key and screen.trial_id is None
        await wait_until(
            pilot,
            lambda: "nvidia-smi -l 5: line 5" in [e.line for e in screen.logview.entries],
            what="the command's lines",
        )
        assert screen.check_action("trial", ()) is False  # no trial behind a command
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, TasksScreen), what="back")
        for _ in range(3):
            await pilot.press("j")
        await pilot.press("enter")  # a trial's task: its trial's log
        screen = await wait_until(
            pilot, lambda: isinstance(app.screen, LogsScreen) and app.screen, what="trial log"
        )
        assert (screen.trial_id, screen.task_id) == (101, None)


@sync
async def test_kill_asks_first_and_only_for_ones_own_live_command() -> None:
    api = FakeClient()
    app = fake_app(("tasks", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.ctx.user is not None, what="who we are")
        table = app.screen.query_one("#tasks", ResourceTable)
        await pilot.press("j")  # bob's command: no kill for alice
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm)
        await pilot.press("k")  # alice's own
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, Confirm), what="the question")
        await pilot.press("n")  # no: nothing happens
        await wait_until(pilot, lambda: isinstance(app.screen, TasksScreen), what="back")
        assert not [c for c in api.calls if c[0] == "kill_command"]
        await pilot.press("x")
        await wait_until(pilot, lambda: isinstance(app.screen, Confirm), what="asked again")
        await pilot.press("y")
        mine = table.view[0].key
        await wait_until(pilot, lambda: ("kill_command", (mine,), {}) in api.calls, what="kill")
        await wait_until(
            pilot, lambda: table.view[0].data.get("state") == "CANCELED", what="refreshed"
        )
        assert any("killed command 5f0c2a1e" in text for text, _ in app.toast_log)


@sync
async def test_readonly_hides_kill_and_A_shows_only_live_tasks() -> None:
    api = FakeClient()
    app = fake_app(("tasks", None), api=api, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.screen.check_action("kill", ()) is False
        await pilot.press("A")
        await wait_until(pilot, lambda: ("list_tasks", (None,), {"active": True}) in api.calls)
        table = app.screen.query_one("#tasks", ResourceTable)
        await wait_until(pilot, lambda: len(table.view) == 6, what="the ended one gone")


@sync
async def test_a_command_in_the_job_queue_is_listed_but_not_steered() -> None:
    api = FakeClient()
    mine = api.tasks[0]
    job = {
        "job_id": mine["id"],
        "type": "COMMAND",
        "task_id": mine["id"],
        "experiment_id": None,
        "experiment_state": None,
        "name": mine["name"],
        "user": "alice",
        "state": "SCHEDULED",
        "priority": 42,
        "weight": 1.0,
        "resource_pool": "default",
        "slots_requested": 1,
        "slots_held": 1,
        "trials_queued": 0,
        "trials_running": 0,
        "submitted_at": mine["created_at"],
        "reason": None,
    }
    pool = next(p for p in api.pools if p["name"] == "default")
    pool["jobs"].append(job)
    api._renumber(pool["jobs"])
    app = fake_app(("queue", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.ctx.user is not None, what="who we are")
        screen = app.screen
        table = screen.query_one("#jobs", ResourceTable)
        await wait_until(pilot, lambda: mine["id"] in [r.key for r in table.view], what="row")
        table.move_to_key(mine["id"])
        await pilot.pause()
        assert screen.check_action("raise_priority", ()) is False
        assert screen.check_action("kill", ()) is False  # a command is killed in :tasks
        own_experiment = next(
            r.key for r in table.view if r.data.get("experiment_id") and r.data["user"] == "alice"
        )
        table.move_to_key(own_experiment)
        await pilot.pause()
        assert screen.check_action("raise_priority", ()) is not False


@sync
async def test_kill_stops_ones_notebook_shell_or_tensorboard_through_its_own_route() -> None:
    api = FakeClient()
    kinds = ("NOTEBOOK", "SHELL", "TENSORBOARD")
    extra = [
        {
            **api.tasks[0],
            "id": f"{n}0000000-0000-4000-8000-00000000000{n}",
            "type": kind,
            "name": f"my {kind.lower()}",
        }
        for n, kind in enumerate(kinds, start=1)
    ]
    api.tasks[:0] = extra
    assert all(killable(t, ALICE) for t in extra)
    app = fake_app(("tasks", None), api=api)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.ctx.user is not None, what="who we are")
        table = app.screen.query_one("#tasks", ResourceTable)
        await wait_until(pilot, lambda: len(table.view) == 10, what="the rows")
        for row, (task, kind) in enumerate(zip(extra, kinds, strict=True)):
            noun = kind.lower()
            assert table.view[row].key == task["id"]
            await pilot.press("x")
            question = await wait_until(
                pilot, lambda: isinstance(app.screen, Confirm) and app.screen, what="asked"
            )
            assert f"Kill {noun} {task['id'][:8]}" in question.question
            await pilot.press("y")
            call = (f"kill_{noun}", (task["id"],), {})
            await wait_until(pilot, lambda c=call: c in api.calls, what="killed")
            await wait_until(
                pilot,
                lambda r=row: table.view[r].data.get("state") == "CANCELED",
                what="refreshed",
            )
            assert any(f"killed {noun} {task['id'][:8]}" in t for t, _ in app.toast_log)
            await pilot.press("j")
        assert not [c for c in api.calls if c[0] == "kill_command"]


@sync
async def test_o_opens_ones_running_notebook_in_the_browser_and_not_anothers_shell() -> None:
    api = FakeClient()
    notebook = next(t for t in api.tasks if t["type"] == "NOTEBOOK")  # alice's, running
    shell = next(t for t in api.tasks if t["type"] == "SHELL")  # bob's, running
    assert openable(notebook, ALICE) and not openable(shell, ALICE)
    assert openable(shell, {"username": "carol", "admin": True})
    assert browser_url("http://m:8080/", notebook) == f"http://m:8080/proxy/{notebook['id']}/lab"
    app = fake_app(("tasks", None), api=api)
    opened: list[str] = []
    app.open_url = lambda url, **_: opened.append(url)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_until(pilot, lambda: app.ctx.user is not None, what="who we are")
        table = app.screen.query_one("#tasks", ResourceTable)
        await wait_until(pilot, lambda: len(table.view) > 0, what="the rows")
        keys = [r.key for r in table.view]
        for _ in range(keys.index(notebook["id"])):
            await pilot.press("j")
        await pilot.press("o")
        want = f"{api.master}/proxy/{notebook['id']}/lab"
        await wait_until(pilot, lambda: opened == [want], what="the browser opened")
        assert any(want in t for t, _ in app.toast_log)
        # bob's shell: not alice's to open (the key does nothing, nothing runs)
        for _ in range(keys.index(shell["id"]) - keys.index(notebook["id"])):
            await pilot.press("j")
        assert table.current is not None and table.current.key == shell["id"]
        await pilot.press("o")
        await pilot.pause()
        assert opened == [want]
        assert not any("shell" in t for t, _ in app.toast_log)
