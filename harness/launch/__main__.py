"""`python3 -m harness.launch module:TrialClass`: run a PyTorchTrial on this container's slots.

One slot (and one container): the trial runs in this process. Several slots or containers:
one torch.distributed worker per slot (gloo on CPU, nccl on GPUs); a worker that dies stops the
others and the launcher exits with its code (the master then restarts the trial per
`max_restarts`). `--nproc N` overrides the slot count (off-cluster testing).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import re
import sys
from typing import NoReturn

import harness

ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
logger = logging.getLogger("harness.launch")


def load_trial_class(entrypoint: str) -> type:
    """Import `module:Class` (from the model directory, the working directory)."""
    if not ENTRYPOINT.match(entrypoint):
        raise ValueError(f"expected an entrypoint like 'model_def:MyTrial', not {entrypoint!r}")
    module_name, _, cls_name = entrypoint.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    try:
        cls = getattr(module, cls_name)
    except AttributeError:
        raise AttributeError(
            f"module {module_name!r} ({getattr(module, '__file__', '?')}) has no {cls_name!r}"
        ) from None
    from harness.pytorch import PyTorchTrial

    bases: tuple[type, ...] = (PyTorchTrial,)
    ds = sys.modules.get("harness.pytorch.deepspeed")  # imported by a DeepSpeedTrial's module
    if ds is not None:
        bases += (ds.DeepSpeedTrial,)
    if not (isinstance(cls, type) and issubclass(cls, bases)):
        raise TypeError(
            f"{entrypoint} is not a subclass of harness.pytorch.PyTorchTrial "
            "(or harness.pytorch.deepspeed.DeepSpeedTrial)"
        )
    return cls


def run_in_process(entrypoint: str) -> int:
    """Import and run the trial here; user errors print the user's traceback and exit 1."""
    from harness.core import _distributed

    _distributed.LEAVE_GROUP_TO_EXIT = True
    code = _run_trial(entrypoint)
    if not _distributed_initialized():
        return code
    if code != 0:
        _exit_now(code)
    # A distributed worker that succeeded leaves without destroying its process group and
    # without the interpreter's finalization: destroying a gloo group while a peer tears its
    # own down, or a library thread (DeepSpeed's, gloo's) met at finalization, aborts the
    # process ("terminate called without an active exception", SIGABRT: exit 134 after a
    # trial that completed; seen twice in -n 2 suite runs). Its peers already met it at the
    # final barrier; atexit handlers still run first.
    atexit._run_exitfuncs()
    _exit_now(code)


def _run_trial(entrypoint: str) -> int:
    from harness.launch._errors import user_traceback

    try:
        cls = load_trial_class(entrypoint)
        from harness.pytorch._run import run_trial

        run_trial(cls)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the user's error: show it as theirs
        sys.stderr.write(user_traceback(e))
        sys.stderr.flush()
        logger.error("the trial failed: %s: %s", type(e).__name__, e)
        return 1
    return 0


def _exit_now(code: int) -> NoReturn:
    """Leave a distributed worker without tearing its process group down.

    A failed worker's peers are blocked in a collective that will never complete; a worker that
    succeeded has met its peers at the final barrier. Either way, destroying the gloo/nccl group,
    or letting interpreter shutdown destroy it, can abort inside the library's threads
    ("terminate called without an active exception", SIGABRT), turning exit code 0 or 1 into
    134 now and then (seen under load in CI). The process's exit closes its sockets, which is
    how the peers learn of a failure anyway.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _distributed_initialized() -> bool:
    if "torch.distributed" not in sys.modules:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.launch", description=__doc__)
    parser.add_argument("entrypoint", help="module:TrialClass")
    parser.add_argument("--nproc", type=int, default=None, help="workers (default: slots)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=harness.LOG_FORMAT)
    if args.worker:
        return run_in_process(args.entrypoint)

    from harness.launch._spawn import launch_workers, local_slots, plan_workers

    nproc = args.nproc or local_slots()
    containers = int(os.environ.get("DET_NUM_CONTAINERS") or 1)
    if nproc == 1 and containers == 1:
        return run_in_process(args.entrypoint)
    workers = plan_workers(nproc)
    logger.info(
        "launching %d worker(s) for %s (ranks %d..%d of %d)",
        nproc,
        args.entrypoint,
        workers.base_rank,
        workers.base_rank + nproc - 1,
        workers.world_size,
    )
    cmd = [sys.executable, "-m", "harness.launch", "--worker", args.entrypoint]
    return launch_workers(cmd, workers)


if __name__ == "__main__":
    sys.exit(main())
