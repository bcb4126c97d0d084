"""The prompt line at the bottom of every view: `:` commands, `/` filters, values.

It is always mounted (hidden until asked), and `ask()` shows it and moves the focus to its input
at once, in the same step as the key that opened it. Keys typed right after `:` therefore land in
it however busy the machine is: a prompt pushed as a new screen would only take the focus once
mounted, and the keys typed meanwhile went to the view underneath (or were lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Footer, Input, Label


class PromptInput(Input):
    """The prompt's input. Enter and Esc close the prompt right here, in key order (a binding
    would act only once the key has bubbled up, after the keys typed behind it), and keys that
    reach it after that (already routed here) are handed back to the app, which routes them to
    the view: none is lost."""

    def on_key(self, event: events.Key) -> None:
        line = self.parent
        if not isinstance(line, CommandLine):
            return
        if not line.is_open:
            event.prevent_default()
            event.stop()
            self.app.post_message(events.Key(event.key, event.character))
        elif event.key in ("enter", "escape"):
            event.prevent_default()
            event.stop()
            line.close(self.value if event.key == "enter" else None)


class CommandLine(Vertical):
    DEFAULT_CSS = """
    CommandLine { dock: bottom; height: auto; display: none; }
    CommandLine > Label { width: 100%; color: $text-muted; padding: 0 1; }
    CommandLine > Input, CommandLine > Input:focus, CommandLine > Input.-invalid {
        width: 100%; border: none; height: 1; padding: 0 1; background: $boost;
    }
    """

    def __init__(self) -> None:
        super().__init__(id="command-line")
        self.prefix = ""
        self._on_change: Callable[[str], None] | None = None
        self._on_submit: Callable[[str | None], None] | None = None
        self._return_to: Widget | None = None

    def compose(self) -> ComposeResult:
        yield Label(id="command-hint")
        # compact: Textual's own `Input:focus { border: tall }` is more specific than a plain
        # `CommandLine > Input`, and a one-row input with a border shows only the border.
        yield PromptInput(id="command-input", compact=True)

    @property
    def input(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def is_open(self) -> bool:
        return bool(self.display)

    def ask(
        self,
        prefix: str,
        value: str = "",
        *,
        hint: str = "",
        suggestions: Iterable[str] = (),
        on_change: Callable[[str], None] | None = None,
        on_submit: Callable[[str | None], None] | None = None,
    ) -> None:
        """Open the line with `value`; `on_submit(text)` on Enter, `on_submit(None)` on Esc."""
        screen = self.screen
        if not self.is_open:
            self._return_to = screen.focused
        self.prefix = prefix
        self._on_change, self._on_submit = None, None  # no callbacks for our own value change
        inp = self.input
        words = list(suggestions)
        inp.suggester = SuggestFromList(words, case_sensitive=False) if words else None
        inp.placeholder = prefix
        inp.value = value
        inp.cursor_position = len(value)
        self.query_one(Label).update(f"{prefix}  {hint}".rstrip())
        self._on_change, self._on_submit = on_change, on_submit
        for footer in screen.query(Footer):
            footer.display = False  # the line takes the footer's place
        self.display = True
        screen.set_focus(inp)  # now, not after a refresh: the next key goes here

    def close(self, value: str | None) -> None:
        if not self.is_open:
            return
        callback, self._on_submit, self._on_change = self._on_submit, None, None
        self.display = False
        screen = self.screen
        for footer in screen.query(Footer):
            footer.display = True
        back = self._return_to
        self._return_to = None
        screen.set_focus(back if back is not None and back.is_attached else None)
        if callback is not None:
            callback(value)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self._on_change is not None and self.is_open:
            self._on_change(event.value)
