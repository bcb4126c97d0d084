"""`:models`: the model registry: models (top) and the highlighted model's versions (bottom),
with aliases and each version's checkpoint and lineage."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from textual.app import ComposeResult

from tui.data import JSON, fmt_age
from tui.screens.common import ViewScreen
from tui.widgets.table import Column, ResourceTable, Row

MODEL_COLUMNS = [
    Column("name", "MODEL", max_width=30),
    Column("versions", "VERSIONS", width=8, justify="right"),
    Column("aliases", "ALIASES", max_width=36),
    Column("labels", "LABELS", max_width=24),
    Column("owner", "OWNER", max_width=12),
    Column("archived", "ARCHIVED", width=8),
    Column("updated", "UPDATED", width=8, justify="right"),
]
VERSION_COLUMNS = [
    Column("version", "VERSION", width=7, justify="right"),
    Column("aliases", "ALIASES", max_width=24),
    Column("checkpoint", "CHECKPOINT", width=36),
    Column("exp", "EXP", width=6, justify="right"),
    Column("trial", "TRIAL", width=6, justify="right"),
    Column("steps", "STEPS", width=8, justify="right"),
    Column("validation", "VALIDATION", max_width=30),
    Column("state", "STATE", width=13),
    Column("comment", "COMMENT", max_width=30),
    Column("age", "AGE", width=7, justify="right"),
]


def model_rows(models: list[JSON], now: float) -> list[Row]:
    return [
        Row(
            m["name"],
            [
                m["name"],
                str(m.get("num_versions", 0)),
                ", ".join(f"{a}={v}" for a, v in (m.get("aliases") or {}).items()),
                ", ".join(m.get("labels") or []),
                m.get("username") or "",
                "yes" if m.get("archived") else "",
                fmt_age(m.get("last_updated_time"), now),
            ],
            sort=[m["name"], m.get("num_versions", 0), None, None, None, None, None],
            data=m,
        )
        for m in models
    ]


def _validation(ckpt: JSON) -> str:
    val = (ckpt.get("lineage") or {}).get("validation_metrics")
    if not val:
        return ""
    return json.dumps(val, separators=(",", ":"))


def version_rows(versions: list[JSON], now: float) -> list[Row]:
    rows = []
    for v in versions:
        ckpt: dict[str, Any] = v.get("checkpoint") or {}
        rows.append(
            Row(
                str(v["version"]),
                [
                    str(v["version"]),
                    ", ".join(v.get("aliases") or []),
                    ckpt.get("uuid") or "",
                    str(ckpt.get("experiment_id") or ""),
                    str(ckpt.get("trial_id") or ""),
                    str(ckpt.get("steps_completed") or ""),
                    _validation(ckpt),
                    ckpt.get("state") or "",
                    v.get("comment") or "",
                    fmt_age(v.get("creation_time"), now),
                ],
                sort=[v["version"], None, None, None, None, None, None, None, None, None],
                data=v,
            )
        )
    return rows


class ModelsScreen(ViewScreen):
    VIEW = "models"
    DEFAULT_CSS = """
    ModelsScreen #models { height: 1fr; }
    ModelsScreen #model-versions { height: 2fr; border-top: solid $primary-darken-2; }
    """
    BINDINGS: ClassVar[list] = []

    def __init__(self) -> None:
        super().__init__()
        self.selected: str | None = None

    def body(self) -> ComposeResult:
        yield ResourceTable(MODEL_COLUMNS, id="models", empty="no models yet (det model create)")
        yield ResourceTable(
            VERSION_COLUMNS, id="model-versions", empty="no versions (det model register-version)"
        )

    def on_mount(self) -> None:
        self.poll("list", self.fetch_models, self.apply_models, interval=5.0)
        self.versions_poller = self.poll(
            "versions", self.fetch_versions, self.apply_versions, interval=5.0
        )
        super().on_mount()
        self.query_one("#models", ResourceTable).focus()

    def fetch_models(self) -> list[Row]:
        return model_rows(self.dapp.api.list_models(), self.dapp.clock())

    def apply_models(self, rows: list[Row]) -> None:
        table = self.query_one("#models", ResourceTable)
        table.set_rows(rows)
        current = table.current
        name = current.key if current is not None else None
        if name != self.selected:
            self.selected = name
            self.versions_poller.poke()

    def fetch_versions(self) -> tuple[str | None, list[Row]]:
        name = self.selected
        if name is None:
            return None, []
        return name, version_rows(self.dapp.api.list_model_versions(name), self.dapp.clock())

    def apply_versions(self, result: tuple[str | None, list[Row]]) -> None:
        name, rows = result
        if name != self.selected:
            return  # the cursor moved on meanwhile
        self.query_one("#model-versions", ResourceTable).set_rows(rows)

    def on_resource_table_highlighted(self, message: ResourceTable.Highlighted) -> None:
        super().on_resource_table_highlighted(message)
        if message.control.id != "models" or message.row is None:
            return
        if message.row.key != self.selected:
            self.selected = message.row.key
            self.versions_poller.poke()
