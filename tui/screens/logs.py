"""`:logs ID`: a trial's log, live. Follows new lines until you scroll up; `/` search,
`&` filter, jump to errors, timestamps and wrap toggles, save to a file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from harness.api import MasterUnreachable, NotFound
from tui.data import app_alive
from tui.screens.common import Prompt, ViewScreen
from tui.widgets.logview import LogLine, LogView

PAGE = 1000


class LogsScreen(ViewScreen):
    VIEW = "logs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search"),
        Binding("ampersand", "toggle_filter", "Filter"),
        Binding("n", "find(1)", "Next", show=False),
        Binding("N", "find(-1)", "Prev", show=False),
        Binding("e", "error(1)", "Next error"),
        Binding("E", "error(-1)", "Prev error", show=False),
        Binding("f", "follow", "Follow"),
        Binding("t", "timestamps", "Time"),
        Binding("w", "wrap", "Wrap"),
        Binding("ctrl+s,S", "save", "Save"),
        Binding("o", "trial", "Trial", show=False),
    ]

    def __init__(self, trial_id: int) -> None:
        super().__init__()
        self.trial_id = int(trial_id)
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()

    @property
    def title_text(self) -> str:
        return f"logs {self.trial_id}"

    @property
    def logview(self) -> LogView:
        return self.query_one(LogView)

    def body(self) -> ComposeResult:
        yield Static(id="log-status", classes="section")
        yield LogView(max_lines=self.dapp.max_log_lines, id="log")

    def on_mount(self) -> None:
        super().on_mount()
        self.logview.focus()
        self.update_status()
        threading.Thread(target=self._follow, name=f"logs:{self.trial_id}", daemon=True).start()

    def on_unmount(self) -> None:
        super().on_unmount()
        self._stop.set()

    # ---- the follower (worker thread) -------------------------------------------------------
    def _deliver(self, fn: Any, *args: Any) -> bool:
        if self._stop.is_set() or not app_alive(self.dapp):
            self._stop.set()
            return False
        try:
            self.dapp.call_from_thread(fn, *args)
        except BaseException:  # noqa: BLE001 - the app is shutting down
            self._stop.set()
            return False
        return True

    def _follow(self) -> None:
        api = self.dapp.api
        after, follow = 0, False
        while not self._stop.is_set():
            try:
                page = api.trial_logs(
                    self.trial_id, after=after, limit=PAGE, follow=follow, timeout=5.0
                )
            except MasterUnreachable as e:
                self._deliver(self.dapp.freshness_failed, str(e))
                self._stop.wait(1.0)
                continue
            except NotFound as e:
                self._deliver(self._failed, str(e))
                return
            except Exception as e:  # noqa: BLE001 - shown, then retried
                self._deliver(self._failed, str(e))
                self._stop.wait(2.0)
                continue
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
                if not self._deliver(self._append, lines):
                    return
            if page.get("done") and not logs:
                self._deliver(self._finished)
                return
            follow = len(logs) < PAGE  # catch up first, then long-poll
            if follow and not logs:
                self._stop.wait(0.2)  # masters that answer a follow at once (fakes, old ones)

    def _append(self, lines: list[LogLine]) -> None:
        self.dapp.freshness_ok()
        self.error = None
        self.logview.append(lines)
        self.update_status()

    def _finished(self) -> None:
        self.done = True
        self.update_status()

    def _failed(self, message: str) -> None:
        self.error = message
        self.update_status()

    # ---- status line --------------------------------------------------------------------------
    def update_status(self) -> None:
        log = self.logview
        t = Text(f" trial {self.trial_id} ", "bold")
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

        self.app.push_screen(Prompt("/", log.search, hint="search (n / N next, & filter)"), done)

    def action_toggle_filter(self) -> None:
        log = self.logview
        if not log.search:
            self.dapp.toast("search first (/), then & shows only matching lines")
            return
        log.set_search(log.search, only_matching=not log.only_matching)
        self.update_status()

    def action_find(self, direction: int) -> None:
        if self.logview.search and not self.logview.find(direction):
            self.dapp.toast(f"no more matches for “{self.logview.search}”")
        self.update_status()

    def action_error(self, direction: int) -> None:
        if not self.logview.find(direction, errors=True):
            self.dapp.toast("no more errors")
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
        default = f"trial-{self.trial_id}.log"

        def done(value: str | None) -> None:
            if value is None:
                return
            path = Path(value or default).expanduser()
            try:
                n = self.logview.save(path)
            except OSError as e:
                self.dapp.toast(f"cannot save to {path}: {e}", error=True)
                return
            self.dapp.toast(f"saved {n} lines to {path}")

        self.app.push_screen(Prompt("save to", default, hint="save the log to a file"), done)

    def action_trial(self) -> None:
        self.dapp.open_view("trial", self.trial_id)

    def action_back(self) -> None:
        log = self.logview
        if log.search:
            log.set_search("", only_matching=False)
            self.update_status()
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()
