"""`:queue`: each pool's jobs in scheduling order, and the keys to reorder and steer them."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Static

from tui.context import Context
from tui.data import JSON, ClusterData, job_action_allowed, parse_time, styled_state
from tui.screens.common import EXPERIMENT_VERBS, MUTATING, Confirm, ViewScreen
from tui.widgets.table import Age, Column, ResourceTable, Row, RowCache, column_widths

# How long the view keeps its own edit over a master's answer that does not show it yet.
PENDING_EDIT_S = 10.0

NOT_AVAILABLE = "the job queue is not available on this master (GET /job-queues: 404)"

COLUMNS = [
    Column("pos", "POS", width=5, justify="right"),
    Column("job", "JOB", width=6, justify="right"),
    Column("name", "NAME", max_width=28),
    Column("user", "USER", max_width=12),
    Column("state", "STATE", width=9),
    Column("prio", "PRIO", width=4, justify="right"),
    Column("weight", "WEIGHT", width=6, justify="right"),
    Column("slots", "SLOTS", width=7, justify="right"),
    Column("ahead", "AHEAD", width=5, justify="right"),
    Column("trials", "RUN/Q", width=7, justify="right"),
    Column("wait", "WAIT", width=7, justify="right"),
    Column("reason", "WHY IT WAITS", max_width=40),
]


def queue_rows(jobs: list[JSON], cache: RowCache | None = None) -> list[Row]:
    """One pool's jobs as table rows (runs in the poller's worker thread); unchanged jobs reuse
    their row from `cache`. WAIT is an `Age` cell: the rows do not change as time passes."""
    rows = []
    for j in jobs:
        queued = j.get("state") == "QUEUED"
        # from when the job last became waiting (the master's waiting_since), not submission
        since = j.get("waiting_since") or j.get("submitted_at")
        key = str(j["job_id"])
        sig = (
            since,
            j.get("position"),
            j.get("name"),
            j.get("user"),
            j.get("state"),
            j.get("priority"),
            j.get("weight"),
            j.get("slots_held"),
            j.get("slots_requested"),
            j.get("jobs_ahead"),
            j.get("trials_running"),
            j.get("trials_queued"),
            j.get("reason"),
        )
        if cache is not None:
            hit = cache.get(key, sig)
            if hit is not None:
                hit.data = j
                rows.append(hit)
                continue
        row = Row(
            str(j["job_id"]),
            [
                str(j.get("position", "")),
                str(j["job_id"]),
                j.get("name") or "",
                j.get("user") or "",
                styled_state(j.get("state")),
                str(j.get("priority", "")),
                f"{j.get('weight', 1.0):g}",
                f"{j.get('slots_held', 0)}/{j.get('slots_requested', 0)}",
                str(j.get("jobs_ahead", "")),
                f"{j.get('trials_running', 0)}/{j.get('trials_queued', 0)}",
                Age(parse_time(since)) if queued else "-",  # ticks as drawn, not rebuilt
                Text(j.get("reason") or "", "yellow" if queued else ""),
            ],
            sort=[
                j.get("position"),
                int(j["job_id"]) if str(j["job_id"]).isdigit() else j["job_id"],
                None,
                None,
                None,
                j.get("priority"),
                j.get("weight"),
                j.get("slots_requested"),
                j.get("jobs_ahead"),
                j.get("trials_queued"),
                j.get("submitted_at") or "",
                None,
            ],
            data=j,
        )
        _ = row.search  # the filter's text, built here rather than on the UI thread
        rows.append(cache.put(key, sig, row) if cache is not None else row)
    return rows


def pool_line(pools: list[JSON], current: str | None) -> Text:
    t = Text(" pools: ", "bold")
    for p in pools:
        style = "bold reverse" if p["name"] == current else ""
        queued = sum(1 for j in p.get("jobs", []) if j.get("state") == "QUEUED")
        t.append(f" {p['name']} ", style)
        t.append(f"({len(p.get('jobs', []))}/{queued}q) ", "dim")
    cur = next((p for p in pools if p["name"] == current), None)
    if cur:
        sched = cur.get("scheduler") or {}
        t.append(" │ ", "dim")
        t.append(f"{sched.get('type', '?')}")
        t.append(f", preemption {'on' if sched.get('preemption') else 'off'}", "dim")
        t.append(f"  slots {cur.get('slots_used', '?')}/{cur.get('slots_total', '?')}")
        t.append(f"  agents {cur.get('agents', '?')}")
    return t


class QueueScreen(ViewScreen):
    VIEW = "queue"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left_square_bracket", "pool(-1)", "Prev pool", show=False),
        Binding("right_square_bracket", "pool(1)", "Pool"),
        Binding("plus,equals_sign", "raise_priority", "Prio+"),
        Binding("minus", "lower_priority", "Prio-"),
        Binding("K,shift+up", "move_ahead", "Move up"),
        Binding("J,shift+down", "move_behind", "Move down"),
        Binding("P", "change_pool", "Pool…"),
        Binding("w", "set_weight", "Weight…", show=False),
        Binding("p", "pause", "Pause"),
        Binding("a", "activate", "Activate"),
        Binding("x,ctrl+k", "kill", "Kill"),
        Binding("e", "open_experiment", "Exp"),
        Binding("l", "logs", "Logs"),
    ]

    class Rows(Message):
        """One pool's rows and column widths (built in a worker)."""

        def __init__(
            self, pool: str | None, jobs: list[JSON], rows: list[Row], widths: list[int]
        ) -> None:
            super().__init__()
            self.pool = pool
            self.jobs = jobs  # what they were built from
            self.rows = rows
            self.widths = widths

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.pool: str | None = None
        self.available: bool | None = None
        self.data: ClusterData | None = None
        self.apply_seconds: list[float] = []  # UI-thread time per refresh (benchmark)
        self.build_seconds: list[float] = []  # worker time building rows per refresh (benchmark)
        self._caches: dict[str, RowCache] = {}
        self._build_lock = threading.Lock()  # one RowCache user at a time
        self._pool_line: Text | None = None
        self.skipped = 0  # refreshes whose jobs had not changed (benchmark, tests)
        # the pool and jobs the table shows (set on the UI thread, read by the build worker)
        self._shown: tuple[str | None, list[JSON]] | None = None
        # Edits this view made and the master may not show yet: job id -> (fields, until). A
        # fetch that started before an edit landed would otherwise put the old value back, and a
        # second key press would step from it (`+` then `-` ended one off).
        self._pending: dict[str, tuple[dict, float]] = {}

    def body(self) -> ComposeResult:
        yield Static(id="pools", classes="section")
        yield ResourceTable(COLUMNS, id="jobs", empty="no jobs in this pool", clock=self.ctx.clock)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(ResourceTable).focus()
        self.watch(self.app, "cluster", self.show_cluster)

    @property
    def table(self) -> ResourceTable:
        return self.query_one("#jobs", ResourceTable)

    def show_cluster(self, data: ClusterData | None) -> None:
        """The app's data changed (a reactive attribute this view watches)."""
        if data is None:
            return
        self.data = data
        if data.pools is None:
            self.available = False
            self.query_one("#pools", Static).update(Text(" job queue", "bold"))
            self._shown, self._pool_line = None, None
            self.table.set_empty(data.queue_error or NOT_AVAILABLE)
            self.maybe_refresh_bindings()
            return
        self.available = True
        names = [p["name"] for p in data.pools]
        if self.pool not in names:
            busiest = max(data.pools, key=lambda p: len(p.get("jobs", [])), default=None)
            self.pool = busiest["name"] if busiest else None
        line = pool_line(data.pools, self.pool)
        if line != self._pool_line:  # an update lays the screen out again: only on a change
            self._pool_line = line
            self.query_one("#pools", Static).update(line)
        self.table.refresh()  # the WAIT column ticks even when the rows are not rebuilt
        self.refresh_data(now=True)

    def refresh_data(self, now: bool = False) -> None:
        data, pool = self.data, self.pool
        if data is not None and data.pools is not None:
            self.fetch_in_background("rows", lambda: self.build(data, pool), now=now)

    def build(self, data: ClusterData, pool: str | None) -> QueueScreen.Rows | None:
        """The pool's rows; None (nothing to do, here or on the UI thread) when the table already
        shows exactly these jobs: an idle queue of 10,000 jobs is not rebuilt every refresh."""
        found = next((p for p in data.pools or [] if p["name"] == pool), None)
        jobs: list[JSON] = self._with_pending((found or {}).get("jobs") or [])
        shown = self._shown
        if shown is not None and shown[0] == pool and shown[1] == jobs:
            self.skipped += 1
            return None
        t0 = time.perf_counter()
        with self._build_lock:
            cache = self._caches.setdefault(pool or "", RowCache())
            rows = queue_rows(jobs, cache)
            cache.finish()
        widths = column_widths(COLUMNS, rows)
        self.build_seconds.append(time.perf_counter() - t0)
        return self.Rows(pool, jobs, rows, widths)

    def _with_pending(self, jobs: list[JSON]) -> list[JSON]:
        """The jobs with this view's own edits on top until the master shows them (or a few
        seconds pass: the master's word wins then)."""
        if not self._pending:
            return jobs
        now = time.monotonic()
        out = []
        for j in jobs:
            key = str(j.get("job_id"))
            pending = self._pending.get(key)
            if pending is None:
                out.append(j)
                continue
            fields, until = pending
            if now > until or all(j.get(k) == v for k, v in fields.items()):
                self._pending.pop(key, None)
                out.append(j)
            else:
                out.append({**j, **fields})
        return out

    def on_queue_screen_rows(self, message: QueueScreen.Rows) -> None:
        if message.pool != self.pool:
            return  # built for the pool shown before `[` / `]`
        t0 = time.perf_counter()
        self._shown = (message.pool, message.jobs)
        self.table.set_rows(message.rows, widths=message.widths)
        self.maybe_refresh_bindings()
        self.apply_seconds.append(time.perf_counter() - t0)

    # ---- permission ---------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not super().check_action(action, parameters):
            return False
        if action in MUTATING:
            if not self.available:
                return False
            rows = self.table.selection()
            if any(r.data.get("experiment_id") is None for r in rows):
                # Only an experiment's job is steered, paused or killed here: a command's request
                # is fixed at submission, and it is killed in `:tasks`.
                return False
            if action in EXPERIMENT_VERBS:
                return self.experiments_allowed(
                    action, [(r.data.get("experiment_state"), r.data.get("user")) for r in rows]
                )
            return bool(rows) and all(
                job_action_allowed(r.data.get("user"), self.ctx.user) for r in rows
            )
        return True

    def _jobs(self) -> list[JSON]:
        return [r.data for r in self.table.selection()]

    # ---- actions ------------------------------------------------------------------------------
    def action_pool(self, step: int) -> None:
        data = self.data
        if not data or not data.pools:
            return
        names = [p["name"] for p in data.pools]
        i = names.index(self.pool) if self.pool in names else 0
        self.pool = names[(i + step) % len(names)]
        self.table.clear_marks()
        self.show_cluster(data)

    def _update(self, verb: str, changes_for: list[tuple[JSON, dict]]) -> None:
        api = self.ctx.api
        # The rows' data takes the new values now, on the UI thread, before the call: a second
        # key press steps on from them even when it comes before the first call has returned
        # (`+` then `-` at once used to read the old priority and land one off). A failed call
        # puts the old values back; the next refresh rebuilds the rows either way.
        undo = [(job, {k: job[k] for k in changes if k in job}) for job, changes in changes_for]
        until = time.monotonic() + PENDING_EDIT_S
        for job, changes in changes_for:
            fields = {k: v for k, v in changes.items() if k in job}
            job.update(fields)
            if fields:
                self._pending[str(job["job_id"])] = (fields, until)
        self._shown = None  # the shown jobs were edited in place: never skip the next rebuild

        def run() -> str:
            try:
                for job, changes in changes_for:
                    api.update_job(job["job_id"], **changes)
            except Exception:
                for job, old in undo:
                    job.update(old)
                    self._pending.pop(str(job["job_id"]), None)
                raise
            ids = ", ".join(str(j["job_id"]) for j, _ in changes_for)
            return f"{verb}: job {ids}"

        self.call_api(run)

    def action_raise_priority(self) -> None:
        jobs = self._jobs()
        self._update(
            "priority raised",
            [(j, {"priority": max(1, int(j.get("priority", 42)) - 1)}) for j in jobs],
        )

    def action_lower_priority(self) -> None:
        jobs = self._jobs()
        self._update(
            "priority lowered",
            [(j, {"priority": min(99, int(j.get("priority", 42)) + 1)}) for j in jobs],
        )

    def _neighbour(self, step: int) -> JSON | None:
        rows = self.table.rows  # queue order, whatever the view's sort
        cur = self.table.current
        if cur is None:
            return None
        keys = [r.key for r in rows]
        i = keys.index(cur.key) + step
        return rows[i].data if 0 <= i < len(rows) else None

    def action_move_ahead(self) -> None:
        other = self._neighbour(-1)
        cur = self.table.current
        if other is None or cur is None:
            self.toast("already first in the queue")
            return
        self._update("moved up", [(cur.data, {"ahead_of": other["job_id"]})])

    def action_move_behind(self) -> None:
        other = self._neighbour(1)
        cur = self.table.current
        if other is None or cur is None:
            self.toast("already last in the queue")
            return
        self._update("moved down", [(cur.data, {"behind_of": other["job_id"]})])

    def action_change_pool(self) -> None:
        jobs = self._jobs()
        names = [p["name"] for p in (self.data.pools or [])] if self.data else []

        def done(value: str | None) -> None:
            if value:
                self._update(
                    f"moved to pool {value}", [(j, {"resource_pool": value}) for j in jobs]
                )

        self.ask(
            "pool", suggestions=names, hint=f"move to pool ({', '.join(names)})", on_submit=done
        )

    def action_set_weight(self) -> None:
        jobs = self._jobs()

        def done(value: str | None) -> None:
            if not value:
                return
            try:
                weight = float(value)
            except ValueError:
                self.toast(f"not a number: {value}", error=True)
                return
            self._update(f"weight {weight:g}", [(j, {"weight": weight}) for j in jobs])

        self.ask("weight", hint="fair-share weight (> 0)", on_submit=done)

    def _experiments(self) -> list[int]:
        return [int(j["experiment_id"]) for j in self._jobs() if j.get("experiment_id")]

    def action_pause(self) -> None:
        self.experiment_action("pause", self._experiments())

    def action_activate(self) -> None:
        self.experiment_action("activate", self._experiments())

    def action_kill(self) -> None:
        exps = self._experiments()
        if not exps:
            return
        ids = ", ".join(map(str, exps))

        def done(yes: bool | None) -> None:
            if yes:
                self.table.clear_marks()
                self.experiment_action("kill", exps)

        self.app.push_screen(
            Confirm(f"Kill experiment(s) {ids}? Their trials are stopped now."), done
        )

    def action_open_experiment(self) -> None:
        cur = self.table.current
        if cur is not None and cur.data.get("experiment_id"):
            self.open_view("exp", cur.data["experiment_id"])

    def on_resource_table_selected(self, message: ResourceTable.Selected) -> None:
        self.action_open_experiment()

    def action_logs(self) -> None:
        cur = self.table.current
        if cur is not None and cur.data.get("experiment_id"):
            self.open_experiment_logs(int(cur.data["experiment_id"]))
