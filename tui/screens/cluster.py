"""`:gpu` / `:agents`: every agent and slot, GPU load, memory, temperature, power, history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Static

from tui.context import Context
from tui.data import (
    JSON,
    ClusterData,
    bar,
    fmt_age,
    fmt_mb,
    load_style,
    slot_key,
    sparkline,
    styled_state,
)
from tui.screens.common import ViewScreen
from tui.widgets.table import Column, ResourceTable, Row, column_widths

IDLE_UTIL = 5.0  # an allocated GPU below this utilisation is flagged idle


def util_text(util: float | None, host: bool) -> Text:
    """A utilisation bar; a CPU slot's figure is the whole host's load (other processes too),
    so it says `host` rather than pass for the trial's own use."""
    if not host:
        return bar(util, 10)
    return Text("host ", "dim") + bar(util, 5)


AGENT_COLUMNS = [
    Column("id", "AGENT", max_width=24),
    Column("state", "STATE", width=8),
    Column("pool", "POOL", max_width=14),
    Column("host", "HOST", max_width=24),
    Column("runtime", "RUNTIME", width=7),
    Column("slots", "SLOTS", width=7, justify="right"),
    Column("util", "AVG UTIL", width=15),
    Column("seen", "SEEN", width=7, justify="right"),
]
SLOT_COLUMNS = [
    Column("agent", "AGENT", max_width=20),
    Column("slot", "#", width=2, justify="right"),
    Column("name", "DEVICE", max_width=22),
    Column("util", "UTIL", width=15),
    Column("hist", "HISTORY", width=20),
    Column("mem", "MEMORY", width=22),
    Column("temp", "TEMP", width=5, justify="right"),
    Column("power", "POWER", width=6, justify="right"),
    Column("trial", "TRIAL", width=7, justify="right"),
    Column("flag", "", max_width=16),
]


def agent_rows(agents: list[JSON], now: float) -> list[Row]:
    rows = []
    for a in agents:
        slots = a.get("slots", [])
        used = sum(1 for s in slots if s.get("allocation_id"))
        utils: list[float] = [
            float((s.get("stats") or {})["util_percent"])
            for s in slots
            if (s.get("stats") or {}).get("util_percent") is not None
        ]
        avg = sum(utils) / len(utils) if utils else None
        state = a.get("state", "?")
        host = bool(slots) and all(s.get("type") == "cpu" for s in slots)
        rows.append(
            Row(
                a["id"],
                [
                    a["id"],
                    styled_state(state),
                    a.get("resource_pool") or "-",
                    a.get("hostname") or "-",
                    a.get("runtime") or "-",
                    f"{used}/{len(slots)}",
                    util_text(avg if state == "ACTIVE" else None, host),
                    fmt_age(a.get("last_seen"), now),
                ],
                sort=[None, None, None, None, None, used, avg or 0, None],
                data=a,
            )
        )
    return rows


def slot_rows(agents: list[JSON], history: Mapping[str, Sequence[float]]) -> list[Row]:
    """One row per slot; `history` maps `slot_key` to recent utilisation (sparklines)."""
    rows = []
    for a in agents:
        alive = a.get("state") == "ACTIVE"
        for s in a.get("slots", []):
            st = s.get("stats") or {}
            util = st.get("util_percent")
            cpu = s.get("type") == "cpu"
            key = slot_key(a, s)
            mem_used, mem_total = st.get("memory_used_mb"), s.get("memory_mb")
            mem_pct = 100.0 * mem_used / mem_total if mem_used is not None and mem_total else None
            mem = bar(mem_pct, 8, label=False) + Text(
                f" {fmt_mb(mem_used)}/{fmt_mb(mem_total)}", load_style(mem_pct)
            )
            temp, power = st.get("temperature_c"), st.get("power_w")
            trial = s.get("trial_id")
            flag = Text()
            if not alive:
                flag = Text(a.get("state", "?"), "bold red")
            elif not s.get("enabled", True):
                flag = Text("DISABLED", "yellow")
            elif cpu:
                flag = Text("host load", "dim")
            elif trial is not None and util is not None and util < IDLE_UTIL:
                flag = Text("⚠ IDLE", "bold yellow")
            hist = list(history.get(key) or ())
            spark = Text(sparkline(hist, 20), load_style(hist[-1] if hist else None))
            rows.append(
                Row(
                    key,
                    [
                        a["id"],
                        str(s.get("index", "")),
                        s.get("name") or s.get("type", "?"),
                        util_text(util if alive else None, cpu),
                        spark,
                        mem,
                        "-" if temp is None else Text(f"{temp:.0f}°C", _temp_style(temp)),
                        "-" if power is None else f"{power:.0f}W",
                        "-" if trial is None else str(trial),
                        flag,
                    ],
                    sort=[
                        None,
                        s.get("index"),
                        None,
                        util or 0,
                        None,
                        mem_pct or 0,
                        temp or 0,
                        power or 0,
                        trial or 0,
                        None,
                    ],
                    data={"agent": a, "slot": s},
                )
            )
    return rows


