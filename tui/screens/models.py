"""`:models`: the model registry: models (top) and the highlighted model's versions (bottom),
with aliases and each version's checkpoint and lineage."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.message import Message

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
    REFRESH_S = 5.0
    DEFAULT_CSS = """
    ModelsScreen #models { height: 1fr; }
    ModelsScreen #model-versions { height: 2fr; border-top: solid $primary-darken-2; }
    """
    BINDINGS: ClassVar[list] = []

    class Models(Message):
        def __init__(self, rows: list[Row]) -> None:
            super().__init__()
            self.rows = rows

    class Versions(Message):
        def __init__(self, name: str | None, rows: list[Row]) -> None:
            super().__init__()
            self.name = name
            self.rows = rows

    selected: str | None = None

    def body(self) -> ComposeResult:
        yield ResourceTable(MODEL_COLUMNS, id="models", empty="no models yet (det model create)")
        yield ResourceTable(
            VERSION_COLUMNS, id="model-versions", empty="no versions (det model register-version)"
        )

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#models", ResourceTable).focus()

    def refresh_data(self, now: bool = False) -> None:
        self.fetch_in_background("models", self.fetch_models, now=now)
        self.refresh_versions(now=now)

    def refresh_versions(self, now: bool = False) -> None:
        name = self.selected
        self.fetch_in_background("versions", lambda: self.fetch_versions(name), now=now)

    def fetch_models(self) -> ModelsScreen.Models:
        return self.Models(model_rows(self.ctx.api.list_models(), self.ctx.clock()))

    def fetch_versions(self, name: str | None) -> ModelsScreen.Versions:
        if name is None:
            return self.Versions(None, [])
        return self.Versions(
            name, version_rows(self.ctx.api.list_model_versions(name), self.ctx.clock())
        )

    def on_models_screen_models(self, message: ModelsScreen.Models) -> None:
        table = self.query_one("#models", ResourceTable)
        table.set_rows(message.rows)
        current = table.current
        self._select(current.key if current is not None else None)

    def on_models_screen_versions(self, message: ModelsScreen.Versions) -> None:
        if message.name != self.selected:
            return  # the cursor moved on meanwhile
        self.query_one("#model-versions", ResourceTable).set_rows(message.rows)

    def _select(self, name: str | None) -> None:
        if name != self.selected:
            self.selected = name
            self.refresh_versions(now=True)

    def on_resource_table_highlighted(self, message: ResourceTable.Highlighted) -> None:
        super().on_resource_table_highlighted(message)
        if message.control.id == "models" and message.row is not None:
            self._select(message.row.key)
