"""`:trial ID`: a trial's state and hparams, a metric chart with a picker, its checkpoints."""

from __future__ import annotations

import time
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
    metrics_text,
    progress_text,
    styled_state,
    trial_display_state,
)
from tui.screens.common import FetchFailed, ViewScreen
from tui.screens.experiment import hparams_text
from tui.widgets.chart import MetricChart, Series
from tui.widgets.table import Column, ResourceTable, Row

MAX_POINTS = 400
SERIES_NOT_AVAILABLE = (
    "metric charts are not available on this master (GET /trials/ID/metric-series: 404)"
)

CKPT_COLUMNS = [
    Column("uuid", "CHECKPOINT", max_width=38),
    Column("steps", "STEPS", width=7, justify="right"),
    Column("state", "STATE", width=10),
    Column("size", "SIZE", width=9, justify="right"),
    Column("age", "AGE", width=7, justify="right"),
]


def fmt_bytes(n: Any) -> str:
    if not isinstance(n, int | float):
        return "-"
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return "-"


def checkpoint_rows(ckpts: list[JSON], now: float) -> list[Row]:
    ckpts = sorted(ckpts, key=lambda c: c.get("steps_completed") or 0, reverse=True)
    return [
        Row(
            c["uuid"],
            [
                c["uuid"],
                str(c.get("steps_completed", "")),
                styled_state(c.get("state")),
                fmt_bytes(c.get("size")),
                fmt_age(c.get("reported_at"), now),
            ],
            sort=[None, c.get("steps_completed") or 0, None, c.get("size") or 0, None],
            data=c,
        )
        for c in ckpts
    ]


def trial_info(
    t: JSON, now: float, metric: str | None = None, rung_lengths: list[int] | None = None
) -> Text:
    """The trial's header; `metric` is its experiment's searcher metric (shown first),
    `rung_lengths` its ASHA rungs (the trial's rung is shown as `rung 2/3`)."""
    x = Text()
    x.append(f" Trial {t['id']} ", "bold reverse")
    x.append(f"  experiment {t.get('experiment_id')}  ")
    x.append_text(styled_state(trial_display_state(t)))
    rung = trial_rung(t, rung_lengths or [])
    if rung is not None:
        x.append(f"   rung {rung}/{len(rung_lengths or [])}")
    x.append(f"   steps {t.get('steps_completed', 0)}/{t.get('searcher_target') or '?'}  ")
    x.append_text(progress_text(t.get("progress"), 12))
    x.append(f"   restarts {t.get('restarts', 0)}")
    if t.get("agent_id"):
        x.append(f"   on {t['agent_id']}")
    x.append("\n ")
    x.append(f"best {metric or 'val'} {fmt_number(t.get('best_validation'))}", "bold green")
    x.append(f"   latest {metrics_text(t.get('latest_validation'), metric)}")
    if t.get("exit_reason"):
        x.append(f"   exit {t['exit_reason']}", "red")
    x.append("\n ")
    x.append(f"seed {t.get('seed', '?')}   created {fmt_age(t.get('created_at'), now)} ago   ")
    x.append("hparams ", "dim")
    x.append(hparams_text(t.get("hparams"), 400))
    return x


def metric_choices(names: JSON) -> list[str]:
    out: list[str] = []
    for n in (names.get("training") or []) + (names.get("validation") or []):
        if n not in out:
            out.append(n)
    return out


