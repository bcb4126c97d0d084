"""`:logs ID`: a trial's log (or, from the tasks view, any task's), live. Follows new lines
until you scroll up; `/` search, `&` filter, jump to errors, timestamps and wrap toggles, save
to a file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from harness.api import MasterUnreachable, NotFound
from tui.context import Context
from tui.messages import MasterStatus
from tui.screens.common import ViewScreen
from tui.widgets.logview import LogLine, LogView

PAGE = 1000


class LogsScreen(ViewScreen):
    VIEW = "logs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search", priority=True),  # see ViewScreen's `/`
        Binding("ampersand", "toggle_filter", "Filter"),
        Binding("n", "find(1)", "Next", show=False),
        Binding("N", "find(-1)", "Prev", show=False),
        Binding("e", "error(1)", "Next error"),
        Binding("E", "error(-1)", "Prev error", show=False),
        Binding("f", "follow", "Follow"),
        Binding("t", "timestamps", "Time"),
        Binding("w", "wrap", "Wrap"),
        Binding("S,ctrl+s", "save", "Save"),  # the footer shows the first key: `S`, as docs/tui.md
        Binding("o", "trial", "Trial", show=False),
    ]

    class Lines(Message):
        def __init__(self, lines: list[LogLine]) -> None:
            super().__init__()
            self.lines = lines

    class Ended(Message):
        """The trial ended and every line is here."""

    class Failed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(
        self, ctx: Context, trial_id: int | None = None, task_id: str | None = None
    ) -> None:
        super().__init__(ctx)
        # One of the two: a trial's log (its shared tail), or a task's that is not a trial's.
        assert (trial_id is None) != (task_id is None), "a trial id or a task id"
        self.trial_id = int(trial_id) if trial_id is not None else None
        self.task_id = task_id
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()  # wakes the follower's waits when the view closes

    @property
    def title_text(self) -> str:
        return f"logs {self.trial_id if self.trial_id is not None else self.task_id}"

    @property
    def subject(self) -> str:
        """What the status line and the saved file are named after."""
        return f"trial {self.trial_id}" if self.trial_id is not None else f"task {self.task_id}"

    def _page(self, after: int, follow: bool) -> dict:
        api = self.ctx.api
        if self.trial_id is not None:
            return api.trial_logs(
                self.trial_id, after=after, limit=PAGE, follow=follow, timeout=5.0
            )
        assert self.task_id is not None
        return api.task_logs(self.task_id, after=after, limit=PAGE, follow=follow, timeout=5.0)

    @property
    def logview(self) -> LogView:
        return self.query_one(LogView)

    def body(self) -> ComposeResult:
        yield Static(id="log-status", classes="section")
        yield LogView(max_lines=self.ctx.max_log_lines, id="log")

    def on_mount(self) -> None:
        super().on_mount()
        self.logview.focus()
        self.update_status()
        self.follow()

    def on_unmount(self) -> None:
        self._stop.set()

    # ---- the follower (a thread worker, cancelled with the view) --------------------------------
    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def follow(self) -> None:
        worker = get_current_worker()

        def gone() -> bool:
            return worker.is_cancelled or self._stop.is_set()

        after, follow = 0, False
        while not gone():
            try:
                page = self._page(after, follow)
            except MasterUnreachable as e:
                self.post_message(MasterStatus(str(e)))
                self._stop.wait(1.0)
                continue
            except NotFound as e:
                self.post_message(self.Failed(str(e)))
                return
            except Exception as e:  # noqa: BLE001 - shown, then retried
                self.post_message(self.Failed(str(e)))
                self._stop.wait(2.0)
                continue
            if gone():
                return
            self.post_message(MasterStatus(None))
            logs = page.get("logs") or []
            if logs:
                after = int(logs[-1].get("seq", after))
                lines = [
                    LogLine(
                        int(x.get("seq", 0)),
                        x.get("timestamp") or "",
                        x.get("stream") or "stdout",
                        (x.get("line") or "").rstrip("\n"),
                    )
                    for x in logs
                ]
                self.post_message(self.Lines(lines))
            if page.get("done") and not logs:
                self.post_message(self.Ended())
                return
            follow = len(logs) < PAGE  # catch up first, then long-poll
            if follow and not logs:
                self._stop.wait(0.2)  # masters that answer a follow at once (fakes, old ones)

    def on_logs_screen_lines(self, message: LogsScreen.Lines) -> None:
        self.error = None
        self.logview.append(message.lines)
        self.update_status()

    def on_logs_screen_ended(self, message: LogsScreen.Ended) -> None:
        self.done = True
        self.update_status()

    def on_logs_screen_failed(self, message: LogsScreen.Failed) -> None:
        self.error = message.error
        self.update_status()

    # ---- status line --------------------------------------------------------------------------
    def update_status(self) -> None:
        log = self.logview
        t = Text(f" {self.subject} ", "bold")
        t.append(f" {len(log.entries)} lines", "dim")
        if log.dropped:
            t.append(f" ({log.dropped} oldest dropped)", "dim")
        t.append("  ")
        if self.done:
            t.append(" ENDED ", "bold white on blue")
        elif log.following:
            t.append(" ● FOLLOWING ", "bold black on green")
        else:
            t.append(" ⏸ PAUSED: G or f to follow ", "bold black on yellow")
        if log.search:
            t.append(f"  {'filter' if log.only_matching else 'search'} “{log.search}”", "yellow")
        if log.timestamps:
            t.append("  [time]", "cyan")
        if log.wrap:
            t.append("  [wrap]", "cyan")
        if self.error:
            t.append(f"  {self.error}", "bold red")
        self.query_one("#log-status", Static).update(t)

    def on_log_view_follow_changed(self, message: LogView.FollowChanged) -> None:
        self.update_status()

    # ---- actions ------------------------------------------------------------------------------
    def action_search(self) -> None:
        log = self.logview

        def done(value: str | None) -> None:
            if value is not None:
                log.set_search(value)
                if value:
                    log.find(1)
            self.update_status()

        self.ask("/", log.search, hint="search (n / N next, & filter)", on_submit=done)

    def action_toggle_filter(self) -> None:
        log = self.logview
        if not log.search:
            self.toast("search first (/), then & shows only matching lines")
            return
        log.set_search(log.search, only_matching=not log.only_matching)
        self.update_status()

    def action_find(self, direction: int) -> None:
        if self.logview.search and not self.logview.find(direction):
            self.toast(f"no more matches for “{self.logview.search}”")
        self.update_status()

    def action_error(self, direction: int) -> None:
        if not self.logview.find(direction, errors=True):
            self.toast("no more errors")
        self.update_status()

    def action_follow(self) -> None:
        self.logview.set_following(True)
        self.update_status()

    def action_timestamps(self) -> None:
        self.logview.set_timestamps(not self.logview.timestamps)
        self.update_status()

    def action_wrap(self) -> None:
        self.logview.set_wrap(not self.logview.wrap)
        self.update_status()

    def action_save(self) -> None:
        default = f"{self.subject.replace(' ', '-')}.log"

        def done(value: str | None) -> None:
            if value is None:
                return
            path = Path(value or default).expanduser()
            try:
                n = self.logview.save(path)
            except OSError as e:
                self.toast(f"cannot save to {path}: {e}", error=True)
                return
            self.toast(f"saved {n} lines to {path}")

        self.ask("save to", default, hint="save the log to a file", on_submit=done)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "trial" and self.trial_id is None:
            return False  # a command's log has no trial to open
        return super().check_action(action, parameters)

    def action_trial(self) -> None:
        if self.trial_id is not None:
            self.open_view("trial", self.trial_id)

    def action_back(self) -> None:
        log = self.logview
        if log.search:
            log.set_search("", only_matching=False)
            self.update_status()
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()
