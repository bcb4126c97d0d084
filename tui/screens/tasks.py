"""`:tasks`: every task the cluster runs (trials, commands, notebooks, shells, TensorBoards),
newest first, with type, owner, state, age and idle time (a running notebook's, shell's or
TensorBoard's, as the master's idle check last judged it); Enter or `l` opens its log, `o` opens
a running notebook or TensorBoard in the browser (through the master's proxy, as `det notebook
open` does) or a running shell in this terminal (det-tui steps aside for `det shell open` and
comes back when the shell ends), `x` kills a command, notebook, shell or TensorBoard after
asking (its owner or an admin; a trial is stopped through its experiment)."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message

from tui.data import JSON, fmt_age, job_action_allowed, styled_state
from tui.screens.common import Confirm, ViewScreen
from tui.widgets.table import Column, ResourceTable, Row, column_widths

TERMINAL = frozenset({"COMPLETED", "CANCELED", "ERROR"})

COLUMNS = [
    Column("id", "TASK", max_width=14),
    Column("type", "TYPE", width=11),
    Column("name", "NAME", max_width=32),
    Column("owner", "OWNER", max_width=12),
    Column("state", "STATE", width=10),
    Column("pool", "POOL", max_width=12),
    Column("slots", "SLOTS", width=5, justify="right"),
    Column("waiting", "WAITING FOR", max_width=28),
    Column("age", "AGE", width=7, justify="right"),
    Column("idle", "IDLE", width=7, justify="right"),
]


def short_id(task: JSON) -> str:
    """A trial's task id reads well whole (`1.r101`); a command's UUID by its first 8 digits,
    as `det task list` shows it."""
    tid = str(task["id"])
    return tid if task.get("type") == "TRIAL" else tid[:8]


def task_rows(tasks: list[JSON], now: float) -> list[Row]:
    """Pure: the table's rows (keyed by the whole task id) from `GET /tasks`."""
    return [
        Row(
            str(t["id"]),
            [
                short_id(t),
                str(t.get("type") or "").lower(),
                t.get("name") or "",
                t.get("owner") or "",
                styled_state(t.get("state")),
                t.get("resource_pool") or "",
                str(t.get("slots") if t.get("slots") is not None else ""),
                t.get("waiting_for") or "",
                fmt_age(t.get("created_at"), now),
                fmt_age(t.get("idle_since"), now),  # "-": in use, or not an interactive task
            ],
            sort=[
                None,
                None,
                None,
                None,
                None,
                None,
                t.get("slots") or 0,
                None,
                t.get("created_at") or "",
                t.get("idle_since") or "~",  # the longest idle first; never idle last
            ],
            data=t,
        )
        for t in tasks
    ]


# The task types `x` kills, each through its own route (POST /<noun>s/<id>/kill), and what the
# question and the toast call it.
KILLED_AS = {
    "COMMAND": "command",
    "NOTEBOOK": "notebook",
    "SHELL": "shell",
    "TENSORBOARD": "tensorboard",
}
_KILL_EFFECT = {
    "command": "Its process is stopped.",
    "notebook": "JupyterLab and its kernels are stopped.",
    "shell": "Its sessions end.",
    "tensorboard": "It stops serving.",
}


# What `o` opens in the browser, and at which page of its proxy prefix (the CLI's `det notebook
# open` and `det tensorboard open` say the same: harness/cli/notebook.py, tensorboard.py).
BROWSER_PAGES = {"NOTEBOOK": ("JupyterLab", "lab"), "TENSORBOARD": ("TensorBoard", "")}


def openable(task: JSON, user: JSON | None) -> bool:
    """A running notebook, TensorBoard or shell of the user's own (or any, for an admin): the
    proxy lets no one else through."""
    return (
        (task.get("type") in BROWSER_PAGES or task.get("type") == "SHELL")
        and task.get("state") == "ACTIVE"
        and (task.get("allocation") or {}).get("state") == "RUNNING"
        and job_action_allowed(task.get("owner"), user)
    )


def browser_url(master: str, task: JSON) -> str:
    """The link on the master's own address: a browser signs in there (if it has not) and is
    sent on to the proxy's port (master/web/views_proxy.py)."""
    _, page = BROWSER_PAGES[str(task["type"])]
    return f"{master.rstrip('/')}/proxy/{task['id']}/{page}"


