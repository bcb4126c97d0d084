"""What every view shares: the base screen (header, footer, the prompt line, background fetches,
`/` filter, Esc), and the modal screens: confirmation, help.

Data flow: a view fetches in Textual thread workers (`fetch_in_background`), which post the
view's own messages (rows built off the UI thread) back to it; the app-wide data arrives through
the app's reactive `cluster` attribute, which views `watch`. Views talk to the app only through
the messages in tui/messages.py; they never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Label, Static
from textual.worker import Worker, get_current_worker

from harness.api import DetError, MasterUnreachable, NotFound
from tui.context import Context
from tui.data import experiment_action_allowed, job_action_allowed
from tui.messages import MasterChanged, MasterStatus, OpenView, Toast
from tui.widgets.commandline import CommandLine
from tui.widgets.header import HeaderBar
from tui.widgets.table import ResourceTable

# Actions that change something on the master: hidden with --readonly.
MUTATING = frozenset(
    {
        "raise_priority",
        "lower_priority",
        "move_ahead",
        "move_behind",
        "change_pool",
        "set_weight",
        "pause",
        "activate",
        "kill",
    }
)
EXPERIMENT_VERBS = ("pause", "activate", "kill")


class FetchFailed(Message):
    """A background fetch of this view failed (other than the master being unreachable)."""

    def __init__(self, group: str, error: Exception) -> None:
        super().__init__()
        self.group = group
        self.error = error


class ViewScreen(Screen):
    """A full view: header bar, body, prompt line, footer; refreshes itself while visible."""

    VIEW = "view"
    REFRESH_S: float | None = None  # refresh every so many seconds while visible; None: never
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        # priority: runs before the next key is routed, so what follows lands in the prompt
        Binding("slash", "filter", "Filter", priority=True),
    ]

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.ctx = ctx
        self._fetches: dict[str, Worker] = {}
        self._last_error: str | None = None
        self._allowed: tuple[bool | None, ...] | None = None

    def compose(self) -> ComposeResult:
        yield HeaderBar(self.title_text, self.ctx)
        yield from self.body()
        yield CommandLine()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    @property
    def title_text(self) -> str:
        return self.VIEW

    @property
    def command_line(self) -> CommandLine:
        return self.query_one(CommandLine)

    def on_mount(self) -> None:
        if self.REFRESH_S is not None:
            self.set_interval(self.REFRESH_S * self.ctx.interval_scale, self.refresh_data)
        self.refresh_data(now=True)

    def on_screen_resume(self) -> None:
        # what the view had is still on it (shown at once); fresh data follows from a worker
        self.refresh_data(now=True)

    # ---- background fetches (Textual thread workers) -------------------------------------------
    def refresh_data(self, now: bool = False) -> None:
        """Fetch this view's data in the background (override; `now`: an action changed it)."""

    def fetch_in_background(
        self, group: str, fetch: Callable[[], Message | None], *, now: bool = False
    ) -> None:
        """Run `fetch` (blocking API calls, row building) in a thread worker while this view is
        visible and post the message it returns to this view. A refresh while the last one of
        `group` still runs is skipped (a slow master never piles up requests) unless `now`, which
        supersedes it (exclusive group: the old answer is dropped)."""
        if not self.is_current:
            return
        running = self._fetches.get(group)
        if running is not None and running.is_running and not now:
            return
        self._fetches[group] = self.run_worker(
            lambda: self._fetch(group, fetch),
            name=group,
            group=f"{id(self)}:{group}",
            thread=True,
            exclusive=True,
            exit_on_error=False,
        )

    def _fetch(self, group: str, fetch: Callable[[], Message | None]) -> None:
        worker = get_current_worker()
        try:
            message = fetch()
        except MasterUnreachable as e:
            self.post_message(MasterStatus(str(e)))
            return
        except Exception as e:  # noqa: BLE001 - shown by the view (toast, 404 text), then retried
            if not worker.is_cancelled:
                self.post_message(FetchFailed(group, e))
            return
        if worker.is_cancelled:
            return  # a newer fetch of the same group replaced this one
        self._last_error = None  # the same error, should it come back, is shown again
        self.post_message(MasterStatus(None))
        if message is not None:
            self.post_message(self.Fetched(group, worker, message))

    class Fetched(Message):
        """A background fetch's answer, on its way to the UI thread."""

        def __init__(self, group: str, worker: Worker, message: Message) -> None:
            super().__init__()
            self.group, self.worker, self.message = group, worker, message

    def on_view_screen_fetched(self, fetched: ViewScreen.Fetched) -> None:
        fetched.stop()
        # Only the newest fetch of the group is shown, decided here on the UI thread where fetches
        # start: a superseded worker can pass its is_cancelled check just before the newer fetch
        # starts, and its older answer would then land last and undo the newer one.
        if self._fetches.get(fetched.group) is fetched.worker:
            self.post_message(fetched.message)

    def on_fetch_failed(self, message: FetchFailed) -> None:
        if isinstance(message.error, NotFound):
            self.not_found(message.error)
            return
        text = str(message.error) or type(message.error).__name__
        if text != self._last_error:
            self._last_error = text
            self.post_message(Toast(text, error=True))

    def not_found(self, error: NotFound) -> None:
        self.post_message(Toast(str(error), error=True))

    # ---- actions on the master (thread workers; results as toasts) ------------------------------
    def call_api(self, fn: Callable[[], str | None]) -> None:
        """Call the API in a worker (`fn`); toast what it returns or its error, then refresh."""

        def work() -> None:
            try:
                message = fn()
            except MasterUnreachable as e:
                self.post_message(MasterStatus(str(e)))
                self.post_message(Toast(str(e), error=True))
            except DetError as e:
                self.post_message(Toast(str(e), error=True))
            else:
                if message:
                    self.post_message(Toast(message))
            self.post_message(MasterChanged())
            self.post_message(self.Changed())

        self.run_worker(work, thread=True, group="actions", exit_on_error=False)

    class Changed(Message):
        """This view's action went through: refresh it now."""

    def on_view_screen_changed(self, message: ViewScreen.Changed) -> None:
        message.stop()
        self.refresh_data(now=True)

    def experiment_action(self, verb: str, exp_ids: Sequence[int]) -> None:
        if not exp_ids:
            return
        api = self.ctx.api
        method = {
            "pause": api.pause_experiment,
            "activate": api.activate_experiment,
            "kill": api.kill_experiment,
        }[verb]
        past = {"pause": "paused", "activate": "activated", "kill": "killed"}[verb]

        def run() -> str:
            done, errors = [], []
            for i in exp_ids:
                try:
                    method(i)
                    done.append(str(i))
                except DetError as e:
                    errors.append(str(e))
            if errors:
                raise DetError("; ".join(errors))
            return f"{past} experiment {', '.join(done)}"

        self.call_api(run)

    def experiments_allowed(
        self, action: str, experiments: Sequence[tuple[str | None, str | None]]
    ) -> bool:
        """Whether `action` (pause, activate, kill) may be done to every one of `experiments`,
        given as (state, owner): the state must allow it and we must own it or be an admin."""
        return bool(experiments) and all(
            experiment_action_allowed(action, state) and job_action_allowed(owner, self.ctx.user)
            for state, owner in experiments
        )

    def help_keys(self) -> list[tuple[str, str]]:
        """This view's own keys for the help overlay (those every view has are listed apart),
        leaving out what cannot be done here now."""
        keys: list[tuple[str, str]] = []
        seen: set[str] = set()
        for cls in type(self).__mro__:
            if cls is ViewScreen or not cls.__module__.startswith("tui."):
                continue
            for b in cls.__dict__.get("BINDINGS", []):
                if not isinstance(b, Binding) or not b.description or b.action in seen:
                    continue
                if self.check_action(b.action.split("(")[0], ()) is False:
                    continue
                seen.add(b.action)
                keys.append((key_label(b.key), b.description))
        return keys

    def open_experiment_logs(self, exp_id: int) -> None:
        """The logs of the experiment's running trial (else its newest), found in a worker."""
        api = self.ctx.api

        def work() -> None:
            try:
                trials = api.describe_experiment(exp_id).get("trials") or []
            except DetError as e:
                self.post_message(Toast(str(e), error=True))
                return
            if not trials:
                self.post_message(Toast(f"experiment {exp_id} has no trials yet"))
                return
            running = [t for t in trials if t.get("display_state") == "RUNNING"]
            pick = running[0] if running else max(trials, key=lambda t: t["id"])
            self.post_message(OpenView("logs", pick["id"]))

        self.run_worker(work, thread=True, group="actions", exit_on_error=False)

    def open_view(self, view: str, ident: int | str | None = None) -> None:
        self.post_message(OpenView(view, ident))

    def toast(self, text: str, error: bool = False) -> None:
        self.post_message(Toast(text, error))

    # ---- tables: filter, Esc ------------------------------------------------------------------
    def main_table(self) -> ResourceTable | None:
        focused = self.focused
        if isinstance(focused, ResourceTable):
            return focused
        tables = list(self.query(ResourceTable))
        return tables[0] if tables else None

    def ask(self, prefix: str, value: str = "", **kw: object) -> None:
        """Open the prompt line (see CommandLine.ask)."""
        self.command_line.ask(prefix, value, **kw)  # type: ignore[arg-type]

    def action_filter(self) -> None:
        table = self.main_table()
        if table is None:
            return
        before = table.filter_text
        self.ask(
            "/",
            before,
            hint="filter (live); Enter keeps it, Esc restores",
            on_change=table.set_filter,
            on_submit=lambda value: table.set_filter(value if value is not None else before),
        )

    def action_back(self) -> None:
        table = self.main_table()
        if table is not None and table.filter_text:
            table.set_filter("")
        elif table is not None and table.marked:
            table.clear_marks()
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("filter", "search") and self.command_line.is_open:
            return False  # `/` is typed into the open prompt line
        return not (action in MUTATING and self.ctx.readonly)

    def on_resource_table_highlighted(self, message: ResourceTable.Highlighted) -> None:
        self.maybe_refresh_bindings()

    # Actions whose availability depends on the highlighted row (besides MUTATING ones).
    ROW_ACTIONS: ClassVar[frozenset[str]] = frozenset()

    def maybe_refresh_bindings(self) -> None:
        """Redraw the footer only when what may be done changed (not on every cursor move)."""
        allowed = tuple(self.check_action(a, ()) for a in sorted(MUTATING | self.ROW_ACTIONS))
        if allowed != self._allowed:
            self._allowed = allowed
            self.refresh_bindings()


