"""`det notebook start|list|open|logs|kill` (Determined's forms): JupyterLab on a slot, reached
through the master's proxy with the CLI's own login (the notebook's token never leaves the
master)."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, Column, add_json_flag, print_json
from harness.cli._modeldef import add_context_args, pack_context
from harness.cli._tasks import TaskKind, add_subcommands, print_warnings, show, task_config
from harness.cli._tasks import wait_ready as _wait_ready

NOTEBOOK_COLUMNS: list[Column] = [
    ("ID", "id"),
    ("Owner", "owner"),
    ("Description", "name"),
    ("State", "state"),
    ("Exit Status", "exit_code"),
    ("Resource Pool", "resource_pool"),
]
NOTEBOOK = TaskKind(
    noun="notebook",
    command="notebook",
    columns=NOTEBOOK_COLUMNS,
    list_rows=lambda c: c.list_notebooks(),
    get=lambda c, i: c.get_notebook(i),
    kill=lambda c, i: c.kill_notebook(i),
    app="JupyterLab",
    page="lab",
)


def start(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    nb = client.start_notebook(task_config(args, "notebooks"), pack_context(args))
    print_warnings(nb)
    if args.json and args.detach:
        print_json(cli, nb)
        return 0
    if not args.json:
        cli.out.write(f"Launched notebook (id: {nb['id']})\n")
        cli.out.flush()
    if args.detach:
        return 0
    _wait_ready(client, nb["id"], "api/status", "notebook")
    if args.json:  # for scripts: the proxy's own URL, where their bearer token works
        print_json(cli, {**client.get_notebook(nb["id"]), "url": client.proxy_url(nb["id"], "lab")})
        return 0
    show(cli, client, NOTEBOOK, nb["id"], not args.no_browser)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("notebook", help="JupyterLab on the cluster, through the master")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("start", help="start a notebook and open it once it is ready")
    x.add_argument("--config-file", help="Determined's notebook config (YAML)")
    add_context_args(x)
    x.add_argument("--description", help="a name for it")
    x.add_argument("--no-browser", action="store_true", help="print its URL only")
    x.add_argument("-d", "--detach", action="store_true", help="print its id and return")
    add_json_flag(x)
    x.set_defaults(func=start)
    add_subcommands(s, NOTEBOOK, "notebooks")
