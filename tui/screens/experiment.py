"""`:exp ID`: one experiment: its state and searcher, and its trials with metric sparklines."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Static

from harness.api import NotFound, trial_rung
from tui.context import Context
from tui.data import (
    JSON,
    fmt_age,
    fmt_number,
    latest_metric,
    progress_text,
    sparkline,
    styled_state,
    trial_display_state,
)
from tui.screens.common import EXPERIMENT_VERBS, Confirm, ViewScreen
from tui.widgets.table import Column, ResourceTable, Row, column_widths

SPARK_TRIALS = 50  # sparklines for at most this many trials (one small request each)
SPARK_POINTS = 16

COLUMNS = [
    Column("id", "TRIAL", width=6, justify="right"),
    Column("state", "STATE", width=21),  # "waiting for promotion" (ASHA)
    Column("rung", "RUNG", width=4, justify="right"),  # ASHA rung it trains to (as the CLI)
    Column("steps", "STEPS", width=7, justify="right"),
    Column("progress", "PROGRESS", width=13),
    Column("best", "BEST VAL", width=9, justify="right"),
    Column("latest", "LATEST", width=9, justify="right"),
    Column("spark", "CURVE", width=SPARK_POINTS),
    Column("restarts", "RST", width=3, justify="right"),
    Column("agent", "AGENT", max_width=14),
    Column("hparams", "HPARAMS", max_width=60),
]


def hparams_text(hp: Any, limit: int = 200) -> str:
    if not isinstance(hp, dict):
        return str(hp)
    parts = []
    for k, v in hp.items():
        if isinstance(v, dict):
            v = "{" + hparams_text(v) + "}"
        elif isinstance(v, float):
            v = fmt_number(v)
        parts.append(f"{k}={v}")
    return " ".join(parts)[:limit]


def trial_rows(
    trials: list[JSON],
    sparks: dict[int, str],
    metric: str | None = None,
    rung_lengths: list[int] | None = None,
) -> list[Row]:
    """The experiment's trials; LATEST is the searcher `metric` of the latest validation, RUNG
    the ASHA rung a trial trains to (blank for searches without rungs)."""
    rows = []
    for t in trials:
        rung = trial_rung(t, rung_lengths or [])
        rows.append(
            Row(
                str(t["id"]),
                [
                    str(t["id"]),
                    styled_state(trial_display_state(t)),
                    "" if rung is None else str(rung),
                    str(t.get("steps_completed", 0)),
                    progress_text(t.get("progress")),
                    fmt_number(t.get("best_validation")),
                    fmt_number(latest_metric(t.get("latest_validation"), metric)),
                    Text(sparks.get(t["id"], ""), "cyan"),
                    str(t.get("restarts", 0)),
                    t.get("agent_id") or "",
                    hparams_text(t.get("hparams")),
                ],
                sort=[
                    t["id"],
                    None,
                    rung or 0,
                    t.get("steps_completed") or 0,
                    t.get("progress") or 0,
                    _num(t.get("best_validation")),
                    _num(latest_metric(t.get("latest_validation"), metric)),
                    None,
                    t.get("restarts") or 0,
                    None,
                    None,
                ],
                data=t,
            )
        )
    return rows


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else float("inf")


def experiment_info(e: JSON, now: float) -> Text:
    t = Text(no_wrap=False)
    t.append(f" Experiment {e['id']} ", "bold reverse")
    t.append(f" {e.get('name', '')}  ", "bold")
    t.append_text(styled_state(e.get("state")))
    t.append(f"   owner {e.get('owner', '?')}   pool {e.get('resource_pool', '?')}   ")
    t.append_text(progress_text(e.get("progress"), 12))
    t.append("\n ")
    metric = e.get("searcher_metric") or "?"
    order = "smaller is better" if e.get("smaller_is_better", True) else "larger is better"
    searcher = ((e.get("config") or {}).get("searcher") or {}).get("name", "?")
    t.append(f"searcher {searcher}   metric {metric} ({order})   ")
    t.append(f"best {fmt_number(e.get('best_validation'))}", "bold green")
    if e.get("best_trial_id"):
        t.append(f" (trial {e['best_trial_id']})")
    t.append(f"   trials {e.get('num_trials', '?')}   created {fmt_age(e.get('created_at'), now)}")
    t.append(" ago")
    return t


class ExperimentScreen(ViewScreen):
    VIEW = "experiment"
    REFRESH_S = 3.0
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Trial", show=False),
        Binding("l", "logs", "Logs"),
        Binding("p", "pause", "Pause"),
        Binding("a", "activate", "Activate"),
        Binding("x,ctrl+k", "kill", "Kill"),
    ]

    class Loaded(Message):
        def __init__(self, experiment: JSON, rows: list[Row]) -> None:
            super().__init__()
            self.experiment = experiment
            self.rows = rows
            self.widths = column_widths(COLUMNS, rows)  # measured here, in the worker

    def __init__(self, ctx: Context, exp_id: int) -> None:
        super().__init__(ctx)
        self.exp_id = int(exp_id)
        self.experiment: JSON | None = None
        # sparklines: touched by the fetch worker only (one at a time per group)
        self.sparks: dict[int, str] = {}
        self._spark_steps: dict[int, int] = {}
        self.spark_metric: tuple[str, str] | None = None
        self.series_available = True

    @property
    def title_text(self) -> str:
        return f"experiment {self.exp_id}"

    def body(self) -> ComposeResult:
        yield Static(id="exp-info", classes="info")
        yield ResourceTable(COLUMNS, id="trials", empty="no trials yet", markable=False)

    def on_mount(self) -> None:
        shown = self.ctx.shown.get(("exp", self.exp_id))
        if shown is not None:
            self.on_experiment_screen_loaded(shown)  # what it showed last time, at once
        super().on_mount()
        self.query_one(ResourceTable).focus()

    # ---- data (worker thread) ---------------------------------------------------------------
    def refresh_data(self, now: bool = False) -> None:
        self.fetch_in_background("describe", self.fetch, now=now)

    def fetch(self) -> ExperimentScreen.Loaded:
        body = self.ctx.api.describe_experiment(self.exp_id)
        exp, trials = body["experiment"], body.get("trials", [])
        if self.series_available:
            try:
                self._fetch_sparks(exp, trials)
            except NotFound:
                self.series_available = False
        rows = trial_rows(trials, self.sparks, exp.get("searcher_metric"), body.get("rung_lengths"))
        return self.Loaded(exp, rows)

    def _fetch_sparks(self, exp: JSON, trials: list[JSON]) -> None:
        api = self.ctx.api
        with_steps = [t for t in trials if t.get("steps_completed")][:SPARK_TRIALS]
        if not with_steps:
            return
        if self.spark_metric is None:
            names = api.metric_names(with_steps[0]["id"])
            self.spark_metric = pick_metric(names, exp.get("searcher_metric"))
            if self.spark_metric is None:
                return
        group, name = self.spark_metric
        for t in with_steps:
            steps = int(t.get("steps_completed") or 0)
            if self._spark_steps.get(t["id"]) == steps:
                continue
            series = api.metric_series(t["id"], group, [name], max_points=SPARK_POINTS * 2)
            values = ((series.get("series") or {}).get(name) or {}).get("values") or []
            self.sparks[t["id"]] = sparkline(values, SPARK_POINTS)
            self._spark_steps[t["id"]] = steps

    def on_experiment_screen_loaded(self, message: ExperimentScreen.Loaded) -> None:
        self.ctx.remember(("exp", self.exp_id), message)
        self.experiment = message.experiment
        self.query_one("#exp-info", Static).update(
            experiment_info(message.experiment, self.ctx.clock())
        )
        self.query_one(ResourceTable).set_rows(message.rows, widths=message.widths)
        self.maybe_refresh_bindings()

    def not_found(self, error: NotFound) -> None:
        self.query_one("#exp-info", Static).update(
            Text(f" experiment {self.exp_id} not found", "bold red")
        )
        self.query_one(ResourceTable).set_empty(str(error))

    # ---- actions ------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not super().check_action(action, parameters):
            return False
        if action in EXPERIMENT_VERBS:
            e = self.experiment
            return e is not None and self.experiments_allowed(
                action, [(e.get("state"), e.get("owner"))]
            )
        return True

    def on_resource_table_selected(self, message: ResourceTable.Selected) -> None:
        if message.row is not None:
            self.open_view("trial", int(message.row.data["id"]))

    def action_open(self) -> None:
        self.query_one(ResourceTable).action_select()

    def action_logs(self) -> None:
        row = self.query_one(ResourceTable).current
        if row is not None:
            self.open_view("logs", int(row.data["id"]))

    def action_pause(self) -> None:
        self.experiment_action("pause", [self.exp_id])

    def action_activate(self) -> None:
        self.experiment_action("activate", [self.exp_id])

    def action_kill(self) -> None:
        def done(yes: bool | None) -> None:
            if yes:
                self.experiment_action("kill", [self.exp_id])

        self.app.push_screen(
            Confirm(f"Kill experiment {self.exp_id}? Its trials are stopped now."), done
        )


def pick_metric(names: JSON, searcher_metric: str | None) -> tuple[str, str] | None:
    """The (group, name) a sparkline shows: the searcher metric, else a loss, else anything."""
    val, train = names.get("validation") or [], names.get("training") or []
    if searcher_metric:
        if searcher_metric in val:
            return "validation", searcher_metric
        if searcher_metric in train:
            return "training", searcher_metric
        bare = searcher_metric.removeprefix("validation_")
        if bare in val:
            return "validation", bare
    for group, names_ in (("validation", val), ("training", train)):
        for n in names_:
            if "loss" in n:
                return group, n
    if val:
        return "validation", val[0]
    if train:
        return "training", train[0]
    return None
