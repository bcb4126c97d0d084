"""`MetricChart`: line charts drawn with braille dots (2x4 per cell), axes and a legend."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from rich.text import Text
from textual.widget import Widget

from tui.data import fmt_number

# Braille dot bits by (x, y) inside a 2x4 cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
COLORS = ("cyan", "magenta", "yellow", "green", "red", "blue", "bright_white")


@dataclass
class Series:
    label: str
    steps: Sequence[float]
    values: Sequence[float]
    color: str = "cyan"


def _finite(steps: Sequence[float], values: Sequence[float]) -> list[tuple[float, float]]:
    out = []
    for s, v in zip(steps, values, strict=False):
        if isinstance(v, int | float) and isinstance(s, int | float) and math.isfinite(v):
            out.append((float(s), float(v)))
    return out


def render_chart(series: Sequence[Series], width: int, height: int, title: str = "") -> Text:
    """The chart as `height` lines of `width` cells (pure, for tests and the widget)."""
    lines: list[Text] = [_legend(series, title)]
    pts = [_finite(s.steps, s.values) for s in series]
    every = [p for ps in pts for p in ps]
    plot_h = max(1, height - 3)  # legend line, x axis line, x labels line
    if not every or width < 16 or height < 5:
        lines.append(Text("  no numeric data to chart", style="dim italic"))
        return Text("\n").join(lines)
    xs = [p[0] for p in every]
    ys = [p[1] for p in every]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x1 == x0:
        x1 = x0 + 1
    labels = [fmt_number(y1), fmt_number((y0 + y1) / 2), fmt_number(y0)]
    gutter = max(len(label) for label in labels) + 1
    plot_w = max(4, width - gutter - 1)
    cells, owner = _plot(series, pts, plot_w, plot_h, (x0, x1, y0, y1))
    for row in range(plot_h):
        lines.append(_plot_row(cells[row], owner[row], _y_label(labels, row, plot_h), gutter))
    lines.append(Text(" " * gutter + "└" + "─" * plot_w, "dim"))
    lines.append(_x_axis(x0, x1, gutter, plot_w))
    return Text("\n").join(lines[:height])


def _legend(series: Sequence[Series], title: str) -> Text:
    legend = Text(no_wrap=True)
    if title:
        legend.append(title + "  ", "bold")
    for s in series:
        legend.append("━━ ", s.color)
        legend.append(s.label + "  ")
    return legend


def _plot(
    series: Sequence[Series],
    pts: list[list[tuple[float, float]]],
    plot_w: int,
    plot_h: int,
    box: tuple[float, float, float, float],
) -> tuple[list[list[int]], list[list[str | None]]]:
    """Each series' points joined by lines on a `plot_w` x `plot_h` grid of braille cells
    spanning `box` (x0, x1, y0, y1): each cell's dot bits and the color that drew it last."""
    x0, x1, y0, y1 = box
    dots_w, dots_h = plot_w * 2, plot_h * 4
    cells = [[0] * plot_w for _ in range(plot_h)]
    owner: list[list[str | None]] = [[None] * plot_w for _ in range(plot_h)]

    def to_px(x: float, y: float) -> tuple[int, int]:
        px = round((x - x0) / (x1 - x0) * (dots_w - 1))
        py = round((y1 - y) / (y1 - y0) * (dots_h - 1))
        return px, py

    def plot(px: int, py: int, color: str) -> None:
        if 0 <= px < dots_w and 0 <= py < dots_h:
            cx, cy = px // 2, py // 4
            cells[cy][cx] |= _DOTS[px % 2][py % 4]
            owner[cy][cx] = color

    for s, ps in zip(series, pts, strict=True):
        prev: tuple[int, int] | None = None
        for x, y in ps:
            cur = to_px(x, y)
            if prev is None:
                plot(*cur, s.color)
            else:
                _line(prev, cur, partial(plot, color=s.color))
            prev = cur
    return cells, owner


def _y_label(labels: list[str], row: int, plot_h: int) -> str:
    """The top, middle and bottom rows carry the y labels (max, middle, min)."""
    if row == 0:
        return labels[0]
    if row == plot_h - 1:
        return labels[2]
    if row == plot_h // 2:
        return labels[1]
    return ""


def _plot_row(cells: list[int], owner: list[str | None], label: str, gutter: int) -> Text:
    line = Text(label.rjust(gutter - 1) + " ┤" if label else " " * gutter + "│", "dim")
    for bits, color in zip(cells, owner, strict=True):
        if bits:
            line.append(chr(0x2800 + bits), color or "")
        else:
            line.append(" ")
    return line


def _x_axis(x0: float, x1: float, gutter: int, plot_w: int) -> Text:
    """The x labels: first and last step, and the middle one where it fits."""
    left, right = fmt_number(int(x0)), fmt_number(int(x1))
    mid = f"steps {fmt_number(int((x0 + x1) / 2))}"
    axis = " " * (gutter + 1) + left
    pad = plot_w - len(left) - len(right)
    if pad > len(mid) + 2:
        lpad = (pad - len(mid)) // 2
        axis += " " * lpad + mid + " " * (pad - lpad - len(mid))
    else:
        axis += " " * max(1, pad)
    axis += right
    return Text(axis, "dim")


def _line(a: tuple[int, int], b: tuple[int, int], plot: Callable[[int, int], None]) -> None:
    """Bresenham from a to b."""
    (x0, y0), (x1, y1) = a, b
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        plot(x0, y0)
        if x0 == x1 and y0 == y1:
            return
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


class MetricChart(Widget):
    """Shows `series` (training and validation curves of one metric, say); `message` instead
    when there is nothing to draw (loading, not available on this master)."""

    DEFAULT_CSS = "MetricChart { height: 1fr; min-height: 8; }"

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.series: list[Series] = []
        self.title = ""
        self.message = "loading…"

    def show(self, series: list[Series], title: str = "") -> None:
        self.series = series
        self.title = title
        self.message = ""
        self.refresh()

    def show_message(self, message: str) -> None:
        self.series = []
        self.message = message
        self.refresh()

    def render(self) -> Text:
        if self.message:
            return Text(self.message, style="dim italic")
        return render_chart(self.series, self.size.width, self.size.height, self.title)
