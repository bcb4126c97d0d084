"""`det task list` and `det cmd run|list|logs|kill` (Determined's nouns and forms)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from harness.cli._common import Cli, CliError, Column, add_json_flag, print_json, print_table, when
from harness.cli._modeldef import add_context_args, pack_context
from harness.cli._overrides import OverrideError, apply_overrides


def _agents(t: dict[str, Any]) -> str:
    alloc = t.get("allocation") or {}
    if alloc.get("state") not in ("ASSIGNED", "RUNNING"):
        return ""
    return ",".join(alloc.get("agents") or [])


TASK_COLUMNS: list[Column] = [
    ("Task ID", "id"),
    ("Type", "type"),
    ("State", "state"),
    ("Allocation ID", lambda t: (t.get("allocation") or {}).get("id", "")),
    ("Name", "name"),
    ("Slots Needed", "slots"),
    ("Registered Time", lambda t: when(t.get("created_at"))),
    ("Agent", _agents),
    ("Priority", "priority"),
    ("Resource Pool", "resource_pool"),
]

COMMAND_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("Owner", "owner"),
    ("Description", "name"),
    ("State", "state"),
    ("Exit Status", "exit_code"),
    ("Resource Pool", "resource_pool"),
]


def list_tasks(cli: Cli, args: argparse.Namespace) -> int:
    tasks = cli.client().list_tasks(args.type, active=not args.all)
    if args.json:
        print_json(cli, tasks)
        return 0
    print_table(cli, tasks, TASK_COLUMNS)
    return 0


def run_command(cli: Cli, args: argparse.Namespace) -> int:
    if args.entrypoint[:1] == ["--"]:  # argparse's REMAINDER keeps the separator
        args.entrypoint = args.entrypoint[1:]
    if not args.entrypoint:
        raise CliError("give the command to run: det cmd run [OPTIONS] -- COMMAND [ARG...]")
    from harness.cli._tasks import task_config  # _tasks imports this module

    config = task_config(args, "command")  # --config-file, --description
    try:
        config = apply_overrides(config, args.config or [])
    except OverrideError as e:
        raise CliError(str(e)) from e
    # The flags go on top of the file and the overrides, as Determined's did.
    resources = config.get("resources")
    if not isinstance(resources, dict):
        resources = config["resources"] = {} if resources is None else resources
    for key, value in (
        ("slots", args.slots),
        ("priority", args.priority),
        ("resource_pool", args.resource_pool),
        ("preemptible", True if args.preemptible else None),
    ):
        if value is not None and isinstance(resources, dict):
            resources[key] = value
    config["entrypoint"] = args.entrypoint
    if args.env:
        environment = config.setdefault("environment", {})
        if isinstance(environment, dict):
            env = environment.get("environment_variables") or []
            if isinstance(env, list):
                environment["environment_variables"] = [*env, *args.env]
            else:  # Determined's per-device form: the master names a bad one
                raise CliError("--env cannot be added to a per-device environment_variables")
    client = cli.client()
    cmd = client.run_command(config, pack_context(args))
    if args.json:
        print_json(cli, cmd)
        return 0
    cli.out.write(f"Launched command (id: {cmd['id']}): {shlex.join(args.entrypoint)}\n")
    if args.detach:
        return 0
    cli.out.flush()
    return _print_logs(cli, cmd["id"], follow=True)


def list_commands(cli: Cli, args: argparse.Namespace) -> int:
    cmds = cli.client().list_commands()
    if args.json:
        print_json(cli, cmds)
        return 0
    print_table(cli, cmds, COMMAND_COLUMNS)
    return 0


def _print_logs(cli: Cli, task_id: str, follow: bool) -> int:
    client = cli.client()
    if follow:
        for log in client.follow_task_logs(task_id):
            cli.out.write(str(log.get("line", "")).rstrip("\n") + "\n")
            cli.out.flush()
        task = client.get_task(task_id)
        code = task.get("exit_code")
        if task.get("state") != "COMPLETED":
            sys.stderr.write(f"command {task_id} ended {task.get('state')} (exit code {code})\n")
            return 1
        return 0
    after = 0
    while True:
        lines = client.task_logs(task_id, after=after, limit=1000).get("logs") or []
        if not lines:
            return 0
        for log in lines:
            cli.out.write(str(log.get("line", "")).rstrip("\n") + "\n")
        after = int(lines[-1].get("seq", after))


def command_logs(cli: Cli, args: argparse.Namespace) -> int:
    return _print_logs(cli, args.id, follow=args.follow)


task_logs = command_logs  # any task's log: notebooks and shells use it too


def kill_command(cli: Cli, args: argparse.Namespace) -> int:
    cmd = cli.client().kill_command(args.id)
    cli.out.write(f"Killed command {args.id} ({cmd.get('state')})\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("task", help="every task the cluster runs (trials, commands, ...)")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("list", aliases=["ls"], help="tasks, newest first (active ones unless --all)")
    x.add_argument("--type", help="only this task type (TRIAL, COMMAND, ...)")
    x.add_argument("--all", action="store_true", help="ended tasks too")
    add_json_flag(x)
    x.set_defaults(func=list_tasks)

    p = sub.add_parser("command", aliases=["cmd"], help="run programs on the cluster")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("run", help="run a command (its logs follow unless --detach)")
    x.add_argument("entrypoint", nargs=argparse.REMAINDER, metavar="COMMAND")
    x.add_argument("--config-file", help="Determined's command config (YAML)")
    x.add_argument(
        "--config",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a config key, e.g. --config resources.slots=2 (repeatable)",
    )
    x.add_argument("--slots", type=int, help="slots it needs, all at once (default 1)")
    x.add_argument("--priority", type=int, help="1 (first) to 99")
    x.add_argument("--resource-pool", help="the pool to run in")
    x.add_argument("--preemptible", action="store_true", help="may be stopped and re-run")
    x.add_argument("--description", help="a name for it")
    x.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable")
    add_context_args(x)
    x.add_argument("-d", "--detach", action="store_true", help="print its id and return")
    add_json_flag(x)
    x.set_defaults(func=run_command)
    x = s.add_parser("list", aliases=["ls"], help="commands, newest first")
    add_json_flag(x)
    x.set_defaults(func=list_commands)
    x = s.add_parser("logs", help="a command's output")
    x.add_argument("id", metavar="ID")
    x.add_argument("-f", "--follow", action="store_true", help="until it ends")
    x.set_defaults(func=command_logs)
    x = s.add_parser("kill", help="kill a command")
    x.add_argument("id", metavar="ID")
    x.set_defaults(func=kill_command)
