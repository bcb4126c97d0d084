"""`det shell start|open|list|kill` (Determined's forms): a terminal on the cluster in the
user's own terminal, through the master's proxy (harness/shell/client.py)."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, Column, add_json_flag, print_json
from harness.cli._modeldef import add_context_args, pack_context
from harness.cli._tasks import TaskKind, add_subcommands, print_warnings, task_config, wait_ready

SHELL_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("Owner", "owner"),
    ("Description", "name"),
    ("State", "state"),
    ("Resource Pool", "resource_pool"),
]
SHELL = TaskKind(
    noun="shell",
    command="shell",
    columns=SHELL_COLUMNS,
    list_rows=lambda c: c.list_shells(),
    get=lambda c, i: c.get_shell(i),
    kill=lambda c, i: c.kill_shell(i),
)


def _open(cli: Cli, task_id: str, command: list[str]) -> int:
    if command[:1] == ["--"]:
        command = command[1:]
    from harness.shell.client import run_session  # websocket-client: only for a session

    client = cli.client()
    wait_ready(client, task_id, "status", "shell")
    url = client.proxy_url(task_id).replace("http", "ws", 1)
    assert client.session.token is not None
    return run_session(url, client.session.token, command or None)


def start(cli: Cli, args: argparse.Namespace) -> int:
    shell = cli.client().start_shell(task_config(args, "shells"), pack_context(args))
    print_warnings(shell)
    if args.detach:
        if args.json:
            print_json(cli, shell)
        else:
            cli.out.write(f"Launched shell (id: {shell['id']})\n")
        return 0
    cli.out.write(f"Launched shell (id: {shell['id']}); it stays up until det shell kill\n")
    cli.out.flush()
    return _open(cli, shell["id"], args.command)


def open_shell(cli: Cli, args: argparse.Namespace) -> int:
    SHELL.get(cli.client(), args.id)  # 404 naming it
    return _open(cli, args.id, args.command)


def _command(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD", help="run CMD instead of a shell"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shell", help="an interactive terminal on the cluster")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("start", help="start a shell task and open a terminal in it")
    x.add_argument("--config-file", help="Determined's shell config (YAML)")
    add_context_args(x)
    x.add_argument("--description", help="a name for it")
    x.add_argument("-d", "--detach", action="store_true", help="print its id and return")
    add_json_flag(x)
    _command(x)
    x.set_defaults(func=start)
    x = s.add_parser("open", help="open a terminal in a running shell task")
    x.add_argument("id", metavar="ID")
    _command(x)
    x.set_defaults(func=open_shell)
    add_subcommands(s, SHELL, "shells")