def elastic_text(pools: list[JSON], now: float) -> Text:
    """One line per provider pool: instances, launches under way, the last launch error."""
    out = Text()
    for p in pools:
        live = p.get("instances") or []
        running = sum(1 for i in live if i.get("state") == "RUNNING")
        if out:
            out.append("\n")
        out.append(f" {p['name']} ", "bold")
        out.append(
            f"{p.get('provider')} {p.get('instance_type')}: {running} running, "
            f"{p.get('pending_launches', 0)} starting, max {p.get('max_instances')}"
        )
        if p.get("last_error") and p.get("backoff_until"):
            out.append(f"  launch error {fmt_age(p.get('last_error_at'), now)} ago: ", "bold red")
            out.append(str(p["last_error"]), "red")
    return out


def _temp_style(t: float) -> str:
    return "red" if t >= 85 else "yellow" if t >= 75 else "green"


class ClusterScreen(ViewScreen):
    VIEW = "gpus"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "switch_table", "Agents/GPUs"),
        Binding("enter", "open_trial", "Trial", show=False),
        Binding("l", "logs", "Logs"),
    ]

    class Rows(Message):
        """Rows built from one `ClusterData` (in a worker)."""

        def __init__(
            self, agents: list[Row], slots: list[Row], elastic: Text | None, title: Text
        ) -> None:
            super().__init__()
            self.agents = agents
            self.slots = slots
            self.elastic = elastic
            self.title = title
            # measured here, in the worker
            self.agent_widths = column_widths(AGENT_COLUMNS, agents)
            self.slot_widths = column_widths(SLOT_COLUMNS, slots)

    def __init__(self, ctx: Context, focus: str = "slots") -> None:
        super().__init__(ctx)
        self.focus_on = focus
        self.data: ClusterData | None = None

    def body(self) -> ComposeResult:
        yield Static(id="cluster-title", classes="section")
        yield ResourceTable(AGENT_COLUMNS, id="agents", empty="no agents", markable=False)
        elastic = Static(id="elastic")
        elastic.display = False  # shown when the master has provider pools
        yield elastic
        yield Static(" GPUs and slots", classes="section")
        yield ResourceTable(SLOT_COLUMNS, id="slots", empty="no slots", markable=False)

    def on_mount(self) -> None:
        super().on_mount()
        self.focus_table(self.focus_on)
        self.watch(self.app, "cluster", self.show_cluster)

    def focus_table(self, which: str) -> None:
        """Focus the agents or the slots table (now, or once mounted)."""
        self.focus_on = which
        for table in self.query(f"#{which}").results(ResourceTable):
            table.focus()

    def show_cluster(self, data: ClusterData | None) -> None:
        """The app's data changed (a reactive attribute this view watches)."""
        self.data = data
        self.refresh_data(now=True)

    def refresh_data(self, now: bool = False) -> None:
        data = self.data
        if data is not None:
            self.fetch_in_background("rows", lambda: self.build(data), now=now)

    def build(self, data: ClusterData) -> ClusterScreen.Rows:
        now = self.ctx.clock()
        s = data.summary
        title = Text.assemble(
            (" Agents ", "bold"),
            f"{s['agents_up']}/{s['agents_total']} up   ",
            ("slots ", ""),
            f"{s['slots_used']}/{s['slots_total']} in use",
        )
        return self.Rows(
            agent_rows(data.agents, now),
            slot_rows(data.agents, data.history),
            elastic_text(data.elastic, now) if data.elastic else None,
            title,
        )

    def on_cluster_screen_rows(self, message: ClusterScreen.Rows) -> None:
        self.query_one("#agents", ResourceTable).set_rows(
            message.agents, widths=message.agent_widths
        )
        self.query_one("#slots", ResourceTable).set_rows(message.slots, widths=message.slot_widths)
        elastic = self.query_one("#elastic", Static)
        elastic.display = message.elastic is not None
        if message.elastic is not None:
            elastic.update(message.elastic)
        self.query_one("#cluster-title", Static).update(message.title)

    ROW_ACTIONS = frozenset({"logs", "open_trial"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.ROW_ACTIONS:
            return self._trial() is not None  # only a slot with a trial on it has logs
        return super().check_action(action, parameters)

    def on_descendant_focus(self) -> None:
        self.maybe_refresh_bindings()  # Tab between the tables: Logs comes and goes

    def _trial(self) -> Any:
        """The trial on the highlighted slot (when the slots table has the focus)."""
        table = self.focused
        if not isinstance(table, ResourceTable) or table.id != "slots" or table.current is None:
            return None
        return table.current.data["slot"].get("trial_id")

    def action_switch_table(self) -> None:
        other = "#agents" if self.focused is self.query_one("#slots") else "#slots"
        self.query_one(other, ResourceTable).focus()

    def on_resource_table_selected(self, message: ResourceTable.Selected) -> None:
        self.action_open_trial()

    def action_open_trial(self) -> None:
        trial = self._trial()
        if trial is not None:
            self.open_view("trial", trial)

    def action_logs(self) -> None:
        trial = self._trial()
        if trial is not None:
            self.open_view("logs", trial)
        else:
            self.toast("no trial on this slot")
