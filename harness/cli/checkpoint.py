"""`det checkpoint list|describe|download|delete`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli._common import (
    Cli,
    CliError,
    add_json_flag,
    print_fields,
    print_json,
    print_table,
    size,
    when,
)


def list_checkpoints(cli: Cli, args: argparse.Namespace) -> int:
    experiment = args.experiment or getattr(args, "experiment_id", None)
    if (experiment is None) == (args.trial is None):
        sys.stderr.write(
            "usage: det checkpoint list (EXPERIMENT_ID | --experiment ID | --trial ID)\n"
            "det checkpoint list: error: give one of EXPERIMENT_ID, --experiment or --trial\n"
        )
        return 2
    ckpts = cli.client().list_checkpoints(experiment_id=experiment, trial_id=args.trial)
    if args.json:
        print_json(cli, ckpts)
        return 0
    print_table(
        cli,
        ckpts,
        [
            ("UUID", "uuid"),
            ("TRIAL", "trial_id"),
            ("STEPS", "steps_completed"),
            ("STATE", "state"),
            ("SIZE", lambda c: size(c.get("size"))),
            ("REPORTED", lambda c: when(c.get("reported_at"))),
        ],
    )
    return 0


def describe(cli: Cli, args: argparse.Namespace) -> int:
    ckpt = cli.client().get_checkpoint(args.uuid)
    if args.json:
        print_json(cli, ckpt)
        return 0
    shown = {
        **ckpt,
        "size": size(ckpt.get("size")),
        "files": len(ckpt.get("resources") or {}),
        "where": ", ".join(f"{k}={v}" for k, v in (ckpt.get("storage") or {}).items() if v),
        "reported_at": when(ckpt.get("reported_at")),
    }
    print_fields(
        cli,
        shown,
        [
            ("UUID", "uuid"),
            ("Experiment", "experiment_id"),
            ("Trial", "trial_id"),
            ("Steps", "steps_completed"),
            ("State", "state"),
            ("Why", "state_reason"),
            ("Delete attempts", "delete_attempts"),
            ("Size", "size"),
            ("Files", "files"),
            ("Storage", "where"),
            ("Reported", "reported_at"),
        ],
    )
    return 0


def download(cli: Cli, args: argparse.Namespace) -> int:
    """Copy straight from the storage when this machine can read it, else via the master."""
    from harness.storage.fetch import download as fetch

    dest = Path(args.output or Path("checkpoints") / args.uuid)
    # Determined's `--mode master` is detlab's --via-master; `direct` and `auto` both read the
    # storage straight when this machine can (detlab falls back to the master on its own).
    via_master = args.via_master or args.mode == "master"
    try:
        dest, how = fetch(cli.client(), args.uuid, dest, via_master=via_master)
    except FileNotFoundError as e:
        raise CliError(str(e)) from e
    if args.quiet:
        cli.out.write(f"{dest}\n")
    else:
        cli.out.write(f"Downloaded checkpoint {args.uuid} to {dest} ({how})\n")
    return 0


def _uuids(values: list[str]) -> list[str]:
    """UUIDs as Determined takes them (`uuid1,uuid2`) or space-separated, in order, once each."""
    out: list[str] = []
    for value in values:
        for uuid in value.split(","):
            if uuid.strip() and uuid.strip() not in out:
                out.append(uuid.strip())
    if not out:
        raise CliError("no checkpoint UUID given")
    return out


def delete(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    args.uuids = _uuids(args.uuids)
    if not args.yes:
        total = 0
        for uuid in args.uuids:
            total += int(client.get_checkpoint(uuid).get("size") or 0)
        if not confirm(cli, f"Delete {len(args.uuids)} checkpoint(s) ({size(total)})?"):
            cli.out.write("Nothing deleted.\n")
            return 1
    out = client.delete_checkpoints(args.uuids)
    cli.out.write(
        f"Deleting {len(out['deleting'])} checkpoint(s); the GC job removes their files "
        "(see `det checkpoint describe UUID`).\n"
    )
    return 0


def confirm(cli: Cli, question: str) -> bool:
    cli.out.write(f"{question} [y/N] ")
    cli.out.flush()
    try:
        answer = input()
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("checkpoint", aliases=["c"], help="list and download checkpoints")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("list", aliases=["ls"], help="checkpoints of an experiment or a trial")
    x.add_argument("experiment_id", type=int, nargs="?", metavar="EXPERIMENT_ID")
    g = x.add_mutually_exclusive_group()
    g.add_argument("--experiment", "-e", type=int, metavar="ID")
    g.add_argument("--trial", "-t", type=int, metavar="ID")
    add_json_flag(x)
    x.set_defaults(func=list_checkpoints)

    x = s.add_parser("describe", help="a checkpoint: state, size, files, where it is")
    x.add_argument("uuid", metavar="UUID")
    add_json_flag(x)
    x.set_defaults(func=describe)

    x = s.add_parser("download", help="fetch a checkpoint's files")
    x.add_argument("uuid", metavar="UUID")
    x.add_argument(
        "-o",
        "--output-dir",
        "--output",
        dest="output",
        metavar="DIR",
        help="default: ./checkpoints/UUID",
    )
    x.add_argument("-q", "--quiet", action="store_true", help="only print the path")
    x.add_argument("--via-master", action="store_true", help="always go through the master")
    x.add_argument(
        "--mode",
        choices=["auto", "direct", "master"],
        default="auto",
        help="Determined's download modes: master = --via-master",
    )
    x.set_defaults(func=download)

    x = s.add_parser("delete", help="delete checkpoints (not registered ones)")
    x.add_argument("uuids", nargs="+", metavar="UUID", help="UUIDs, or uuid1,uuid2 as Determined")
    x.add_argument("-y", "--yes", action="store_true", help="do not ask first")
    x.set_defaults(func=delete)
