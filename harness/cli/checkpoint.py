"""`det checkpoint list|download`."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness.cli._common import Cli, add_json_flag, print_json, print_table, size, when


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
    else:
        for key in ("uuid", "trial_id", "steps_completed", "state", "reported_at"):
            cli.out.write(f"{key}: {ckpt.get(key)}\n")
        cli.out.write(f"metadata: {ckpt.get('metadata')}\n")
        cli.out.write(
            f"files: {len(ckpt.get('resources') or {})}, size: {size(ckpt.get('size'))}\n"
        )
    return 0


def download(cli: Cli, args: argparse.Namespace) -> int:
    """Copy straight from shared storage when this machine sees it, else via the master."""
    client = cli.client()
    dest = Path(args.output or Path("checkpoints") / args.uuid)
    ckpt = client.get_checkpoint(args.uuid)
    storage = ckpt.get("storage") or {}
    src = Path(storage["path"]) if storage.get("path") else None
    if storage.get("type", "shared_fs") == "shared_fs" and src is not None and src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        client.download_checkpoint(args.uuid, dest)
    cli.out.write(f"Downloaded checkpoint {args.uuid} to {dest}\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("checkpoint", help="list and download checkpoints")
    s = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    x = s.add_parser("list", aliases=["ls"], help="checkpoints of an experiment or a trial")
    x.add_argument("experiment_id", type=int, nargs="?", metavar="EXPERIMENT_ID")
    g = x.add_mutually_exclusive_group()
    g.add_argument("--experiment", "-e", type=int, metavar="ID")
    g.add_argument("--trial", "-t", type=int, metavar="ID")
    add_json_flag(x)
    x.set_defaults(func=list_checkpoints)

    x = s.add_parser("describe", help="one checkpoint: trial, steps, metadata, files")
    x.add_argument("uuid", metavar="UUID")
    add_json_flag(x)
    x.set_defaults(func=describe)

    x = s.add_parser("download", help="fetch a checkpoint's files")
    x.add_argument("uuid", metavar="UUID")
    x.add_argument("-o", "--output", metavar="DIR", help="default: ./checkpoints/UUID")
    x.set_defaults(func=download)
