"""`LogView`: a live log tail with bounded memory, follow mode, search, filter and wrapping.

Only visible lines are rendered. Scrolling up stops following (the screen shows a badge);
`G`/End or `f` follows again. At most `max_lines` lines are kept: the oldest tenth is dropped
when the log grows past it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.data import is_error_line


@dataclass(slots=True)
class LogLine:
    seq: int
    timestamp: str
    stream: str
    line: str

    @property
    def error(self) -> bool:
        return is_error_line(self.line)


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    LogView { height: 1fr; overflow-x: hidden; }
    LogView > .log--time { color: $text-muted; }
    LogView > .log--error { color: $error; }
    LogView > .log--master { color: $accent; }
    LogView > .log--match { background: $warning 40%; }
    LogView > .log--current { background: $primary 50%; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "log--time",
        "log--error",
        "log--master",
        "log--match",
        "log--current",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "scroll_lines(-1)", "Up", show=False),
        Binding("down,j", "scroll_lines(1)", "Down", show=False),
        Binding("pageup,ctrl+b", "scroll_page(-1)", "Page up", show=False),
        Binding("pagedown,ctrl+f", "scroll_page(1)", "Page down", show=False),
        Binding("ctrl+u", "scroll_half(-1)", "Half page up", show=False),
        Binding("ctrl+d", "scroll_half(1)", "Half page down", show=False),
        Binding("home,g", "top", "Top", show=False),
        Binding("end,G", "follow", "Bottom + follow", show=False),
    ]

    class FollowChanged(Message):
        def __init__(self, following: bool) -> None:
            super().__init__()
            self.following = following

    def __init__(self, max_lines: int = 50_000, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.max_lines = max(100, max_lines)
        self.entries: list[LogLine] = []
        self.view: list[tuple[LogLine, int, int]] = []
        self.following = True
        self.timestamps = False
        self.wrap = False
        self.search = ""
        self.only_matching = False
        self.current: int | None = None  # view index of the current match
        self.dropped = 0

    # ---- data ---------------------------------------------------------------------------------
    def append(self, lines: Iterable[LogLine]) -> None:
        new = list(lines)
        if not new:
            return
        self.entries.extend(new)
        if len(self.entries) > self.max_lines:
            drop = len(self.entries) - self.max_lines + self.max_lines // 10
            self.dropped += drop
            del self.entries[:drop]
            self._rebuild()
        else:
            for e in new:
                if self._visible(e):
                    self.view.extend(self._split(e))
            self._resize_virtual()
        if self.following:
            self.scroll_end(animate=False, immediate=True)
        self.refresh()

    def _visible(self, e: LogLine) -> bool:
        return not (self.only_matching and self.search) or self.search.lower() in e.line.lower()

    def _prefix_len(self) -> int:
        return 9 if self.timestamps else 0

    def _split(self, e: LogLine) -> list[tuple[LogLine, int, int]]:
        n = len(e.line)
        if not self.wrap:
            return [(e, 0, n)]
        w = max(10, self.size.width - self._prefix_len() - 1)
        return [(e, a, min(a + w, n)) for a in range(0, max(n, 1), w)]

    def _rebuild(self) -> None:
        view: list[tuple[LogLine, int, int]] = []
        for e in self.entries:
            if self._visible(e):
                view.extend(self._split(e))
        self.view = view
        self.current = None
        self._resize_virtual()
        if self.following:
            self.scroll_end(animate=False, immediate=True)
        self.refresh()

    def _resize_virtual(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.view))

    def on_resize(self, event: events.Resize) -> None:
        if self.wrap:
            self._rebuild()
        else:
            self._resize_virtual()

    # ---- toggles, search ------------------------------------------------------------------------
    def set_timestamps(self, on: bool) -> None:
        self.timestamps = on
        self._rebuild()

    def set_wrap(self, on: bool) -> None:
        self.wrap = on
        self._rebuild()

    def set_search(self, text: str, only_matching: bool | None = None) -> None:
        self.search = text
        if only_matching is not None:
            self.only_matching = only_matching
        self._rebuild()

    def find(self, direction: int = 1, errors: bool = False) -> bool:
        """Move to the next (or previous) line matching the search, or an error line."""
        if not self.view:
            return False
        top = int(self.scroll_offset.y)
        start = self.current if self.current is not None else top - (1 if direction > 0 else 0)
        needle = self.search.lower()
        n = len(self.view)
        i = start
        for _ in range(n):
            i += direction
            if i < 0 or i >= n:
                return False
            e, a, _b = self.view[i]
            if a:
                continue  # only the first chunk of a wrapped line
            hit = e.error if errors else (needle and needle in e.line.lower())
            if hit:
                self.current = i
                self.set_following(False)
                self.scroll_to(y=max(0, i - 2), animate=False, immediate=True)
                self.refresh()
                return True
        return False

    def save(self, path: Path) -> int:
        with open(path, "w") as f:
            for e in self.entries:
                f.write(f"{e.timestamp} [{e.stream}] {e.line}\n")
        return len(self.entries)

    # ---- follow and scrolling ---------------------------------------------------------------
    def set_following(self, on: bool) -> None:
        if on != self.following:
            self.following = on
            self.post_message(self.FollowChanged(on))
        if on:
            self.current = None
            self.scroll_end(animate=False, immediate=True)

    def action_follow(self) -> None:
        self.set_following(True)

    def action_top(self) -> None:
        self.set_following(False)
        self.scroll_home(animate=False, immediate=True)

    def action_scroll_lines(self, n: int) -> None:
        if n < 0:
            self.set_following(False)
        self.scroll_to(y=self.scroll_offset.y + n, animate=False, immediate=True)

    def action_scroll_page(self, direction: int) -> None:
        self.action_scroll_lines(direction * max(1, self.size.height - 1))

    def action_scroll_half(self, direction: int) -> None:
        self.action_scroll_lines(direction * max(1, self.size.height // 2))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.set_following(False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.refresh()

    # ---- rendering ----------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index = int(self.scroll_offset.y) + y
        if index >= len(self.view):
            if not self.view and y == 0:
                return self._strip(Text("  waiting for log lines…", style="dim italic"), width)
            return Strip.blank(width, self.rich_style)
        e, a, b = self.view[index]
        text = Text(no_wrap=True)
        if self.timestamps:
            ts = e.timestamp[11:19] if a == 0 else ""
            text.append(ts.ljust(9), self.get_component_rich_style("log--time"))
        body = Text(e.line[a:b], no_wrap=True)
        if e.stream == "master":
            body.stylize(self.get_component_rich_style("log--master"))
        elif e.error:
            body.stylize(self.get_component_rich_style("log--error"))
        if self.search:
            body.highlight_words(
                [self.search], self.get_component_rich_style("log--match"), case_sensitive=False
            )
        text.append_text(body)
        if index == self.current:
            cur = self.get_component_rich_style("log--current")
            text.pad_right(max(0, width - text.cell_len))
            text.stylize_before(Style(bgcolor=cur.bgcolor))
        return self._strip(text, width)

    def _strip(self, text: Text, width: int) -> Strip:
        segments = list(text.render(self.app.console, end=""))
        return Strip(segments).crop_extend(0, width, self.rich_style).apply_style(self.rich_style)
