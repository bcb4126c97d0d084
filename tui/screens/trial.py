"""`:trial ID`: a trial's state and hparams, a metric chart with a picker, its checkpoints."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from harness.api import NotFound
from tui.data import JSON, fmt_age, fmt_number, progress_text, styled_state, trial_display_state
from tui.screens.common import ViewScreen
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


def trial_info(t: JSON, now: float) -> Text:
    x = Text()
    x.append(f" Trial {t['id']} ", "bold reverse")
    x.append(f"  experiment {t.get('experiment_id')}  ")
    x.append_text(styled_state(trial_display_state(t)))
    x.append(f"   steps {t.get('steps_completed', 0)}/{t.get('searcher_target') or '?'}  ")
    x.append_text(progress_text(t.get("progress"), 12))
    x.append(f"   restarts {t.get('restarts', 0)}")
    if t.get("agent_id"):
        x.append(f"   on {t['agent_id']}")
    x.append("\n ")
    x.append(f"best val {fmt_number(t.get('best_validation'))}", "bold green")
    x.append(f"   latest val {fmt_number(t.get('latest_validation'))}")
    x.append(f"   seed {t.get('seed', '?')}   created {fmt_age(t.get('created_at'), now)} ago")
    if t.get("exit_reason"):
        x.append(f"   exit {t['exit_reason']}", "red")
    x.append("\n ")
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
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m,right_square_bracket", "metric(1)", "Next metric"),
        Binding("M,left_square_bracket", "metric(-1)", "Prev metric", show=False),
        Binding("l", "logs", "Logs"),
        Binding("e", "experiment", "Experiment"),
        Binding("tab", "focus_next", "Focus", show=False),
    ]

    def __init__(self, trial_id: int) -> None:
        super().__init__()
        self.trial_id = int(trial_id)
        self.trial: JSON | None = None
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
        self.poll("trial", self.fetch, self.apply, interval=3.0)
        self.chart_poller = self.poll("chart", self.fetch_chart, self.apply_chart, interval=10.0)
        super().on_mount()
        self.query_one(ResourceTable).focus()

    # ---- trial + checkpoints ----------------------------------------------------------------
    def fetch(self) -> tuple[JSON, list[Row]]:
        api = self.dapp.api
        trial = api.get_trial(self.trial_id)
        rows = checkpoint_rows(api.list_trial_checkpoints(self.trial_id), self.dapp.clock())
        return trial, rows

    def apply(self, result: tuple[JSON, list[Row]]) -> None:
        self.trial, rows = result
        self.query_one("#trial-info", Static).update(trial_info(self.trial, self.dapp.clock()))
        self.query_one(ResourceTable).set_rows(rows)

    def not_found(self, error: NotFound) -> None:
        self.query_one("#trial-info", Static).update(Text(f" {error}", "bold red"))

    # ---- chart --------------------------------------------------------------------------------
    def fetch_chart(self) -> tuple[JSON, str | None, list[Series]]:
        try:
            return self._fetch_chart()
        except NotFound:  # a master without the series routes (or no such trial)
            return {}, None, []

    def _fetch_chart(self) -> tuple[JSON, str | None, list[Series]]:
        api = self.dapp.api
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
        return names, metric, series

    def apply_chart(self, result: tuple[JSON, str | None, list[Series]]) -> None:
        names, metric, series = result
        chart = self.query_one(MetricChart)
        if not names:
            self.names = None
            chart.show_message(SERIES_NOT_AVAILABLE)
            return
        self.names = names
        self.metrics = metric_choices(names)
        self.metric = metric
        self._show_picker()
        if metric is None:
            chart.show_message("no metrics reported yet")
        else:
            chart.show(series)
        if self.chart_seconds is None:
            self.chart_seconds = time.perf_counter() - self._opened

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
        self.chart_poller.poke()

    def action_logs(self) -> None:
        self.dapp.open_view("logs", self.trial_id)

    def action_experiment(self) -> None:
        if self.trial is not None:
            self.dapp.open_view("exp", int(self.trial["experiment_id"]))
