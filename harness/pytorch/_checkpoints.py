"""What a PyTorchTrial checkpoint holds (`STATE_FILE`: weights, optimizers, LR schedulers,
every worker's RNG states and unreported metrics, the data position) and how the controller
stores and restores it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.pytorch._context import unwrap
from harness.pytorch._metric_lists import merge_lists, scalar_lists
from harness.pytorch._rng import rng_state, set_rng_state

if TYPE_CHECKING:
    from harness.pytorch._controller import _Controller

logger = logging.getLogger("harness.pytorch")

STATE_FILE = "state.pt"
FORMAT = "harness.pytorch/1"


def store(ctrl: _Controller) -> None:
    """A checkpoint at the current batch (once per batch count); every worker's RNG states and
    unreported metrics go to the chief, which alone stores (Determined's rule, shard=False)."""
    if ctrl.last_checkpoint_at == ctrl.batches:
        return
    per_rank = gather_worker_states(ctrl)
    metadata = checkpoint_metadata(ctrl, FORMAT)
    if not ctrl.is_chief:  # shard=False: the chief alone stores (Determined's rule)
        ctrl.last_checkpoint_at = ctrl.batches
        return
    with ctrl.core.checkpoint.store_path(metadata) as (path, uuid):
        assert per_rank is not None
        state = {
            **loop_state(ctrl, per_rank, FORMAT),
            "models": [unwrap(m).state_dict() for m in ctrl.context.models],
            "optimizers": [o.state_dict() for o in ctrl.context.optimizers],
            "lr_schedulers": [s.state_dict() for s in ctrl.context.lr_schedulers],
            "scalers": [s.state_dict() for s in ctrl.context.scalers],
        }
        if hasattr(ctrl.trial, "state_dict"):
            state["trial"] = ctrl.trial.state_dict()
        write_state(ctrl, Path(path), state, STATE_FILE, "PyTorchTrial")
    stored(ctrl, uuid)


def checkpoint_metadata(ctrl: _Controller, fmt: str) -> dict[str, Any]:
    return {
        "steps_completed": ctrl.batches,
        "format": fmt,
        "framework": f"torch-{torch.__version__}",
        "batches_trained": ctrl.batches,
        "epoch": ctrl.batches // ctrl.epoch_len,
        "trial_id": ctrl.context.get_trial_id(),
    }


def loop_state(ctrl: _Controller, per_rank: list[dict[str, Any]], fmt: str) -> dict[str, Any]:
    """The training loop's own part of a checkpoint (the chief's): the data position, every
    worker's RNG states and unreported metrics, the last validation, the callbacks' states."""
    state: dict[str, Any] = {
        "format": fmt,
        "batches_trained": ctrl.batches,
        "epoch_len": ctrl.epoch_len,
        "rng": [p["rng"] for p in per_rank],
        "pending_metrics": [p["pending"] for p in per_rank],
        "last_validation": ctrl.last_validation,
        "world_size": ctrl.dist.size,
    }
    if ctrl.callbacks:
        state["callbacks"] = [cb.state_dict() for cb in ctrl.callbacks]
    return state


def write_state(
    ctrl: _Controller, path: Path, state: dict[str, Any], state_file: str, trial_type: str
) -> None:
    """The chief's state file, and what load_trial_from_checkpoint_path needs to build the
    trial again (load_data.json)."""
    ctrl._call("on_checkpoint_save_start", state)
    torch.save(state, path / state_file)
    trial_cls = type(ctrl.trial)
    load_data = {
        "trial_type": trial_type,
        "batches_trained": ctrl.batches,
        "trial_cls_spec": f"{trial_cls.__module__}:{trial_cls.__qualname__}",
        "hparams": ctrl.context.get_hparams(),
        "experiment_config": ctrl.context.get_experiment_config(),
    }
    (path / "load_data.json").write_text(json.dumps(load_data, default=str))


def stored(ctrl: _Controller, uuid: str) -> None:
    ctrl.last_checkpoint_at = ctrl.batches
    if ctrl.is_chief:
        ctrl._call("on_checkpoint_upload_end", uuid)
        ctrl.result.checkpoints.append(uuid)
        logger.info("checkpoint %s at batch %d", uuid, ctrl.batches)


def gather_worker_states(ctrl: _Controller) -> list[dict[str, Any]] | None:
    """Every worker's RNG states and unreported metrics, on the chief (None elsewhere)."""
    own = {
        "rng": rng_state(),
        "pending": merge_lists(ctrl.carried, scalar_lists(ctrl.pending)),
    }
    ctrl.pending.clear()
    ctrl.carried = own["pending"]
    return ctrl.dist.gather(own) if ctrl.dist.size > 1 else [own]


def restore(ctrl: _Controller, uuid: str) -> None:
    """The trial, its models, optimizers, schedulers, RNG states and unreported metrics as
    checkpoint `uuid` left them."""
    with ctrl.core.checkpoint.restore_path(uuid) as path:
        state = torch.load(
            Path(path) / STATE_FILE, map_location=ctrl.context.device, weights_only=False
        )
    if state.get("format") != FORMAT:
        raise RuntimeError(f"checkpoint {uuid} is not a {FORMAT} checkpoint")
    ctrl._call("on_checkpoint_load_start", state)
    for cb, sd in zip(ctrl.callbacks, state.get("callbacks") or [], strict=False):
        cb.load_state_dict(sd)
    ctx = ctrl.context
    for what, have, saved in (
        ("models", ctx.models, state["models"]),
        ("optimizers", ctx.optimizers, state["optimizers"]),
        ("lr_schedulers", ctx.lr_schedulers, state["lr_schedulers"]),
    ):
        if len(have) != len(saved):
            raise RuntimeError(
                f"checkpoint {uuid} has {len(saved)} {what}, the trial wrapped {len(have)}"
            )
    for m, sd in zip(ctx.models, state["models"], strict=True):
        unwrap(m).load_state_dict(sd)
    for o, sd in zip(ctx.optimizers, state["optimizers"], strict=True):
        o.load_state_dict(sd)
    for s, sd in zip(ctx.lr_schedulers, state["lr_schedulers"], strict=True):
        s.load_state_dict(sd)
    for sc, sd in zip(ctx.scalers, state.get("scalers") or [], strict=False):
        sc.load_state_dict(sd)
    if "trial" in state and hasattr(ctrl.trial, "load_state_dict"):
        ctrl.trial.load_state_dict(state["trial"])
    restore_progress(ctrl, state, uuid)


def restore_progress(ctrl: _Controller, state: dict[str, Any], uuid: str) -> None:
    """The data position, this worker's RNG states and unreported metrics, the last validation."""
    ctrl.batches = int(state["batches_trained"])
    if state.get("epoch_len") != ctrl.epoch_len:
        logger.warning(
            "the training data has %s batches per epoch, the checkpoint's had %s: "
            "the data position is not exact",
            ctrl.epoch_len,
            state.get("epoch_len"),
        )
    rank = ctrl.dist.rank
    same_size = state.get("world_size") == ctrl.dist.size
    rngs, pendings = state["rng"], state["pending_metrics"]
    if same_size:
        set_rng_state(rngs[rank])
        ctrl.carried = pendings[rank]
    else:
        set_rng_state(rngs[0])
        merged: dict[str, list[float]] = {}
        for p in pendings:
            merged = merge_lists(merged, p)
        ctrl.carried = merged if rank == 0 else {}
    lv = state.get("last_validation")
    ctrl.last_validation = (int(lv[0]), dict(lv[1])) if lv else None
    ctrl.last_checkpoint_at = ctrl.batches
    logger.info("resumed from checkpoint %s at batch %d", uuid, ctrl.batches)
