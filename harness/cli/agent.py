"""`det agent list | pools | reset-credential`."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, add_json_flag, print_json, print_table, when


def list_agents(cli: Cli, args: argparse.Namespace) -> int:
    agents = cli.client().list_agents(all_agents=args.all)
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
    print_instances(cli, provider_pools(cli))
    return 0


def provider_pools(cli: Cli) -> list[dict]:
    """The pools with a cloud provider (elastic agents); [] from a master without them."""
    from harness.api import NotFound

    try:
        return cli.client().provisioner_pools()
    except NotFound:
        return []


def print_instances(cli: Cli, pools: list[dict]) -> None:
    for pool in pools:
        live = pool.get("instances") or []
        cli.out.write(
            f"\nPool {pool['name']} ({pool['provider']}, {pool['instance_type']}, "
            f"{pool['instance_slots']} slot(s) each): {len(live)} instance(s), "
            f"{pool.get('pending_launches', 0)} starting, "
            f"min {pool['min_instances']}, max {pool['max_instances']}\n"
        )
        if pool.get("last_error"):
            retry = (
                f"; next try after {when(pool['backoff_until'])}"
                if pool.get("backoff_until")
                else ""
            )
            at = when(pool.get("last_error_at"))
            cli.out.write(f"Last launch error ({at}): {pool['last_error']}{retry}\n")
        rows = live + (pool.get("recent") or [])[:5]
        if rows:
            print_table(
                cli,
                rows,
                [
                    ("INSTANCE", lambda r: r.get("cloud_id") or "(launching)"),
                    ("STATE", "state"),
                    ("TYPE", "instance_type"),
                    ("SPOT", "spot"),
                    ("LAUNCHED", lambda r: when(r.get("launched_at"))),
                    ("WHY", lambda r: r.get("last_error") or r.get("state_reason")),
                ],
            )


def list_pools(cli: Cli, args: argparse.Namespace) -> int:
    pools = provider_pools(cli)
    if args.json:
        print_json(cli, pools)
    else:
        print_instances(cli, pools)
    return 0


def reset_credential(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().reset_agent_credential(args.agent_id)
    cli.out.write(
        f"Reset the credential of agent {args.agent_id}: it stops working now; the agent's next "
        "start exchanges the cluster's join token (DET_AGENT_TOKEN) for a new one\n"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", aliases=["a"], help="inspect agents")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="agents and their slots")
    x.add_argument(
        "--all",
        "-a",
        action="store_true",
        help="also LOST agents gone longer than the master's lost_agent_retention (default 1 h)",
    )
    add_json_flag(x)
    x.set_defaults(func=list_agents)
    x = s.add_parser("pools", help="elastic pools: cloud instances, launches and launch errors")
    add_json_flag(x)
    x.set_defaults(func=list_pools)
    x = s.add_parser(
        "reset-credential", help="forget an agent's credential (admin; a lost or leaked one)"
    )
    x.add_argument("agent_id")
    x.set_defaults(func=reset_credential)
