"""Shared by the CLI nouns: the per-invocation context, errors and output helpers."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from detlab.constants import DEFAULT_MASTER_URL
from harness.api import Session, auth
from harness.api.client import Client

DEFAULT_MASTER = DEFAULT_MASTER_URL


class CliError(Exception):
    """A user-facing failure: printed as `error: <message>`, exit code 1."""


@dataclass
class Cli:
    """Per-invocation state: the master URL and a lazily logged-in client."""

    master: str
    out: TextIO = field(default_factory=lambda: sys.stdout)
    _client: Client | None = None

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(auth.login_session(self.master))
        return self._client

    def anonymous(self) -> Client:
        return Client(Session(self.master))


Handler = Callable[[Cli, argparse.Namespace], int | None]


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def print_json(cli: Cli, obj: Any) -> None:
    json.dump(obj, cli.out, indent=2, sort_keys=False, default=str)
    cli.out.write("\n")


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


Column = tuple[str, str | Callable[[dict[str, Any]], Any]]


def print_table(cli: Cli, rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    """Plain aligned columns (no box drawing, no truncation): friendly to grep, awk, cut."""
    header = [name for name, _ in columns]
    body = [
        [cell(get(row) if callable(get) else row.get(get)) for _, get in columns] for row in rows
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(columns))]
    for r in [header, *body]:
        line = "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
        cli.out.write(line + "\n")


def print_fields(cli: Cli, obj: dict[str, Any], keys: Sequence[tuple[str, str]]) -> None:
    """`Label:  value` lines for describe commands."""
    width = max(len(label) for label, _ in keys) + 1
    for label, key in keys:
        value = obj.get(key)
        if isinstance(value, (dict, list)):
            value = json.dumps(value, sort_keys=True)
        cli.out.write(f"{(label + ':').ljust(width)}  {cell(value)}\n")


def when(value: str | None) -> str:
    """ISO 8601 UTC -> `YYYY-MM-DD HH:MM:SS` (still UTC) for tables."""
    if not value:
        return ""
    return value.replace("T", " ")[:19]


def metrics_line(values: dict[str, Any] | None, first: str | None = None, limit: int = 4) -> str:
    """`validation_accuracy=0.9722 validation_loss=0.0912 (batch 1000)`: a metrics dict (the
    searcher metric `first`) as a few numbers on one line, never a JSON dict."""
    if not isinstance(values, dict):
        return cell(values)
    steps = values.get("steps_completed")
    names = [k for k in values if k != "steps_completed"]
    names.sort(key=lambda k: (k != first, k))
    shown = " ".join(f"{k}={cell(values[k])}" for k in names[:limit])
    if len(names) > limit:
        shown += f" (+{len(names) - limit} more)"
    return f"{shown} (batch {steps})" if steps is not None else shown


def metric_value(values: Any, name: str | None) -> Any:
    """One metric out of a metrics dict (the searcher metric of a trial's latest validation)."""
    if not isinstance(values, dict):
        return values  # already a number (or nothing)
    return values.get(name) if name else None


def percent(value: Any) -> str:
    try:
        return f"{float(value) * 100:.1f}%"
    except (TypeError, ValueError):
        return ""


def size(n: Any) -> str:
    try:
        b = float(n)
    except (TypeError, ValueError):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return ""


def trial_state(trial: dict[str, Any]) -> str:
    """A trial's state as people read it: what it waits for (`waiting for promotion`: an ASHA
    trial that finished its rung) rather than QUEUED, else its display state."""
    if trial.get("waiting_for"):
        return f"waiting for {trial['waiting_for']}"
    return str(trial.get("display_state") or trial.get("state") or "-")
