"""`:exps`: the newest experiments with state, progress and best metric."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message

from tui.data import JSON, fmt_age, fmt_number, progress_text, styled_state
from tui.screens.common import EXPERIMENT_VERBS, Confirm, ViewScreen
from tui.widgets.table import Column, ResourceTable, Row, column_widths

LIMIT = 500

COLUMNS = [
    Column("id", "ID", width=6, justify="right"),
    Column("name", "NAME", max_width=30),
    Column("state", "STATE", width=18),
    Column("owner", "OWNER", max_width=12),
    Column("progress", "PROGRESS", width=13),
    Column("trials", "TRIALS", width=6, justify="right"),
    Column("best", "BEST", width=9, justify="right"),
    Column("metric", "METRIC", max_width=20),
    Column("pool", "POOL", max_width=12),
    Column("age", "AGE", width=7, justify="right"),
]


def experiment_rows(exps: list[JSON], now: float) -> list[Row]:
    rows = []
    for e in exps:
        metric = e.get("searcher_metric") or ""
        if metric:
            metric += " ↓" if e.get("smaller_is_better", True) else " ↑"
        rows.append(
            Row(
                str(e["id"]),
                [
                    str(e["id"]),
                    e.get("name") or "",
                    styled_state(e.get("state")),
                    e.get("owner") or "",
                    progress_text(e.get("progress")),
                    str(e.get("num_trials", "")),
                    fmt_number(e.get("best_validation")),
                    metric,
                    e.get("resource_pool") or "",
                    fmt_age(e.get("created_at"), now),
                ],
                sort=[
                    e["id"],
                    None,
                    None,
                    None,
                    e.get("progress") or 0,
                    e.get("num_trials") or 0,
                    e.get("best_validation") if isinstance(e.get("best_validation"), float) else 0,
                    None,
                    None,
                    e.get("created_at") or "",
                ],
                data=e,
            )
        )
    return rows


class ExperimentsScreen(ViewScreen):
    VIEW = "experiments"
    REFRESH_S = 3.0
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", show=False),
        Binding("p", "pause", "Pause"),
        Binding("a", "activate", "Activate"),
        Binding("x,ctrl+k", "kill", "Kill"),
        Binding("l", "logs", "Logs"),
    ]

    class Rows(Message):
        def __init__(self, rows: list[Row]) -> None:
            super().__init__()
            self.rows = rows
            self.widths = column_widths(COLUMNS, rows)  # measured here, in the worker

    def body(self) -> ComposeResult:
        yield ResourceTable(COLUMNS, id="experiments", empty="no experiments yet")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(ResourceTable).focus()

    def refresh_data(self, now: bool = False) -> None:
        self.fetch_in_background("list", self.fetch, now=now)

    def fetch(self) -> ExperimentsScreen.Rows:
        exps, _total = self.ctx.api.list_experiments(limit=LIMIT)
        return self.Rows(experiment_rows(exps, self.ctx.clock()))

    def on_experiments_screen_rows(self, message: ExperimentsScreen.Rows) -> None:
        self.query_one(ResourceTable).set_rows(message.rows, widths=message.widths)
        self.maybe_refresh_bindings()

    ROW_ACTIONS = frozenset({"logs"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not super().check_action(action, parameters):
            return False
        if action == "logs":  # an experiment without trials has no logs yet
            rows = self.query_one(ResourceTable).selection()
            return bool(rows) and bool(rows[0].data.get("num_trials"))
        if action in EXPERIMENT_VERBS:
            rows = self.query_one(ResourceTable).selection()
            return self.experiments_allowed(
                action, [(r.data.get("state"), r.data.get("owner")) for r in rows]
            )
        return True

    def _ids(self) -> list[int]:
        return [int(r.data["id"]) for r in self.query_one(ResourceTable).selection()]

    def on_resource_table_selected(self, message: ResourceTable.Selected) -> None:
        if message.row is not None:
            self.open_view("exp", int(message.row.data["id"]))

    def action_open(self) -> None:
        self.query_one(ResourceTable).action_select()

    def action_pause(self) -> None:
        self.experiment_action("pause", self._ids())

    def action_activate(self) -> None:
        self.experiment_action("activate", self._ids())

    def action_kill(self) -> None:
        ids = self._ids()
        if not ids:
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.query_one(ResourceTable).clear_marks()
                self.experiment_action("kill", ids)

        self.app.push_screen(
            Confirm(
                f"Kill experiment(s) {', '.join(map(str, ids))}? Their trials are stopped now."
            ),
            done,
        )

    def action_logs(self) -> None:
        ids = self._ids()
        if ids:
            self.open_experiment_logs(ids[0])
