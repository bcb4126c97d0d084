"""`python3 -m harness.launch.torch_distributed [--nproc N] [--] CMD ARGS...`

Starts CMD once per slot of this container (`DET_SLOT_IDS`, or `--nproc`) with torch.distributed's
environment: `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`
(and `TORCHELASTIC_USE_AGENT_STORE=True`: this launcher hosts the store, as torchrun does).
In a Core API script, `harness.core.init()` then joins the process group by itself
(`init_process_group("gloo"|"nccl")` with `env://` works too). Across several containers the
launchers meet through the master's rendezvous. A worker that fails stops the others; the exit
code is the first failure's.
"""

from __future__ import annotations

import argparse
import logging
import sys

import harness
from harness.launch._spawn import launch_workers, plan_workers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m harness.launch.torch_distributed", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--nproc", "--nproc_per_node", type=int, default=None)
    parser.add_argument(
        "--trial", default=None, help="module:TrialClass (Determined's PyTorchTrial form)"
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command of each worker")
    args = parser.parse_args(argv)
    if args.trial:
        from harness.launch.__main__ import main as launch_trial

        return launch_trial([args.trial, *(["--nproc", str(args.nproc)] if args.nproc else [])])
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("a command to run is required, e.g. -- python3 train.py")
    logging.basicConfig(level=logging.INFO, format=harness.LOG_FORMAT)
    if cmd[0].endswith(".py"):
        cmd = [sys.executable, *cmd]
    return launch_workers(cmd, plan_workers(args.nproc))


if __name__ == "__main__":
    sys.exit(main())
