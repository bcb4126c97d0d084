"""`det trial describe|metrics|logs` (`download|kill`: trial_more.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from harness.cli._common import (
    Cli,
    Column,
    add_json_flag,
    cell,
    metrics_line,
    percent,
    print_fields,
    print_json,
    print_table,
    trial_state,
    when,
)
from harness.cli._follow import print_log_line


def describe(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    trial = client.get_trial(args.id)
    metrics = client.trial_metrics(args.id, group="validation") if args.metrics else None
    if args.json:
        out: dict[str, Any] = {"trial": trial}
        if metrics is not None:
            out["metrics"] = metrics
        print_json(cli, out)
        return 0
    shown = {
        **trial,
        "progress": percent(trial.get("progress")),
        "display_state": trial_state(trial),
        "hparams": " ".join(f"{k}={cell(v)}" for k, v in (trial.get("hparams") or {}).items()),
        "latest_validation": metrics_line(trial.get("latest_validation")),
        "created_at": when(trial.get("created_at")),
        "ended_at": when(trial.get("ended_at")),
    }
    optional = {"exit_reason", "allocation_id", "agent_id", "ended_at", "latest_checkpoint"}
    fields = [
        (label, key)
        for label, key in TRIAL_FIELDS
        if key not in optional or shown.get(key) not in (None, "")
    ]
    print_fields(cli, shown, fields)
    if metrics:
        names = sorted({k for m in metrics for k in (m.get("metrics") or {})})
        cli.out.write("\n")
        cols = [("STEPS", "steps_completed")] + [
            (n.upper(), lambda m, n=n: (m.get("metrics") or {}).get(n)) for n in names
        ]
        print_table(cli, metrics, cols)
    return 0


TRIAL_FIELDS = [
    ("ID", "id"),
    ("Experiment", "experiment_id"),
    ("State", "display_state"),
    ("Hyperparameters", "hparams"),
    ("Seed", "seed"),
    ("Restarts", "restarts"),
    ("Steps completed", "steps_completed"),
    ("Searcher target", "searcher_target"),
    ("Progress", "progress"),
    ("Best validation", "best_validation"),
    ("Latest validation", "latest_validation"),
    ("Latest checkpoint", "latest_checkpoint"),
    ("Exit reason", "exit_reason"),
    ("Allocation", "allocation_id"),
    ("Agent", "agent_id"),
    ("Created", "created_at"),
    ("Ended", "ended_at"),
]


PAGE = 100_000  # the master's default page of metric rows


def _all_metrics(cli: Cli, trial_id: int, group: str) -> list[dict]:
    """Every report of one group, paged by steps (a long trial has more than a page)."""
    client = cli.client()
    rows: list[dict] = []
    after: int | None = None
    while True:
        page = client.trial_metrics(trial_id, group=group, after_steps=after, limit=PAGE)
        rows += page
        if len(page) < PAGE:
            return rows
        after = int(page[-1]["steps_completed"])


def _metric_getter(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda r: (r.get("metrics") or {}).get(name)


def metrics(cli: Cli, args: argparse.Namespace) -> int:
    """A trial's reported metrics: one row per report, one column per metric name."""
    cli.client().get_trial(args.id)  # "trial N not found" rather than an empty table
    groups = [args.group] if args.group else ["training", "validation"]
    rows = [{"group": g, **r} for g in groups for r in _all_metrics(cli, args.id, g)]
    if args.json:
        print_json(cli, rows)
        return 0
    names = sorted({k for r in rows for k in (r.get("metrics") or {})})
    columns: list[Column] = [("GROUP", "group"), ("STEPS", "steps_completed")]
    columns += [(n, _metric_getter(n)) for n in names]
    columns.append(("REPORTED", lambda r: when(r.get("reported_at"))))
    if args.csv:
        import csv

        w = csv.writer(cli.out, lineterminator="\n")
        w.writerow([name.lower() for name, _ in columns])
        for r in rows:
            w.writerow(
                [
                    "" if (v := get(r) if callable(get) else r.get(get)) is None else v
                    for _, get in columns
                ]
            )
        return 0
    if not rows:
        what = f"{args.group} " if args.group else ""
        cli.out.write(f"Trial {args.id} has reported no {what}metrics yet\n")
        return 0
    print_table(cli, rows, [(n.upper() if i < 2 else n, g) for i, (n, g) in enumerate(columns)])
    return 0


def logs(cli: Cli, args: argparse.Namespace) -> int:
    """All of a trial's logs; `--head N` the first N lines, `--tail N` the last N (then, with
    `-f`, what follows), as Determined's `det trial logs`; `--json` one JSON object a line."""
    client = cli.client()
    show: Callable[..., None] = print_log_line
    if getattr(args, "json", False):
        import json

        def show(tid: int, log: dict[str, Any], prefix: bool = True) -> None:
            cli.out.write(json.dumps({"trial_id": tid, **log}, sort_keys=True) + "\n")
            cli.out.flush()

    if args.follow and args.tail is None:
        for log in client.follow_trial_logs(args.id):
            show(args.id, log, prefix=False)
        return 0
    from collections import deque

    last: deque[dict] = deque(maxlen=args.tail)
    after, shown = 0, 0
    while args.head is None or shown < args.head:
        page = client.trial_logs(args.id, after=after, limit=1000)
        lines = page.get("logs") or []
        if not lines:
            break
        if args.head is not None:
            lines = lines[: args.head - shown]
        shown += len(lines)
        for log in lines:
            if args.tail is None:
                show(args.id, log, prefix=False)
            else:
                last.append(log)
        after = int(lines[-1].get("seq", after))
    for log in last:
        show(args.id, log, prefix=False)
    if args.follow:
        for log in client.follow_trial_logs(args.id, after=after):
            show(args.id, log, prefix=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", aliases=["t"], help="inspect trials")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("describe", help="a trial's state, hyperparameters and results")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--metrics", action="store_true", help="also show validation metrics")
    add_json_flag(x)
    x.set_defaults(func=describe)

    x = s.add_parser("metrics", help="a trial's reported metrics (training and validation)")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--group", choices=["training", "validation"], help="only this group")
    fmt = x.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print CSV (one row per report)")
    fmt.add_argument("--json", action="store_true", help="print machine-readable JSON")
    x.set_defaults(func=metrics)

    x = s.add_parser("logs", help="a trial's logs")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    ends = x.add_mutually_exclusive_group()
    ends.add_argument("--head", type=_count, metavar="N", help="only the first N lines")
    ends.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    add_json_flag(x)
    x.set_defaults(func=logs)

    from harness.cli.trial_more import add_commands

    add_commands(s)


def _count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines (0 or more), not {value!r}")
    return n
