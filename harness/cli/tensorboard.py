"""`det tensorboard start|list|open|logs|kill` (Determined's forms): TensorBoard over some
trials' event files, reached through the master's proxy with the CLI's own login."""

from __future__ import annotations

import argparse

from harness.cli._common import Cli, CliError, Column, add_json_flag, print_json
from harness.cli._tasks import (
    TaskKind,
    add_subcommands,
    print_warnings,
    show,
    task_config,
    wait_ready,
)

COLUMNS: list[Column] = [
    ("ID", "id"),
    ("Owner", "owner"),
    ("Description", "name"),
    ("State", "state"),
    ("Experiment IDs", lambda t: ",".join(str(i) for i in t.get("experiment_ids") or [])),
    ("Trial IDs", lambda t: ",".join(str(i) for i in t.get("trial_ids") or [])),
    ("Resource Pool", "resource_pool"),
]
TENSORBOARD = TaskKind(
    noun="TensorBoard",
    command="tensorboard",
    columns=COLUMNS,
    list_rows=lambda c: c.list_tensorboards(),
    get=lambda c, i: c.get_tensorboard(i),
    kill=lambda c, i: c.kill_tensorboard(i),
    app="TensorBoard",
)


def start(cli: Cli, args: argparse.Namespace) -> int:
    if not args.experiment_ids and not args.trial_ids:
        raise CliError("name experiments or trials: det tensorboard start EXP_ID... | -t ID...")
    client = cli.client()
    tb = client.start_tensorboard(
        args.experiment_ids, args.trial_ids or [], task_config(args, "TensorBoards")
    )
    print_warnings(tb)
    if args.json and args.detach:
        print_json(cli, tb)
        return 0
    if not args.json:
        cli.out.write(f"Launched TensorBoard (id: {tb['id']})\n")
        cli.out.flush()
    if args.detach:
        return 0
    url = wait_ready(client, tb["id"], "data/runs", "TensorBoard", "tensorboard")
    if args.json:  # for scripts: the proxy's own URL, where their bearer token works
        print_json(cli, {**client.get_tensorboard(tb["id"]), "url": url})
        return 0
    show(cli, client, TENSORBOARD, tb["id"], not args.no_browser)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tensorboard", help="TensorBoard over trials, through the master")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    x = s.add_parser("start", help="start TensorBoard and open it once it is ready")
    x.add_argument("experiment_ids", nargs="*", type=int, metavar="EXP_ID")
    x.add_argument(
        "-t", "--trial-ids", nargs="+", type=int, metavar="TRIAL_ID", help="these trials"
    )
    x.add_argument("--config-file", help="Determined's TensorBoard config (YAML)")
    x.add_argument("--description", help="a name for it")
    x.add_argument("--no-browser", action="store_true", help="print its URL only")
    x.add_argument("-d", "--detach", action="store_true", help="print its id and return")
    add_json_flag(x)
    x.set_defaults(func=start)
    add_subcommands(s, TENSORBOARD, "TensorBoards")
