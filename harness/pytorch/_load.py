"""`pytorch.load_trial_from_checkpoint_path`: a PyTorchTrial rebuilt from one of its
checkpoints, its models' weights loaded, for inference outside the cluster."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import torch

from harness.core import CheckpointContext, Context, DummyDistributedContext
from harness.core._context import _storage_factory
from harness.core._preempt import PreemptContext, PreemptMode
from harness.core._searcher import SearcherContext
from harness.core._train import TrainContext
from harness.pytorch._checkpoints import STATE_FILE
from harness.pytorch._context import PyTorchTrialContext, unwrap
from harness.pytorch._controller import build_trial
from harness.pytorch._trial import PyTorchTrial


def _offline_core() -> Context:
    """A Core context that talks to no master (metrics to the log, one process)."""
    dist = DummyDistributedContext()
    train = TrainContext(None, dist)
    return Context(
        checkpoint=CheckpointContext(_storage_factory(None, None), dist),
        distributed=dist,
        preempt=PreemptContext(None, None, dist, PreemptMode.WorkersAskChief),
        train=train,
        searcher=SearcherContext(None, None, train, dist),
    )


def _trial_class(load_data: dict[str, Any], path: Path) -> type[PyTorchTrial]:
    spec = load_data.get("trial_cls_spec")
    if not spec or ":" not in str(spec):
        raise ValueError(f"{path} does not name its trial class; pass trial_class=")
    module, _, name = str(spec).partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"cannot import {module!r}, the module of the trial class of {path} ({e}); put "
            "the model definition on sys.path or pass trial_class="
        ) from e
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def load_trial_from_checkpoint_path(
    path: str | Path,
    trial_class: type[PyTorchTrial] | None = None,
    trial_kwargs: dict[str, Any] | None = None,
    torch_load_kwargs: dict[str, Any] | None = None,
) -> PyTorchTrial:
    """The trial of the checkpoint at `path` (a downloaded checkpoint directory): built with
    the checkpoint's hyperparameters and config, its models' weights loaded (on the CPU
    unless `torch_load_kwargs` says otherwise)."""
    root = Path(path)
    state_file = root / STATE_FILE
    if not state_file.is_file():
        raise FileNotFoundError(f"{root} is not a PyTorchTrial checkpoint (no {STATE_FILE})")
    try:
        load_data = json.loads((root / "load_data.json").read_text())
    except (OSError, ValueError):
        load_data = {}
    cls = trial_class or _trial_class(load_data, root)
    context = PyTorchTrialContext(
        _offline_core(),
        hparams=dict(load_data.get("hparams") or {}),
        config=dict(load_data.get("experiment_config") or {}),
        trial_id=None,
        experiment_id=None,
        trial_seed=0,
        device=torch.device("cpu"),
    )
    trial = cls(context, **trial_kwargs) if trial_kwargs else build_trial(cls, context)
    load_kwargs = {"map_location": "cpu", "weights_only": False, **(torch_load_kwargs or {})}
    state = torch.load(state_file, **load_kwargs)
    models = state.get("models") or []
    if len(models) != len(context.models):
        raise ValueError(
            f"{root} holds {len(models)} model(s) but the trial wrapped {len(context.models)}"
        )
    for model, sd in zip(context.models, models, strict=True):
        unwrap(model).load_state_dict(sd)
    if "trial" in state and hasattr(trial, "load_state_dict"):
        trial.load_state_dict(state["trial"])
    return trial
