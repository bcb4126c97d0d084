"""Output shaped like Determined 0.38's CLI where scripts parse it: `--csv` (a header row, then
one row per item, Python's csv dialect) and its time and percent formats."""

from __future__ import annotations

import csv
import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from harness.cli._common import Cli, cell


def det_time(value: str | None) -> str | None:
    """ISO 8601 -> Determined's `2024-05-01 12:00:00+0000` (UTC)."""
    if not value:
        return None
    dt = datetime.datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return dt.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S%z")


def det_percent(value: Any) -> str | None:
    return None if value is None else f"{float(value):.1%}"


def print_csv(cli: Cli, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    writer = csv.writer(cli.out)
    writer.writerow(headers)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])


def print_rows(
    cli: Cli, headers: Sequence[str], rows: Iterable[Sequence[Any]], as_csv: bool
) -> None:
    """Determined's `tabulate_or_csv`: CSV, or aligned columns with the same headers."""
    rows = [list(r) for r in rows]
    if as_csv:
        print_csv(cli, headers, rows)
        return
    text = [[cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in [list(headers), *text]) for i in range(len(headers))]
    for r in [list(headers), *text]:
        cli.out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        cli.out.write("\n")
