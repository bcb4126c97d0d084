"""`det trial download|kill` as Determined 0.38.1's CLI spells them."""

from __future__ import annotations

import argparse
import warnings

from harness.cli._common import Cli, CliError

# Determined's downloadable checkpoint states (detlab's ACTIVE is its COMPLETED).
DOWNLOADABLE = {"ACTIVE", "COMPLETED", "PARTIALLY_DELETED"}


def download(cli: Cli, args: argparse.Namespace) -> int:
    """One checkpoint of the trial: `--best` (by `--sort-by`, default the searcher metric),
    `--latest` or `--uuid`, into `-o DIR` (default `checkpoints/UUID`)."""
    from harness._sdk_objects import Checkpoint, Trial

    if args.sort_by is not None and not args.best:
        raise CliError("--sort-by and --smaller-is-better flags can only be used with --best")
    if (args.sort_by is None) != (args.smaller_is_better is None):
        raise CliError("--sort-by and --smaller-is-better must be set together")
    client = cli.client()
    if args.uuid:
        ckpt = Checkpoint(client, client.get_checkpoint(args.uuid))
    else:
        trial = Trial(client, args.trial_id)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the CLI is not deprecated
            try:
                found = [
                    c
                    for c in _candidates(trial, args)
                    if (c.state or "ACTIVE").upper() in DOWNLOADABLE
                ]
            except ValueError as e:
                raise CliError(str(e)) from e
        if not found:
            raise CliError(f"No downloadable checkpoint found for trial {args.trial_id}")
        ckpt = found[0]
    try:
        path = ckpt.download(args.output_dir)
    except FileNotFoundError as e:
        raise CliError(str(e)) from e
    if args.quiet:
        cli.out.write(f"{path}\n")
    else:
        cli.out.write(
            f"Local checkpoint path:\n{path}\n\n  uuid {ckpt.uuid}, trial {ckpt.trial_id}, "
            f"{ckpt.steps_completed} batches\n"
        )
    return 0


def _candidates(trial: object, args: argparse.Namespace) -> list:
    from harness._sdk_objects import CheckpointSortBy, OrderBy, Trial

    assert isinstance(trial, Trial)
    if args.latest:
        return trial.list_checkpoints(CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC)
    if args.sort_by is None:
        return trial.list_checkpoints()
    order = OrderBy.ASC if args.smaller_is_better else OrderBy.DESC
    return trial.list_checkpoints(args.sort_by, order)


def kill(cli: Cli, args: argparse.Namespace) -> int:
    cli.client().kill_trial(args.trial_id)
    cli.out.write(f"Killed trial {args.trial_id}\n")
    return 0


def add_commands(s: argparse._SubParsersAction) -> None:
    from harness.cli.experiment_daily import _strtobool

    x = s.add_parser("download", help="download a checkpoint of the trial (best, latest, uuid)")
    x.add_argument("trial_id", type=int, metavar="ID")
    which = x.add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the best validation metric")
    which.add_argument("--latest", action="store_true", help="the most recent checkpoint")
    which.add_argument("--uuid", metavar="UUID", help="this checkpoint")
    x.add_argument("-o", "--output-dir", metavar="DIR", help="default: checkpoints/UUID")
    x.add_argument("--sort-by", metavar="METRIC", help="with --best: this validation metric")
    x.add_argument("--smaller-is-better", type=_strtobool, default=None, metavar="true|false")
    x.add_argument("-q", "--quiet", action="store_true", help="only print the path")
    x.set_defaults(func=download)

    x = s.add_parser("kill", help="kill the trial (its experiment goes on)")
    x.add_argument("trial_id", type=int, metavar="ID")
    x.set_defaults(func=kill)
