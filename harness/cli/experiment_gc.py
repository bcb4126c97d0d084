"""`det experiment set gc-policy`, `det experiment delete`, `det experiment gc-preview` (dry run),
and the checkpoint line of `det experiment describe`."""

from __future__ import annotations

import argparse

from harness.api import NotFound
from harness.api.client import Client
from harness.cli._common import Cli, add_json_flag, print_json, print_table, size
from harness.cli.checkpoint import confirm

POLICY_FLAGS = ("save_experiment_best", "save_trial_best", "save_trial_latest")


def _policy_args(args: argparse.Namespace) -> dict[str, int]:
    return {k: getattr(args, k) for k in POLICY_FLAGS if getattr(args, k) is not None}


def _print_plan(cli: Cli, client: Client, plan: dict) -> None:
    p = plan["policy"]
    cli.out.write(
        f"Policy: save_experiment_best={p['save_experiment_best']} "
        f"save_trial_best={p['save_trial_best']} save_trial_latest={p['save_trial_latest']}\n"
    )
    if not plan["delete"]:
        cli.out.write("No checkpoints would be deleted.\n")
        return
    doomed = set(plan["delete"])
    rows = [
        c
        for c in client.list_checkpoints(experiment_id=plan["experiment_id"])
        if c["uuid"] in doomed
    ]
    print_table(
        cli,
        rows,
        [
            ("UUID", "uuid"),
            ("TRIAL", "trial_id"),
            ("STEPS", "steps_completed"),
            ("SIZE", lambda c: size(c.get("size"))),
        ],
    )
    freed = plan["bytes_freed"]
    cli.out.write(
        f"{len(plan['delete'])} checkpoint(s) would be deleted, freeing {size(freed)} "
        f"({freed} bytes); {len(plan['keep'])} kept.\n"
    )


def gc_preview(cli: Cli, args: argparse.Namespace) -> int:
    """Dry run: what a policy would delete now and the bytes it frees; nothing changes."""
    client = cli.client()
    plan = client.checkpoint_gc_plan(args.id, **_policy_args(args))
    if args.json:
        print_json(cli, plan)
        return 0
    _print_plan(cli, client, plan)
    return 0


def set_gc_policy(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    changes = _policy_args(args)
    plan = client.checkpoint_gc_plan(args.id, **changes)
    _print_plan(cli, client, plan)
    if args.dry_run:
        return 0
    if plan["delete"] and not args.yes and not confirm(cli, "Apply this policy?"):
        cli.out.write("Policy unchanged.\n")
        return 1
    client.set_gc_policy(args.id, **changes)
    cli.out.write(f"Set the GC policy of experiment {args.id}; garbage collection re-ran.\n")
    return 0


def delete(cli: Cli, args: argparse.Namespace) -> int:
    client = cli.client()
    if not args.yes:
        usage = client.checkpoint_usage(args.id)
        question = (
            f"Delete experiment {args.id}, its {usage['count']} checkpoint(s) "
            f"({size(usage['bytes'])}) and all its records? Registered checkpoints are kept."
        )
        if not confirm(cli, question):
            cli.out.write("Nothing deleted.\n")
            return 1
    out = client.delete_experiment(args.id)
    kept = out.get("registered_kept") or []
    cli.out.write(
        f"Deleted experiment {args.id}: {out['checkpoints_deleted']} checkpoint(s), "
        f"{size(out['bytes_freed'])} freed"
        + (f"; {len(kept)} registered checkpoint(s) kept" if kept else "")
        + "\n"
    )
    return 0


def checkpoint_usage(cli: Cli, exp_id: int) -> dict | None:
    """Checkpoint count/bytes, or None from a master without the route (an older one)."""
    try:
        return cli.client().checkpoint_usage(exp_id)
    except NotFound:
        return None


def describe_checkpoints(cli: Cli, exp_id: int) -> None:
    """The `Checkpoints:` line of `det experiment describe`."""
    u = checkpoint_usage(cli, exp_id)
    if u is None:
        return
    cli.out.write(f"Checkpoints: {u['count']} ({size(u['bytes'])}, {u['bytes']} bytes)\n")


def _add_policy_flags(x: argparse.ArgumentParser) -> None:
    for key in POLICY_FLAGS:
        x.add_argument("--" + key.replace("_", "-"), dest=key, type=int, metavar="N")


def add_commands(s: argparse._SubParsersAction, set_fields: argparse._SubParsersAction) -> None:
    """gc-preview and delete, and `set gc-policy` among `det experiment set`'s fields."""
    y = set_fields.add_parser("gc-policy", help="change the checkpoint GC policy (GC re-runs)")
    _add_policy_flags(y)
    y.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    y.add_argument("--dry-run", action="store_true", help="only show what would be deleted")
    y.add_argument("id", type=int, metavar="ID")
    y.set_defaults(func=set_gc_policy)

    x = s.add_parser("gc-preview", help="dry run: what a GC policy would delete, bytes freed")
    _add_policy_flags(x)
    x.add_argument("id", type=int, metavar="ID")
    add_json_flag(x)
    x.set_defaults(func=gc_preview)

    x = s.add_parser("delete", help="delete an ended experiment, its checkpoints and records")
    x.add_argument("id", type=int, metavar="ID")
    x.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    x.set_defaults(func=delete)
