"""`:gpu` / `:agents`: every agent and slot, GPU load, memory, temperature, power, history."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from tui.data import (
    JSON,
    History,
    bar,
    fmt_age,
    fmt_mb,
    load_style,
    sparkline,
    styled_state,
)
from tui.screens.common import ViewScreen
from tui.widgets.table import Column, ResourceTable, Row

IDLE_UTIL = 5.0  # an allocated GPU below this utilisation is flagged idle

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


def summarize(agents: list[JSON], pools: list[JSON] | None) -> dict[str, int | None]:
    """Header figures: slots used/total (ACTIVE agents), queued jobs, agents up."""
    active = [a for a in agents if a.get("state") == "ACTIVE"]
    slots = [s for a in active for s in a.get("slots", []) if s.get("enabled", True)]
    queued = None
    if pools is not None:
        queued = sum(1 for p in pools for j in p.get("jobs", []) if j.get("state") == "QUEUED")
    return {
        "slots_used": sum(1 for s in slots if s.get("allocation_id")),
        "slots_total": len(slots),
        "queued": queued,
        "agents_up": len(active),
        "agents_total": len(agents),
    }


def agent_rows(agents: list[JSON], now: float) -> list[Row]:
    rows = []
    for a in agents:
        slots = a.get("slots", [])
        used = sum(1 for s in slots if s.get("allocation_id"))
        utils = [
            (s.get("stats") or {}).get("util_percent")
            for s in slots
            if (s.get("stats") or {}).get("util_percent") is not None
        ]
        avg = sum(utils) / len(utils) if utils else None
        state = a.get("state", "?")
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
                    bar(avg if state == "ACTIVE" else None, 10),
                    fmt_age(a.get("last_seen"), now),
                ],
                sort=[None, None, None, None, None, used, avg or 0, None],
                data=a,
            )
        )
    return rows


def slot_key(agent: JSON, slot: JSON) -> str:
    return f"{agent['id']}/{slot.get('index')}"


def slot_rows(agents: list[JSON], history: History) -> list[Row]:
    rows = []
    for a in agents:
        alive = a.get("state") == "ACTIVE"
        for s in a.get("slots", []):
            st = s.get("stats") or {}
            util = st.get("util_percent")
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
            elif trial is not None and util is not None and util < IDLE_UTIL:
                flag = Text("⚠ IDLE", "bold yellow")
            hist = history.get(key)
            spark = Text(sparkline(hist, 20), load_style(hist[-1] if hist else None))
            rows.append(
                Row(
                    key,
                    [
                        a["id"],
                        str(s.get("index", "")),
                        s.get("name") or s.get("type", "?"),
                        bar(util if alive else None, 10),
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

    def __init__(self, focus: str = "slots") -> None:
        super().__init__()
        self.focus_table = focus

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
        self.query_one(f"#{self.focus_table}", ResourceTable).focus()
        self.on_cluster_data()

    def on_cluster_data(self) -> None:
        """The app's cluster poller delivered (rows were built in its worker thread)."""
        data = self.dapp.cluster
        if data is None:
            return
        self.query_one("#agents", ResourceTable).set_rows(data.agent_rows)
        self.query_one("#slots", ResourceTable).set_rows(data.slot_rows)
        elastic = self.query_one("#elastic", Static)
        elastic.display = bool(data.elastic)
        if data.elastic:
            elastic.update(elastic_text(data.elastic, self.dapp.clock()))
        s = data.summary
        self.query_one("#cluster-title", Static).update(
            Text.assemble(
                (" Agents ", "bold"),
                f"{s['agents_up']}/{s['agents_total']} up   ",
                ("slots ", ""),
                f"{s['slots_used']}/{s['slots_total']} in use",
            )
        )

    def _trial(self) -> Any:
        table = self.query_one("#slots", ResourceTable)
        if self.focused is not table or table.current is None:
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
            self.dapp.open_view("trial", trial)

    def action_logs(self) -> None:
        trial = self._trial()
        if trial is not None:
            self.dapp.open_view("logs", trial)
        else:
            self.dapp.toast("no trial on this slot")
