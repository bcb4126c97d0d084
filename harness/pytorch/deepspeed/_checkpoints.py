"""DeepSpeedTrial checkpoints: every worker's engines write through `engine.save_checkpoint`
into one sharded checkpoint (`store_path(shard=True)`; with ZeRO each rank writes its own
optimizer shard), and the chief adds the loop's state (`STATE_FILE`: data position, every
worker's RNG states and unreported metrics, the last validation)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from harness.pytorch._checkpoints import (
    checkpoint_metadata,
    gather_worker_states,
    loop_state,
    restore_progress,
    stored,
    write_state,
)

if TYPE_CHECKING:
    from harness.pytorch.deepspeed._controller import DeepSpeedController

STATE_FILE = "det_state.pt"
FORMAT = "harness.pytorch.deepspeed/1"


def store(ctrl: DeepSpeedController) -> None:
    if ctrl.last_checkpoint_at == ctrl.batches:
        return
    per_rank = gather_worker_states(ctrl)
    metadata = checkpoint_metadata(ctrl, FORMAT)
    with ctrl.core.checkpoint.store_path(metadata, shard=True) as (path, uuid):
        ctrl.trial.save(ctrl.context, Path(path))
        if ctrl.is_chief:
            assert per_rank is not None
            state = loop_state(ctrl, per_rank, FORMAT)
            write_state(ctrl, Path(path), state, STATE_FILE, "DeepSpeedTrial")
    stored(ctrl, uuid)


def restore(ctrl: DeepSpeedController, uuid: str) -> None:
    with ctrl.core.checkpoint.restore_path(uuid) as path:
        state_file = Path(path) / STATE_FILE
        if not state_file.exists():
            raise RuntimeError(f"checkpoint {uuid} is not a DeepSpeedTrial checkpoint")
        state = torch.load(state_file, map_location="cpu", weights_only=False)
        ctrl.trial.load(ctrl.context, Path(path))
    if state.get("format") != FORMAT:
        raise RuntimeError(f"checkpoint {uuid} is not a {FORMAT} checkpoint")
    ctrl._call("on_checkpoint_load_start", state)
    for cb, sd in zip(ctrl.callbacks, state.get("callbacks") or [], strict=False):
        cb.load_state_dict(sd)
    restore_progress(ctrl, state, uuid)
