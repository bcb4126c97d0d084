"""The cluster nouns Determined users type: `det version`, `det master info|config|logs`,
`det slot list` and `det resource-pool list`."""

from __future__ import annotations

import argparse
import time
from typing import Any

import yaml

from harness.cli._common import Cli, add_json_flag, print_json
from harness.cli._render import print_rows


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("detlab")
    except PackageNotFoundError:
        return "unknown"


def show_version(cli: Cli, args: argparse.Namespace) -> int:
    """As Determined's `det version`: the client's and the master's versions (YAML)."""
    from harness.api import DetError

    master: dict[str, Any] = {"version": ""}
    try:
        master = {"version": cli.anonymous().health().get("version", "")}
    except DetError as e:  # an unreachable master is a fact to show, not a failure
        master["error"] = str(e)
    info = {"client": {"version": _version()}, "master": master, "master_address": cli.master}
    _dump(cli, info, args.json)
    return 0


def _dump(cli: Cli, obj: Any, as_json: bool) -> None:
    if as_json:
        print_json(cli, obj)
    else:
        yaml.safe_dump(obj, cli.out, default_flow_style=False, sort_keys=False)


def master_info(cli: Cli, args: argparse.Namespace) -> int:
    _dump(cli, cli.client().master_info(), args.json)
    return 0


def master_config(cli: Cli, args: argparse.Namespace) -> int:
    _dump(cli, cli.client().master_config(), args.json)
    return 0


def master_logs(cli: Cli, args: argparse.Namespace) -> int:
    """Determined's line shape: `TIME [LEVEL]: message`; `-f` keeps polling."""
    client = cli.client()
    rows = client.master_logs(tail=max(args.tail, 1)) if args.tail is not None else []
    after = rows[-1]["seq"] if rows else 0
    rows = rows[len(rows) - args.tail :] if args.tail is not None else client.master_logs()
    while True:
        for r in rows:
            cli.out.write(f"{r['time']} [{r['level']}]: {r['logger']}: {r['message']}\n")
        cli.out.flush()
        after = rows[-1]["seq"] if rows else after
        rows = client.master_logs(after=after)
        if not rows:
            if not args.follow:
                return 0
            time.sleep(1.0)


def list_slots(cli: Cli, args: argparse.Namespace) -> int:
    agents = cli.client().list_agents()
    slots = [
        {
            "agent_id": a["id"],
            "resource_pool": a.get("resource_pool"),
            "slot_id": s.get("index"),
            "enabled": s.get("enabled", True),
            "draining": a.get("state") != "ACTIVE",
            "allocation_id": s.get("allocation_id") or "FREE",
            "task_name": f"trial {s['trial_id']}" if s.get("trial_id") else "",
            "type": s.get("type"),
            "device": s.get("name"),
        }
        for a in sorted(agents, key=lambda a: a["id"])
        for s in a.get("slots") or []
    ]
    if args.json:
        print_json(cli, slots)
        return 0
    headers = ["Agent ID", "Resource Pool", "Slot ID", "Enabled", "Draining"]
    headers += ["Allocation ID", "Task Name", "Type", "Device"]
    print_rows(cli, headers, [list(s.values()) for s in slots], args.csv)
    return 0


def list_pools(cli: Cli, args: argparse.Namespace) -> int:
    pools = cli.client().job_queues()
    if args.json:
        print_json(cli, [{k: v for k, v in p.items() if k != "jobs"} for p in pools])
        return 0
    headers = ["Name", "Description", "Scheduler", "Preemption", "Agents", "Slots", "Slots Used"]
    rows = [
        [p["name"], p.get("description") or "", (p.get("scheduler") or {}).get("type")]
        + [(p.get("scheduler") or {}).get("preemption"), p.get("agents")]
        + [p.get("slots_total"), p.get("slots_used")]
        for p in pools
    ]
    print_rows(cli, headers, rows, args.csv)
    return 0


def _count(value: str) -> int:
    n = int(value) if value.isdigit() else -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines, not {value!r}")
    return n


def _fmt(x: argparse.ArgumentParser, csv: bool = False) -> None:
    g = x.add_mutually_exclusive_group()
    if csv:
        g.add_argument("--csv", action="store_true", help="print as CSV")
    g.add_argument("--json", action="store_true", help="print machine-readable JSON")
    g.add_argument("--yaml", action="store_true", help="print YAML (the default)")


def register(sub: argparse._SubParsersAction) -> None:
    x = sub.add_parser("version", help="the versions of this client and of the master")
    add_json_flag(x)
    x.set_defaults(func=show_version)

    p = sub.add_parser("master", help="the master: info, config, logs")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("info", help="version, database, start time, resource pools")
    _fmt(x)
    x.set_defaults(func=master_info)
    x = s.add_parser("config", help="the master's configuration, credentials masked (admins)")
    c = x.add_subparsers(dest="config_action", metavar="show")
    _fmt(c.add_parser("show", help="show the configuration (the default)"))
    _fmt(x)
    x.set_defaults(func=master_config)
    x = s.add_parser("logs", help="the master's recent log lines (admins)")
    x.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    x.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")
    x.set_defaults(func=master_logs)

    p = sub.add_parser("slot", help="the cluster's slots")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="every slot of every agent")
    _fmt(x, csv=True)
    x.set_defaults(func=list_slots)

    p = sub.add_parser("resource-pool", aliases=["rp"], help="resource pools")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="pools, their schedulers and slots")
    _fmt(x, csv=True)
    x.set_defaults(func=list_pools)
