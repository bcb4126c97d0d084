"""What every view shares: the base screen (header, footer, pollers, `/` filter, Esc), and the
modal screens: the `:` prompt, confirmation, help."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.suggester import SuggestFromList
from textual.widgets import Footer, Input, Label, Static

from harness.api import MasterUnreachable, NotFound
from tui.data import Poller
from tui.widgets.header import HeaderBar
from tui.widgets.table import ResourceTable

if TYPE_CHECKING:
    from tui.app import DetTUI

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


class ViewScreen(Screen):
    """A full view: header bar, body, footer; pollers that run while it is the top view."""

    VIEW = "view"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("slash", "filter", "Filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.pollers: list[Poller] = []
        self._last_error: str | None = None
        self._dapp: DetTUI | None = None

    @property
    def dapp(self) -> DetTUI:
        """The app; also from worker threads and after unmount (a plain `self.app` needs the
        active-app context or the DOM)."""
        if self._dapp is None:
            self._dapp = self.app  # type: ignore[assignment]
        return self._dapp  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield HeaderBar()
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    @property
    def title_text(self) -> str:
        return self.VIEW

    def on_mount(self) -> None:
        self._dapp = self.app  # type: ignore[assignment]
        self.dapp.refresh_header()
        for p in self.pollers:
            p.start()

    def on_unmount(self) -> None:
        for p in self.pollers:
            p.stop()

    def on_screen_resume(self) -> None:
        self.dapp.refresh_header()
        for p in self.pollers:
            p.poke()
        self.refresh_bindings()

    def is_top_view(self) -> bool:
        for screen in reversed(self.app.screen_stack):
            if not isinstance(screen, ModalScreen):
                return screen is self
        return False

    def poll(
        self, name: str, fetch: Callable[[], Any], apply: Callable[[Any], None], interval: float
    ) -> Poller:
        """A poller (started on mount) that runs while this is the top view."""

        def applied(result: Any) -> None:
            self.dapp.freshness_ok()
            self._last_error = None
            apply(result)

        poller = Poller(
            self.app,
            f"{self.VIEW}:{name}",
            fetch,
            applied,
            interval=interval * self.dapp.interval_scale,
            on_error=self.on_api_error,
            active=self.is_top_view,
        )
        self.pollers.append(poller)
        return poller

    def poke(self) -> None:
        for p in self.pollers:
            p.poke()

    def on_api_error(self, error: BaseException) -> None:
        if isinstance(error, MasterUnreachable):
            self.dapp.freshness_failed(str(error))
            return
        if isinstance(error, NotFound):
            self.not_found(error)
            return
        message = str(error) or type(error).__name__
        if message != self._last_error:
            self._last_error = message
            self.dapp.toast(message, error=True)

    def not_found(self, error: NotFound) -> None:
        self.dapp.toast(str(error), error=True)

    # ---- tables: filter, Esc ------------------------------------------------------------------
    def main_table(self) -> ResourceTable | None:
        focused = self.focused
        if isinstance(focused, ResourceTable):
            return focused
        tables = list(self.query(ResourceTable))
        return tables[0] if tables else None

    def action_filter(self) -> None:
        table = self.main_table()
        if table is None:
            return
        self.app.push_screen(
            Prompt("/", table.filter_text, on_change=table.set_filter),
            lambda value: table.set_filter(value if value is not None else table.filter_text),
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
        return not (action in MUTATING and self.dapp.readonly)

    def on_resource_table_highlighted(self, message: ResourceTable.Highlighted) -> None:
        self.maybe_refresh_bindings()

    def maybe_refresh_bindings(self) -> None:
        """Redraw the footer only when what may be done changed (not on every cursor move)."""
        allowed = tuple(self.check_action(a, ()) for a in sorted(MUTATING))
        if allowed != getattr(self, "_allowed", None):
            self._allowed = allowed
            self.refresh_bindings()


class Prompt(ModalScreen[str | None]):
    """A one-line input at the bottom (`:` commands, `/` filters, values); Enter submits,
    Esc cancels. `on_change` sees every keystroke (live filtering)."""

    DEFAULT_CSS = """
    Prompt { align: left bottom; background: transparent; }
    Prompt > Input#prompt { dock: bottom; width: 100%; border: none; height: 1;
                            padding: 0 1; background: $boost; }
    Prompt > Label { dock: bottom; width: 100%; color: $text-muted; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        prefix: str,
        value: str = "",
        *,
        suggestions: Iterable[str] = (),
        hint: str = "",
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self.prefix = prefix
        self.value = value
        self.suggestions = list(suggestions)
        self.hint = hint
        self.on_change_cb = on_change

    def compose(self) -> ComposeResult:
        yield Label(f"{self.prefix}  {self.hint}".rstrip())
        suggester = SuggestFromList(self.suggestions, case_sensitive=False)
        yield Input(value=self.value, placeholder=self.prefix, suggester=suggester, id="prompt")

    def on_mount(self) -> None:
        inp = self.query_one(Input)
        inp.border_title = self.prefix
        inp.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.on_change_cb is not None:
            self.on_change_cb(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        suggestion = getattr(event.input, "_suggestion", "") if self.suggestions else ""
        self.dismiss(suggestion or event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


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


GLOBAL_HELP = [
    (":", "command: queue, exps, exp ID, trial ID, logs ID, gpu, agents, help, quit"),
    ("1 2 3", "views: GPUs/agents, job queue, experiments"),
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
    Help > VerticalScroll { width: 90; max-height: 90%; height: auto; border: thick $accent;
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