class TrialScreen(ViewScreen):
    VIEW = "trial"
    REFRESH_S = 3.0
    CHART_REFRESH_S = 10.0
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m,right_square_bracket", "metric(1)", "Next metric"),
        Binding("M,left_square_bracket", "metric(-1)", "Prev metric", show=False),
        Binding("l", "logs", "Logs"),
        Binding("e", "experiment", "Experiment"),
        Binding("tab", "focus_next", "Focus", show=False),
    ]

    class Loaded(Message):
        def __init__(
            self, trial: JSON, rows: list[Row], metric: str | None, rung_lengths: list[int]
        ) -> None:
            super().__init__()
            self.trial = trial
            self.rows = rows
            self.metric = metric
            self.rung_lengths = rung_lengths

    class Chart(Message):
        def __init__(self, names: JSON, metric: str | None, series: list[Series]) -> None:
            super().__init__()
            self.names = names
            self.metric = metric
            self.series = series

    def __init__(self, ctx: Context, trial_id: int) -> None:
        super().__init__(ctx)
        self.trial_id = int(trial_id)
        self.trial: JSON | None = None
        self.searcher_metric: str | None = None  # its experiment's, fetched once (worker)
        self.rung_lengths: list[int] = []  # its experiment's ASHA rungs, fetched with it
        self.names: JSON | None = None
        self.metrics: list[str] = []
        self.metric: str | None = None
        self.chart_seconds: float | None = None  # open -> first chart drawn (benchmark)
        self._opened = time.perf_counter()

    @property
    def title_text(self) -> str:
        return f"trial {self.trial_id}"

    def body(self) -> ComposeResult:
        yield Static(id="trial-info", classes="info")
        yield Static(id="metric-picker", classes="section")
        yield MetricChart(id="chart")
        yield Static(" checkpoints", classes="section")
        yield ResourceTable(CKPT_COLUMNS, id="checkpoints", empty="no checkpoints", markable=False)

    def on_mount(self) -> None:
        for key, show in (("trial", self.on_trial_screen_loaded), ("chart", self.show_chart)):
            shown = self.ctx.shown.get((key, self.trial_id))
            if shown is not None:
                show(shown)  # what it showed last time, at once
        super().on_mount()
        self.set_interval(
            self.CHART_REFRESH_S * self.ctx.interval_scale, lambda: self.refresh_chart()
        )
        self.query_one(ResourceTable).focus()

    def refresh_data(self, now: bool = False) -> None:
        self.fetch_in_background("trial", self.fetch, now=now)
        if now:
            self.refresh_chart(now=True)

    def refresh_chart(self, now: bool = False) -> None:
        self.fetch_in_background("chart", self.fetch_chart, now=now)

    # ---- trial + checkpoints (worker thread) -------------------------------------------------
    def fetch(self) -> TrialScreen.Loaded:
        api = self.ctx.api
        trial = api.get_trial(self.trial_id)
        if self.searcher_metric is None:  # its experiment's, once: they do not change
            try:
                body = api.describe_experiment(int(trial["experiment_id"]), trials=False)
                self.searcher_metric = body["experiment"].get("searcher_metric") or ""
                self.rung_lengths = list(body.get("rung_lengths") or [])
            except NotFound:
                self.searcher_metric = ""
        rows = checkpoint_rows(api.list_trial_checkpoints(self.trial_id), self.ctx.clock())
        return self.Loaded(trial, rows, self.searcher_metric or None, self.rung_lengths)

    def on_trial_screen_loaded(self, message: TrialScreen.Loaded) -> None:
        self.ctx.remember(("trial", self.trial_id), message)
        self.trial = message.trial
        self.query_one("#trial-info", Static).update(
            trial_info(message.trial, self.ctx.clock(), message.metric, message.rung_lengths)
        )
        self.query_one(ResourceTable).set_rows(message.rows)

    def on_fetch_failed(self, message: FetchFailed) -> None:
        if message.group == "chart" and isinstance(message.error, NotFound):
            self.show_chart(self.Chart({}, None, []))  # a master without the series routes
        else:
            super().on_fetch_failed(message)

    def not_found(self, error: NotFound) -> None:
        self.query_one("#trial-info", Static).update(Text(f" {error}", "bold red"))

    # ---- chart (worker thread) ----------------------------------------------------------------
    def fetch_chart(self) -> TrialScreen.Chart:
        api = self.ctx.api
        names = api.metric_names(self.trial_id)
        metrics = metric_choices(names)
        metric = self.metric if self.metric in metrics else (metrics[0] if metrics else None)
        series: list[Series] = []
        if metric is not None:
            for group, color in (("training", "cyan"), ("validation", "magenta")):
                if metric not in (names.get(group) or []):
                    continue
                body = api.metric_series(self.trial_id, group, [metric], max_points=MAX_POINTS)
                s = (body.get("series") or {}).get(metric) or {}
                series.append(
                    Series(f"{group} {metric}", s.get("steps") or [], s.get("values") or [], color)
                )
        return self.Chart(names, metric, series)

    def on_trial_screen_chart(self, message: TrialScreen.Chart) -> None:
        self.ctx.remember(("chart", self.trial_id), message)
        self.show_chart(message)
        if self.chart_seconds is None:  # the first chart fetched and drawn (not a cached one)
            self.chart_seconds = time.perf_counter() - self._opened

    def show_chart(self, message: TrialScreen.Chart) -> None:
        chart = self.query_one(MetricChart)
        if not message.names:
            self.names = None
            chart.show_message(SERIES_NOT_AVAILABLE)
            return
        self.names = message.names
        self.metrics = metric_choices(message.names)
        self.metric = message.metric
        self._show_picker()
        if message.metric is None:
            chart.show_message("no metrics reported yet")
        else:
            chart.show(message.series)

    def _show_picker(self) -> None:
        t = Text(" metric: ", "bold")
        for m in self.metrics:
            t.append(f" {m} ", "bold reverse" if m == self.metric else "")
        t.append("   (m / M to change)", "dim")
        self.query_one("#metric-picker", Static).update(t)

    def action_metric(self, step: int) -> None:
        if not self.metrics:
            return
        i = self.metrics.index(self.metric) if self.metric in self.metrics else 0
        self.metric = self.metrics[(i + step) % len(self.metrics)]
        self._show_picker()
        self.refresh_chart(now=True)

    def action_logs(self) -> None:
        self.open_view("logs", self.trial_id)

    def action_experiment(self) -> None:
        if self.trial is not None:
            self.open_view("exp", int(self.trial["experiment_id"]))
