"""`ResourceTable`: a fast, virtual table for 10,000s of rows, updated in place.

Only the visible lines are rendered (Textual's line API), each cached until its row changes, so a
refresh of 10,000 jobs costs a list swap plus ~40 lines of rendering. An `Age` cell (a job's
wait) is worked out when its line is drawn, so it ticks without the rows being rebuilt. The cursor
follows its row's key across updates, filtering and sorting; rows can be marked for bulk actions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.data import fmt_duration


@dataclass(frozen=True)
class Age:
    """A cell showing how long ago `since` (a POSIX time; None: `-`) was, as of when it is drawn
    (the table's clock): the row itself never changes as time passes."""

    since: float | None

    def text(self, now: float) -> str:
        return "-" if self.since is None else fmt_duration(now - self.since)


AGE_WIDTH = 6  # `59m59s`, `23h59m`, `3d04h`

Cell = Text | str | Age


@dataclass
class Column:
    key: str
    label: str
    width: int | None = None  # None: fit the content (between min_width and max_width)
    min_width: int = 2
    max_width: int = 40
    justify: str = "left"


@dataclass
class Row:
    key: str
    cells: Sequence[Cell]
    sort: Sequence[Any] | None = None  # per-column sort values; default: the cell's text
    data: Any = None  # whatever the screen wants back (the JSON object)
    _search: str | None = field(default=None, repr=False)
    _sig: int | None = field(default=None, repr=False)

    @property
    def search(self) -> str:
        if self._search is None:
            self._search = " ".join(_plain(c) for c in self.cells).lower()
        return self._search

    @property
    def signature(self) -> int:
        """Changes whenever what the row shows changes (its render cache key)."""
        if self._sig is None:
            self._sig = hash(
                tuple(
                    c if isinstance(c, str | Age) else (c.plain, repr(c.spans)) for c in self.cells
                )
            )
        return self._sig


class RowCache:
    """Reuses the `Row` of a key whose source values did not change since the last build, so a
    refresh of 10,000 mostly unchanged rows builds only the changed ones (and keeps their render
    cache and search text). Entries not seen in a build are dropped at `finish()`."""

    def __init__(self) -> None:
        self._old: dict[str, tuple[Any, Row]] = {}
        self._new: dict[str, tuple[Any, Row]] = {}

    def get(self, key: str, sig: Any) -> Row | None:
        hit = self._old.get(key)
        if hit is not None and hit[0] == sig:
            self._new[key] = hit
            return hit[1]
        return None

    def put(self, key: str, sig: Any, row: Row) -> Row:
        self._new[key] = (sig, row)
        return row

    def finish(self) -> None:
        self._old, self._new = self._new, {}


def column_widths(columns: Sequence[Column], rows: Sequence[Row], sample: int = 2000) -> list[int]:
    """The width each column's content wants: its header and (a sample of) its cells, at least
    `min_width`, a fixed `width` as it is. Not capped at `max_width`: `fit_widths` does that
    once the table knows how wide it is. Call it off the UI thread."""
    widths = []
    some = rows if len(rows) <= sample else rows[:sample]
    for i, col in enumerate(columns):
        if col.width is not None:
            widths.append(col.width)
            continue
        w = len(col.label)
        for r in some:
            if i < len(r.cells):
                n = _cell_len(r.cells[i])
                if n > w:
                    w = n
        widths.append(max(col.min_width, w))
    return widths


def fit_widths(columns: Sequence[Column], wanted: Sequence[int], available: int) -> list[int]:
    """Column widths for a table `available` cells wide: each column gets what its content
    wants up to its `max_width`; room left over goes to the columns cut at `max_width`, left to
    right, up to their content (hparams and metric names are not cut to `5…` beside empty
    screen). A row is a mark cell plus each column and a space after it."""
    widths = [
        w if col.width is not None else min(w, max(col.min_width, col.max_width))
        for col, w in zip(columns, wanted, strict=True)
    ]
    spare = available - 1 - sum(widths) - len(widths)
    for i, want in enumerate(wanted):
        if spare <= 0:
            break
        extra = min(spare, want - widths[i])
        if extra > 0:
            widths[i] += extra
            spare -= extra
    return widths


def _plain(cell: Cell) -> str:
    if isinstance(cell, Age):
        return ""  # changes as time passes: neither searched nor sorted by its text
    return cell if isinstance(cell, str) else cell.plain


def _cell_len(cell: Cell) -> int:
    if isinstance(cell, Age):
        return AGE_WIDTH
    return len(cell) if isinstance(cell, str) else cell.cell_len


class ResourceTable(ScrollView, can_focus=True):
    """A table with a row cursor, `/` filter, sort keys and marks."""

    DEFAULT_CSS = """
    ResourceTable { height: 1fr; overflow-x: hidden; overflow-y: auto; }
    ResourceTable > .rt--header { text-style: bold; color: $text-accent; }
    ResourceTable > .rt--cursor { background: $block-cursor-background; }
    ResourceTable:blur > .rt--cursor { background: $block-cursor-blurred-background; }
    ResourceTable > .rt--marked { color: $warning; text-style: bold; }
    ResourceTable > .rt--empty { color: $text-muted; text-style: italic; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rt--header",
        "rt--cursor",
        "rt--marked",
        "rt--empty",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup,ctrl+b", "page(-1)", "Page up", show=False),
        Binding("pagedown,ctrl+f", "page(1)", "Page down", show=False),
        Binding("ctrl+u", "half_page(-1)", "Half page up", show=False),
        Binding("ctrl+d", "half_page(1)", "Half page down", show=False),
        Binding("home,g", "first", "First row", show=False),
        Binding("end,G", "last", "Last row", show=False),
        Binding("enter", "select", "Open", show=False),
        Binding("space", "mark", "Mark", show=False),
        Binding("s", "sort_next", "Sort", show=False),
        Binding("S", "sort_reverse", "Reverse sort", show=False),
    ]

    class Highlighted(Message):
        def __init__(self, table: ResourceTable, row: Row | None) -> None:
            super().__init__()
            self.table = table
            self.row = row

        @property
        def control(self) -> ResourceTable:
            return self.table

    class Selected(Highlighted):
        pass

    def __init__(
        self,
        columns: Sequence[Column],
        *,
        empty: str = "nothing here",
        markable: bool = True,
        name: str | None = None,
        id: str | None = None,  # noqa: A002
        classes: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = list(columns)
        self.clock = clock  # for `Age` cells
        self.empty = empty
        self.markable = markable
        self.rows: list[Row] = []
        self.view: list[Row] = []
        self.marked: set[str] = set()
        self.filter_text = ""
        self.sort_column: int | None = None
        self.sort_reverse = False
        self._wanted: list[int] = column_widths(self.columns, [])  # what the content wants
        self._widths: list[int] = fit_widths(self.columns, self._wanted, 0)  # what it gets
        self._cursor_key: str | None = None
        self._cache: LRUCache[tuple, Strip] = LRUCache(1024)
        self._layout = 0
        self.loaded = False
        self.cursor = 0

    # ---- data ---------------------------------------------------------------------------------
    def set_rows(
        self, rows: list[Row], empty: str | None = None, widths: list[int] | None = None
    ) -> None:
        """Replace the rows; the cursor stays on the same key (or the same index when it's gone).
        `widths` from `column_widths()` (computed in a worker) saves measuring here."""
        self.rows = rows
        self.loaded = True
        if empty is not None:
            self.empty = empty
        keys = {r.key for r in rows}
        if self.marked:
            self.marked &= keys
        self._compute_widths(widths)
        self._rebuild_view()

    def set_empty(self, message: str) -> None:
        self.empty = message
        self.set_rows([])

    def _compute_widths(self, widths: list[int] | None = None) -> None:
        if widths is None or len(widths) != len(self.columns):
            widths = column_widths(self.columns, self.rows)
        self._wanted = widths
        self._fit_widths()

    def _fit_widths(self) -> None:
        widths = fit_widths(self.columns, self._wanted, self.size.width)
        if widths != self._widths:
            self._widths = widths
            self._layout += 1

    def _rebuild_view(self) -> None:
        rows = self.rows
        if self.filter_text:
            needle = self.filter_text.lower()
            rows = [r for r in rows if needle in r.search]
        if self.sort_column is not None:
            col = self.sort_column

            def key(r: Row) -> tuple:
                v = r.sort[col] if r.sort is not None and col < len(r.sort) else None
                if v is None:
                    v = _plain(r.cells[col]) if col < len(r.cells) else ""
                return (0, v) if isinstance(v, int | float) else (1, str(v))

            rows = sorted(rows, key=key, reverse=self.sort_reverse)
        self.view = rows
        index = None
        if self._cursor_key is not None:
            if self.cursor < len(rows) and rows[self.cursor].key == self._cursor_key:
                index = self.cursor
            for i, r in enumerate(rows if index is None else ()):
                if r.key == self._cursor_key:
                    index = i
                    break
        if index is None:
            index = min(self.cursor, max(0, len(rows) - 1))
        self.virtual_size = Size(self.size.width, len(rows) + 1)
        self._set_cursor(index, announce=True)
        self.refresh()

    @property
    def current(self) -> Row | None:
        if 0 <= self.cursor < len(self.view):
            return self.view[self.cursor]
        return None

    def selection(self) -> list[Row]:
        """Marked rows (in view order), else the row under the cursor."""
        if self.marked:
            return [r for r in self.rows if r.key in self.marked]
        return [self.current] if self.current else []

    def move_to_key(self, key: str) -> None:
        for i, r in enumerate(self.view):
            if r.key == key:
                self._set_cursor(i)
                return

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._rebuild_view()

    # ---- cursor and scrolling -----------------------------------------------------------------
    def _set_cursor(self, index: int, announce: bool = True) -> None:
        index = max(0, min(index, len(self.view) - 1)) if self.view else 0
        old_key = self._cursor_key
        self.cursor = index
        row = self.current
        self._cursor_key = row.key if row else None
        self._scroll_to_cursor()
        self.refresh()
        if announce or (row.key if row else None) != old_key:
            self.post_message(self.Highlighted(self, row))

    def _scroll_to_cursor(self) -> None:
        body = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + body:
            self.scroll_to(y=self.cursor - body + 1, animate=False, immediate=True)

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.view) + 1)
        self._cache.clear()
        self._fit_widths()
        self._scroll_to_cursor()

    def action_cursor(self, delta: int) -> None:
        self._set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._set_cursor(self.cursor + direction * max(1, self.size.height - 2))

    def action_half_page(self, direction: int) -> None:
        self._set_cursor(self.cursor + direction * max(1, (self.size.height - 1) // 2))

    def action_first(self) -> None:
        self._set_cursor(0)

    def action_last(self) -> None:
        self._set_cursor(len(self.view) - 1)

    def action_select(self) -> None:
        if self.current is not None:
            self.post_message(self.Selected(self, self.current))

    def action_mark(self) -> None:
        row = self.current
        if row is None or not self.markable:
            return
        if row.key in self.marked:
            self.marked.discard(row.key)
        else:
            self.marked.add(row.key)
        self._set_cursor(self.cursor + 1)
        self.refresh()

    def clear_marks(self) -> None:
        self.marked.clear()
        self.refresh()

    def action_sort_next(self) -> None:
        n = len(self.columns)
        self.sort_column = 0 if self.sort_column is None else self.sort_column + 1
        if self.sort_column >= n:
            self.sort_column = None
        self.sort_reverse = False
        self._layout += 1
        self._rebuild_view()

    def action_sort_reverse(self) -> None:
        if self.sort_column is None:
            self.sort_column = 0
        self.sort_reverse = not self.sort_reverse
        self._layout += 1
        self._rebuild_view()

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            index = int(self.scroll_offset.y) + event.y - 1
            if index < len(self.view):
                if index == self.cursor and event.chain >= 2:
                    self.action_select()
                self._set_cursor(index)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.refresh()

    # ---- rendering ----------------------------------------------------------------------------
    def _header(self, width: int) -> Strip:
        text = Text(" ", no_wrap=True)
        for i, (col, w) in enumerate(zip(self.columns, self._widths, strict=True)):
            label = col.label
            if self.sort_column == i:
                label += "▼" if self.sort_reverse else "▲"
            text.append(_fit(Text(label), w, col.justify))
            text.append(" ")
        style = self.get_component_rich_style("rt--header")
        text.stylize(style)
        return self._strip(text, width)

    def _strip(self, text: Text, width: int) -> Strip:
        segments = list(text.render(self.app.console, end=""))
        return Strip(segments).crop_extend(0, width, self.rich_style).apply_style(self.rich_style)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            return self._header(width)
        index = int(self.scroll_offset.y) + y - 1
        if not self.view:
            if y == 2:
                style = self.get_component_rich_style("rt--empty")
                msg = self.empty if self.loaded else "loading…"
                return self._strip(Text("  " + msg, style=style), width)
            return Strip.blank(width, self.rich_style)
        if index >= len(self.view):
            return Strip.blank(width, self.rich_style)
        row = self.view[index]
        is_cursor = index == self.cursor
        marked = row.key in self.marked
        focused = self.has_focus
        now = self.clock()
        ages = tuple(c.text(now) for c in row.cells if isinstance(c, Age))
        key = (row.key, row.signature, ages, is_cursor, marked, focused, width, self._layout)
        strip = self._cache.get(key)
        if strip is None:
            strip = self._render_row(row, is_cursor, marked, width, now)
            self._cache[key] = strip
        return strip

    def _render_row(self, row: Row, is_cursor: bool, marked: bool, width: int, now: float) -> Strip:
        text = Text("●" if marked else " ", no_wrap=True)
        for i, (col, w) in enumerate(zip(self.columns, self._widths, strict=True)):
            cell = row.cells[i] if i < len(row.cells) else ""
            if isinstance(cell, Age):
                cell = cell.text(now)
            cell_text = Text(cell, no_wrap=True) if isinstance(cell, str) else cell.copy()
            text.append(_fit(cell_text, w, col.justify))
            text.append(" ")
        if marked:
            text.stylize_before(self.get_component_rich_style("rt--marked"))
        if is_cursor:
            cursor = self.get_component_rich_style("rt--cursor")
            text.stylize_before(cursor)
            text.pad_right(max(0, width - text.cell_len))
            text.stylize_before(Style(bgcolor=cursor.bgcolor), 0, len(text))
        return self._strip(text, width)


def _fit(text: Text, width: int, justify: str) -> Text:
    text.no_wrap = True
    if text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    pad = width - text.cell_len
    if pad > 0:
        if justify == "right":
            text.pad_left(pad)
        else:
            text.pad_right(pad)
    return text