class Confirm(ModalScreen[bool]):
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Vertical { width: 64; height: auto; border: thick $error; padding: 1 2;
                         background: $surface; }
    Confirm Label { width: 100%; }
    Confirm .keys { color: $text-muted; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Label("[b]y[/b] yes    [b]n[/b] / Esc no", classes="keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


# Each line fits the overlay's width (no wrapping against its border).
GLOBAL_HELP = [
    (":", "command: queue exps gpu agents models tasks help quit"),
    ("", "  or exp ID, trial ID, logs ID (→ completes)"),
    ("1 2 3 4 5", "views: GPUs/agents, job queue, experiments, models, tasks"),
    ("?", "this help"),
    ("/", "filter the table (live); Esc clears"),
    ("s / S", "sort by the next column / reverse"),
    ("space", "mark a row (actions then apply to every marked row)"),
    ("j k ↑ ↓ g G", "move; PgUp/PgDn, ctrl+u/d half pages"),
    ("Enter", "open"),
    ("Esc", "back (or clear filter / marks)"),
    ("q, ctrl+c", "quit"),
]


class Help(ModalScreen[None]):
    DEFAULT_CSS = """
    Help { align: center middle; }
    Help > VerticalScroll { width: 84; max-height: 90%; height: auto; border: thick $accent;
                            padding: 0 2; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close"),
    ]

    def __init__(self, view: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.view = view
        self.keys = keys

    def compose(self) -> ComposeResult:
        text = Text()
        text.append(f"{self.view} keys\n", "bold underline")
        for key, desc in self.keys:
            text.append(f"  {key:<16}", "bold cyan")
            text.append(desc + "\n")
        text.append("\neverywhere\n", "bold underline")
        for key, desc in GLOBAL_HELP:
            text.append(f"  {key:<16}", "bold cyan")
            text.append(desc + "\n")
        with VerticalScroll():
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)


def key_label(key: str) -> str:
    names = {
        "slash": "/",
        "question_mark": "?",
        "colon": ":",
        "plus": "+",
        "minus": "-",
        "equals_sign": "=",
        "ampersand": "&",
        "left_square_bracket": "[",
        "right_square_bracket": "]",
        "space": "space",
    }
    return ",".join(names.get(k, k) for k in key.split(","))
