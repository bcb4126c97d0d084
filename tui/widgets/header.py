"""The header bar: master, user, slots, queue, agents, and how fresh the data is."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

from tui.context import Context
from tui.data import ClusterData, Freshness, fmt_duration


@dataclass
class Summary:
    slots_used: int | None = None
    slots_total: int | None = None
    queued: int | None = None
    agents_up: int | None = None
    agents_total: int | None = None


def _n(v: int | None) -> str:
    return "?" if v is None else str(v)


def header_text(
    view: str,
    master: str,
    user: str | None,
    summary: Summary,
    fresh: Freshness,
    now: float,
    readonly: bool = False,
) -> Text:
    """The header line (pure)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" detlab ", "bold reverse")
    t.append(f" {view} ", "bold")
    t.append(" │ ", "dim")
    t.append("slots ")
    t.append(f"{_n(summary.slots_used)}/{_n(summary.slots_total)}", "bold")
    t.append(" │ ", "dim")
    t.append("queued ")
    t.append(_n(summary.queued), "bold yellow" if summary.queued else "bold")
    t.append(" │ ", "dim")
    t.append("agents ")
    down = (
        summary.agents_total is not None
        and summary.agents_up is not None
        and summary.agents_up < summary.agents_total
    )
    t.append(f"{_n(summary.agents_up)}/{_n(summary.agents_total)}", "bold red" if down else "bold")
    t.append(" │ ", "dim")
    if fresh.error is not None:
        since = fmt_duration(now - fresh.error_since) if fresh.error_since else "?"
        t.append(f"✖ master unreachable {since}, retrying", "bold white on red")
    elif fresh.last_ok is None:
        t.append("… connecting", "yellow")
    else:
        age = now - fresh.last_ok
        t.append(f"● {fmt_duration(age)} ago", "green" if age < 10 else "yellow")
    t.append(" │ ", "dim")
    t.append(user or "?", "bold")
    if readonly:
        t.append(" (read-only)", "yellow")
    t.append(" @ ", "dim")
    t.append(master)
    return t


class HeaderBar(Widget):
    """Redraws itself from the app's reactive `cluster` and `freshness` (watched, not pushed)
    and once a second (the "3s ago")."""

    DEFAULT_CSS = "HeaderBar { height: 1; dock: top; background: $panel; }"

    def __init__(self, view: str, ctx: Context) -> None:
        super().__init__(id="header")
        self.view = view
        self.ctx = ctx
        self.summary = Summary()
        self.freshness = Freshness()
        self.text = Text("detlab")

    def on_mount(self) -> None:
        self.watch(self.app, "cluster", self._cluster_changed)
        self.watch(self.app, "freshness", self._freshness_changed)
        self.set_interval(1.0, self.update_text)

    def _cluster_changed(self, data: ClusterData | None) -> None:
        if data is not None:
            self.summary = Summary(**data.summary)
        self.update_text()

    def _freshness_changed(self, freshness: Freshness) -> None:
        self.freshness = freshness
        self.update_text()

    def update_text(self) -> None:
        text = header_text(
            self.view,
            self.ctx.master_url,
            (self.ctx.user or {}).get("username"),
            self.summary,
            self.freshness,
            self.ctx.clock(),
            self.ctx.readonly,
        )
        if text.plain != self.text.plain or text.spans != self.text.spans:
            self.text = text
            self.refresh()

    def render(self) -> Text:
        return self.text
