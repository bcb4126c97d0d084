"""`det user ...`: login, logout, whoami, list, create, change-password."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from harness.api import auth
from harness.cli._common import Cli, CliError, add_json_flag, print_json, print_table


def _password(prompt: str, confirm: bool = False, *, instead: str) -> str:
    """Ask on the terminal (getpass reads stdin when there is none); with neither (a script
    without input) say what to pass instead of a traceback."""
    try:
        pw = getpass.getpass(prompt)
        if confirm and getpass.getpass("Confirm password: ") != pw:
            raise CliError("passwords do not match")
    except EOFError:
        where = "no terminal" if not sys.stdin.isatty() else "no input"
        raise CliError(f"{where} to read the password from: {instead}") from None
    return pw


def login(cli: Cli, args: argparse.Namespace) -> int:
    password = os.environ.get("DET_PASSWORD")
    if password is None:
        auth.check_reachable(cli.master)  # before asking for a password it could not use
        password = _password(
            f"Password for {args.name}: ", instead="set DET_PASSWORD or run it in a terminal"
        )
    session = auth.login(cli.master, args.name, password)
    cli.out.write(f"Logged in as {args.name} on {session.master}\n")
    return 0


def logout(cli: Cli, args: argparse.Namespace) -> int:
    found = auth.cached_token(cli.master)
    if found is None:
        cli.out.write("Not logged in\n")
        return 0
    user, token = found
    try:
        client = cli.anonymous()
        client.session.token = token
        client.logout()
    except Exception:  # revoking is best effort; forgetting the token is what matters
        pass
    auth.remove_token(cli.master, user)
    cli.out.write(f"Logged out {user}\n")
    return 0


def whoami(cli: Cli, args: argparse.Namespace) -> int:
    me = cli.client().me()
    if args.json:
        print_json(cli, me)
    else:
        role = " (admin)" if me.get("admin") else ""
        cli.out.write(f"You are logged in as {me['username']}{role} on {cli.client().master}\n")
    return 0


def list_users(cli: Cli, args: argparse.Namespace) -> int:
    users = cli.client().list_users()
    if args.json:
        print_json(cli, users)
        return 0
    print_table(
        cli,
        users,
        [("ID", "id"), ("USERNAME", "username"), ("ADMIN", "admin"), ("ACTIVE", "active")],
    )
    return 0


def create(cli: Cli, args: argparse.Namespace) -> int:
    password = args.password
    if password is None:
        password = _password(
            f"Password for new user {args.name}: ",
            confirm=True,
            instead="give --password PASSWORD or run it in a terminal",
        )
    user = cli.client().create_user(args.name, password, admin=args.admin)
    cli.out.write(f"Created user {user.get('username', args.name)}\n")
    return 0


def change_password(cli: Cli, args: argparse.Namespace) -> int:
    """Your own password needs the current one; an admin resetting NAME's does not. Every other
    session of the user ends; yours continues with the token the master reissued."""
    client = cli.client()
    me = client.me()["username"]
    name = args.name or me
    current = None
    if name == me:
        current = _password(f"Current password for {name}: ", instead="run it in a terminal")
    password = _password(f"New password for {name}: ", confirm=True, instead="run it in a terminal")
    reply = client.change_password(name, password, current_password=current)
    if reply.get("token"):
        auth.save_token(cli.master, name, reply["token"])
    cli.out.write(f"Changed the password of {name}\n")
    return 0


def link_with_agent_user(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().link_with_agent_user(
        args.name,
        agent_uid=args.agent_uid,
        agent_gid=args.agent_gid,
        agent_user=args.agent_user,
        agent_group=args.agent_group,
    )
    cli.out.write(
        f"{args.name}'s trials run as {args.agent_user}:{args.agent_group} "
        f"({args.agent_uid}:{args.agent_gid}) on agents\n"
    )
    return 0


def set_active(cli: Cli, args: argparse.Namespace) -> int:
    """`det user activate|deactivate NAME` (admins): a deactivated user cannot log in."""
    cli.client().patch_user(args.name, active=args.active)
    cli.out.write(f"{'Activated' if args.active else 'Deactivated'} user {args.name}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("user", aliases=["u"], help="log in and manage users")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("login", help="log in (password prompt, or DET_PASSWORD)")
    x.add_argument("name")
    x.set_defaults(func=login)

    x = s.add_parser("logout", help="forget (and revoke) the cached token")
    x.set_defaults(func=logout)

    x = s.add_parser("whoami", help="who you are logged in as")
    add_json_flag(x)
    x.set_defaults(func=whoami)

    x = s.add_parser("list", aliases=["ls"], help="list users")
    add_json_flag(x)
    x.set_defaults(func=list_users)

    x = s.add_parser("create", help="create a user (admin)")
    x.add_argument("name")
    x.add_argument("--admin", action="store_true", help="give the user admin rights")
    x.add_argument("--password", help="the new user's password (default: prompt)")
    x.set_defaults(func=create)

    for action, active in (("activate", True), ("deactivate", False)):
        x = s.add_parser(action, help=f"{action} user NAME (admin)")
        x.add_argument("name")
        x.set_defaults(func=set_active, active=active)

    x = s.add_parser("change-password", help="change your (or, as admin, NAME's) password")
    x.add_argument("name", nargs="?")
    x.set_defaults(func=change_password)

    x = s.add_parser(
        "link-with-agent-user", help="the Unix user NAME's trials run as on agents (admin)"
    )
    x.add_argument("name")
    for flag, kind in (
        ("--agent-uid", int),
        ("--agent-gid", int),
        ("--agent-user", str),
        ("--agent-group", str),
    ):
        x.add_argument(flag, type=kind, required=True)
    x.set_defaults(func=link_with_agent_user)
