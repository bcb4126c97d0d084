"""What `det notebook`, `det tensorboard` and `det shell` share: the task config a `start`
sends, waiting for the task to answer through the proxy, and the list / open / logs / kill
subcommands, each described once by a `TaskKind`."""

from __future__ import annotations

import argparse
import sys
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from harness.api import Client
from harness.cli._common import Cli, CliError, Column, add_json_flag, print_json, print_table
from harness.cli.task import task_logs

READY_TIMEOUT_S = 300.0
Handler = Callable[[Cli, argparse.Namespace], int]


@dataclass(frozen=True)
class TaskKind:
    noun: str  # as a sentence names it: "notebook", "TensorBoard", "shell"
    command: str  # as `det` spells it: "notebook", "tensorboard", "shell"
    columns: list[Column]
    list_rows: Callable[[Client], list[dict[str, Any]]]
    get: Callable[[Client, str], dict[str, Any]]
    kill: Callable[[Client, str], dict[str, Any]]
    app: str = ""  # what `open` shows in the browser ("JupyterLab"); "" when it has no page
    page: str = ""  # its path under the task's proxy prefix


def task_config(args: argparse.Namespace, noun: str) -> dict[str, Any]:
    """`--config-file` (Determined's task config, YAML) with `--description` on top."""
    config: dict[str, Any] = {}
    if args.config_file:
        import yaml

        try:
            loaded = yaml.safe_load(Path(args.config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise CliError(f"cannot read {args.config_file}: {e}") from e
        if not isinstance(loaded, dict):
            raise CliError(f"{args.config_file}: expected a mapping at the top level")
        config = loaded
    if args.description:
        config["description"] = args.description
    return config


def wait_ready(
    client: Client,
    task_id: str,
    status_path: str,
    noun: str,
    command: str | None = None,
    timeout: float = READY_TIMEOUT_S,
) -> str:
    """Wait until the task answers `status_path` through the proxy; returns its proxy URL."""
    url = client.proxy_url(task_id, "")
    headers = {"Authorization": f"Bearer {client.session.token}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = client.get_task(task_id)
        if task["state"] not in ("ACTIVE", "STOPPING"):
            raise CliError(
                f"{noun} {task_id} ended {task['state']}: "
                f"det {command or noun.lower()} logs {task_id}"
            )
        try:
            if requests.get(url + status_path, headers=headers, timeout=5).status_code == 200:
                return url
        except requests.RequestException:
            pass
        time.sleep(0.25)
    raise CliError(f"{noun} {task_id} was not ready within {timeout:g} s")


def print_warnings(task: dict[str, Any]) -> None:
    for warning in task.get("warnings") or []:
        sys.stderr.write(f"warning: {warning}\n")


def show(cli: Cli, client: Client, kind: TaskKind, task_id: str, browser: bool) -> None:
    """The link on the master's own address: a browser signs in there (if it has not) and is
    sent on to the proxy's port (master/web/views_proxy.py)."""
    url = f"{client.master}/proxy/{task_id}/{kind.page}"
    cli.out.write(f"{kind.app}: {url}\n")
    if browser:
        webbrowser.open(url)


def _lister(kind: TaskKind) -> Handler:
    def list_tasks(cli: Cli, args: argparse.Namespace) -> int:
        rows = kind.list_rows(cli.client())
        if args.json:
            print_json(cli, rows)
        else:
            print_table(cli, rows, kind.columns)
        return 0

    return list_tasks


def _opener(kind: TaskKind) -> Handler:
    def open_task(cli: Cli, args: argparse.Namespace) -> int:
        client = cli.client()
        kind.get(client, args.id)  # 404 naming it, before any URL is printed
        show(cli, client, kind, args.id, not args.no_browser)
        return 0

    return open_task


def _killer(kind: TaskKind) -> Handler:
    def kill(cli: Cli, args: argparse.Namespace) -> int:
        task = kind.kill(cli.client(), args.id)
        cli.out.write(f"Killed {kind.noun} {args.id} ({task.get('state')})\n")
        return 0

    return kill


def add_subcommands(s: argparse._SubParsersAction, kind: TaskKind, plural: str) -> None:
    """`list`, `open` (when the task has a page), `logs` and `kill`."""
    x = s.add_parser("list", aliases=["ls"], help=f"{plural}, newest first")
    add_json_flag(x)
    x.set_defaults(func=_lister(kind))
    if kind.app:
        x = s.add_parser("open", help=f"open a running {kind.noun} in the browser")
        x.add_argument("id", metavar="ID")
        x.add_argument("--no-browser", action="store_true", help="print its URL only")
        x.set_defaults(func=_opener(kind))
    x = s.add_parser("logs", help=f"a {kind.noun}'s own output")
    x.add_argument("id", metavar="ID")
    x.add_argument("-f", "--follow", action="store_true", help="until it ends")
    x.set_defaults(func=task_logs)
    x = s.add_parser("kill", help=f"kill a {kind.noun} (its slot is freed)")
    x.add_argument("id", metavar="ID")
    x.set_defaults(func=_killer(kind))