def killable(task: JSON, user: JSON | None) -> bool:
    """Only a live command, notebook, shell or TensorBoard, and only by its owner or an admin
    (the master decides in the end)."""
    return (
        task.get("type") in KILLED_AS
        and task.get("state") not in TERMINAL
        and job_action_allowed(task.get("owner"), user)
    )


class TasksScreen(ViewScreen):
    VIEW = "tasks"
    REFRESH_S = 3.0
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", show=False),
        Binding("l", "logs", "Logs"),
        Binding("o", "open_task", "Open"),
        Binding("x,ctrl+k", "kill", "Kill"),
        Binding("A", "toggle_all", "All/active"),
    ]
    ROW_ACTIONS = frozenset({"logs"})

    class Rows(Message):
        def __init__(self, rows: list[Row]) -> None:
            super().__init__()
            self.rows = rows
            self.widths = column_widths(COLUMNS, rows)  # measured here, in the worker

    # Ended tasks too, or only those that queue or run (`A` toggles; the list starts whole).
    show_all = True

    def body(self) -> ComposeResult:
        yield ResourceTable(COLUMNS, id="tasks", empty="no tasks (det cmd run starts one)")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(ResourceTable).focus()

    def refresh_data(self, now: bool = False) -> None:
        self.fetch_in_background("list", self.fetch, now=now)

    def fetch(self) -> TasksScreen.Rows:
        tasks = self.ctx.api.list_tasks(active=not self.show_all)
        return self.Rows(task_rows(tasks, self.ctx.clock()))

    def on_tasks_screen_rows(self, message: TasksScreen.Rows) -> None:
        self.query_one(ResourceTable).set_rows(message.rows, widths=message.widths)
        self.maybe_refresh_bindings()

    def _current(self) -> JSON | None:
        row = self.query_one(ResourceTable).current
        return row.data if row is not None else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not super().check_action(action, parameters):
            return False
        if action in ("logs", "kill", "open_task"):
            task = self._current()
            if task is None:
                return False
            if action == "open_task":
                return openable(task, self.ctx.user)
            return action == "logs" or killable(task, self.ctx.user)
        return True

    def on_resource_table_selected(self, message: ResourceTable.Selected) -> None:
        if message.row is not None:
            self._open_logs(message.row.data)

    def action_open(self) -> None:
        self.query_one(ResourceTable).action_select()

    def action_logs(self) -> None:
        task = self._current()
        if task is not None:
            self._open_logs(task)

    def _open_logs(self, task: JSON) -> None:
        # A trial's log is its trial's (the trial view's `o` is one key away); any other task's
        # is read by task id.
        if task.get("trial_id") is not None:
            self.open_view("logs", int(task["trial_id"]))
        else:
            self.open_view("task-logs", str(task["id"]))

    def action_open_task(self) -> None:
        task = self._current()
        if task is None or not openable(task, self.ctx.user):
            return
        if task.get("type") == "SHELL":
            self._open_shell(str(task["id"]))
            return
        app, _ = BROWSER_PAGES[str(task["type"])]
        url = browser_url(self.ctx.master_url, task)
        self.app.open_url(url)
        self.toast(f"{app}: {url}")  # also for a terminal with no browser to open

    def _open_shell(self, task_id: str) -> None:
        """`det shell open ID` in this terminal: det-tui steps aside until the shell ends."""
        argv = [sys.executable, "-m", "harness.cli.main", "-m", self.ctx.master_url]
        argv += ["shell", "open", task_id]
        try:
            with self.app.suspend():
                code = subprocess.call(argv)
        except Exception as e:  # noqa: BLE001 - Textual's SuspendNotSupported, an OSError
            self.toast(f"cannot open the shell here ({e}): det shell open {task_id}", error=True)
            return
        self.toast(f"shell {task_id[:8]} closed (exit {code})")
        self.refresh_data(now=True)

    def action_kill(self) -> None:
        task = self._current()
        if task is None or not killable(task, self.ctx.user):
            return
        task_id = str(task["id"])
        noun = KILLED_AS[str(task["type"])]
        kill = getattr(self.ctx.api, f"kill_{noun}")

        def done(yes: bool | None) -> None:
            if yes:
                self.call_api(lambda: f"killed {noun} {short_id(task)}" if kill(task_id) else None)

        self.app.push_screen(
            Confirm(
                f"Kill {noun} {short_id(task)} ({task.get('name') or ''})? {_KILL_EFFECT[noun]}"
            ),
            done,
        )

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all
        self.toast("every task" if self.show_all else "only tasks that queue or run")
        self.refresh_data(now=True)
