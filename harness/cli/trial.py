"""`det trial describe|logs`."""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli._common import Cli, add_json_flag, percent, print_fields, print_json, print_table
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
        "display_state": trial.get("display_state") or trial.get("state"),
    }
    print_fields(
        cli,
        shown,
        [
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
        ],
    )
    if metrics:
        names = sorted({k for m in metrics for k in (m.get("metrics") or {})})
        cli.out.write("\n")
        cols = [("STEPS", "steps_completed")] + [
            (n.upper(), lambda m, n=n: (m.get("metrics") or {}).get(n)) for n in names
        ]
        print_table(cli, metrics, cols)
    return 0


def logs(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    if args.follow:
        for log in client.follow_trial_logs(args.id):
            print_log_line(args.id, log, prefix=False)
        return 0
    after = 0
    while True:
        page = client.trial_logs(args.id, after=after, limit=1000)
        lines = page.get("logs") or []
        if not lines:
            return 0
        for log in lines:
            print_log_line(args.id, log, prefix=False)
        after = int(lines[-1].get("seq", after))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", aliases=["t"], help="inspect trials")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("describe", help="a trial's state, hyperparameters and results")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--metrics", action="store_true", help="also show validation metrics")
    add_json_flag(x)
    x.set_defaults(func=describe)

    x = s.add_parser("logs", help="a trial's logs")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    x.set_defaults(func=logs)
