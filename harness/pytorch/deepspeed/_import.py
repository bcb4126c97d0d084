"""Importing DeepSpeed: a clear error without the extra, and its CPU accelerator without CUDA."""

from __future__ import annotations

import os
from types import ModuleType


def import_deepspeed() -> ModuleType:
    import torch

    if not torch.cuda.is_available():
        # DeepSpeed assumes CUDA unless told otherwise and fails on a CPU-only container.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
    except ImportError as e:
        raise ImportError(
            "DeepSpeedTrial needs DeepSpeed: pip install 'detlab[deepspeed]' "
            f"(see docs/determined-compat.md): {e}",
            name="deepspeed",
        ) from e
    return deepspeed


def ensure_process_group(backend: str) -> None:
    """A one-worker process group when none exists: deepspeed.initialize needs one, and without
    the launcher's environment it would look for MPI. Several workers already have theirs
    (harness.core.init joins the launcher's group)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    # DeepSpeed's engine asserts that a launcher set these.
    for name in ("RANK", "LOCAL_RANK"):
        os.environ.setdefault(name, "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    # An in-process store: one worker needs no port.
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
