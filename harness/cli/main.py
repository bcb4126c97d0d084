"""`det`: the researcher's command line. `main(argv)` returns the exit code (0, 1, 2 usage)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from harness.api import APIError, DetError, MasterUnreachable, Unauthenticated, auth
from harness.cli import (
    agent,
    checkpoint,
    cluster,
    experiment,
    job,
    model,
    notebook,
    shell,
    task,
    template,
    tensorboard,
    trial,
    user,
)
from harness.cli._common import DEFAULT_MASTER, Cli, CliError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det", description="Run and inspect deep-learning experiments on a detlab cluster."
    )
    parser.add_argument(
        "-m",
        "--master",
        default=os.environ.get("DET_MASTER") or DEFAULT_MASTER,
        help="master URL (default: $DET_MASTER or %(default)s)",
    )
    sub = parser.add_subparsers(dest="noun", metavar="NOUN", required=True)
    nouns = (
        experiment,
        trial,
        checkpoint,
        model,
        job,
        task,
        notebook,
        tensorboard,
        shell,
        agent,
        user,
        template,
        cluster,
    )
    for noun in nouns:
        noun.register(sub)
    return parser


def _message(err: Exception, master: str) -> str:
    if isinstance(err, Unauthenticated):
        msg = str(err)
        if "det user login" not in msg:
            msg += f" (log in again: det -m {master} user login NAME)"
        return msg
    if isinstance(err, APIError) and err.path and not str(err).startswith(err.path):
        return f"{err.path}: {err}"
    return str(err)


def hoist_master(argv: Sequence[str]) -> list[str]:
    """Determined accepts `-m URL` after the noun too (`det experiment -m URL list`): move the
    first -m/--master found after the noun to the front, where argparse expects it."""
    args = list(argv)
    for i, a in enumerate(args):
        if a == "--":
            break
        if i > 0 and a in ("-m", "--master") and i + 1 < len(args):
            return [a, args[i + 1], *args[:i], *args[i + 2 :]]
        if i > 0 and a.startswith("--master="):
            return [a, *args[:i], *args[i + 1 :]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(hoist_master(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # usage errors (2) and --help (0)
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    cli = Cli(master=args.master)
    try:
        code = args.func(cli, args)
    except (CliError, DetError) as e:
        if isinstance(e, MasterUnreachable):
            e = auth.unreachable(args.master, e)
        print(f"error: {_message(e, args.master)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `det ... | head`
        sys.stderr.close()
        return 0
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
