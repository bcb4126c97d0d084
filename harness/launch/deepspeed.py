"""`python3 -m harness.launch.deepspeed [--trial module:Class] [--] CMD ARGS...`

Determined 0.38's `determined.launch.deepspeed`, as a thin layer over detlab's torch_distributed
launcher: the same workers, rendezvous and failure handling, plus the environment DeepSpeed's own
launcher gives each worker (`LOCAL_SIZE`, `CROSS_RANK`, `CROSS_SIZE`) and `DS_ACCELERATOR=cpu`
where the container has no GPU. Determined's pdsh/hostfile options are accepted and ignored: the
workers' placement comes from the slots the master allocated.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import harness
from harness.launch._spawn import Workers, launch_workers, plan_workers


def deepspeed_env(workers: Workers, gpus: bool) -> dict[str, str]:
    """The names DeepSpeed's launcher sets beside torchrun's (the same for every local worker)."""
    env = {
        "LOCAL_SIZE": str(workers.nproc),
        "CROSS_RANK": str(workers.container_rank),
        "CROSS_SIZE": str(workers.num_containers),
    }
    if not gpus and "DS_ACCELERATOR" not in os.environ:
        # DeepSpeed picks CUDA unless told otherwise and then fails on a CPU-only container.
        env["DS_ACCELERATOR"] = "cpu"
    return env


def _has_gpus() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m harness.launch.deepspeed", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--nproc", "--nproc_per_node", type=int, default=None)
    parser.add_argument("--trial", default=None, help="module:DeepSpeedTrial (legacy form)")
    # Determined's launcher passes these through to pdsh; here the master placed the workers.
    parser.add_argument("--autotuning", default=None, help=argparse.SUPPRESS)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="the command of each worker")
    args = parser.parse_args(argv)
    if args.autotuning:
        parser.error("--autotuning (DeepSpeed Autotune, dsat) is not supported")
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.trial:
        if cmd:
            parser.error("give either --trial module:Class or a command, not both")
        cmd = [sys.executable, "-m", "harness.launch", "--worker", args.trial]
    if not cmd:
        parser.error("a command to run is required, e.g. -- python3 train.py")
    logging.basicConfig(level=logging.INFO, format=harness.LOG_FORMAT)
    if cmd[0].endswith(".py"):
        cmd = [sys.executable, *cmd]
    workers = plan_workers(args.nproc)
    return launch_workers(cmd, workers, deepspeed_env(workers, _has_gpus()))


if __name__ == "__main__":
    sys.exit(main())
