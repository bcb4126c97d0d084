"""`det agent list`."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, add_json_flag, print_json, print_table, when


def list_agents(cli: Cli, args: argparse.Namespace) -> int:
    agents = cli.client().list_agents()
    if args.json:
        print_json(cli, agents)
        return 0
    print_table(
        cli,
        agents,
        [
            ("ID", "id"),
            ("STATE", "state"),
            ("POOL", "resource_pool"),
            ("HOSTNAME", "hostname"),
            ("RUNTIME", "runtime"),
            ("SLOTS", lambda a: len(a.get("slots") or [])),
            ("USED", lambda a: sum(1 for s in a.get("slots") or [] if s.get("allocation_id"))),
            ("TYPE", lambda a: ",".join(sorted({s.get("type", "") for s in a.get("slots") or []}))),
            ("LAST SEEN", lambda a: when(a.get("last_seen"))),
        ],
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", aliases=["a"], help="inspect agents")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="agents and their slots")
    add_json_flag(x)
    x.set_defaults(func=list_agents)
