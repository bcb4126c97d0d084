"""`run_trial`: where a PyTorchTrial starts, on a cluster or locally (the Core API context and
the controller built from the environment or the arguments)."""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any

import harness
from harness.core import DistributedContext
from harness.pytorch._controller import TrialResult, _Controller
from harness.pytorch._trial import PyTorchTrial


def run_trial(
    trial_class: type[PyTorchTrial] | type[Any],
    *,
    hparams: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    max_length: int | None = None,
    trial_seed: int | None = None,
    latest_checkpoint: str | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    distributed: DistributedContext | None = None,
) -> TrialResult | None:
    """Train `trial_class` as the searcher asks: on a cluster, or locally to debug and test.
    None when the trial raised InvalidHP (reported to the master as an early exit).

    On a cluster everything comes from the `DET_*` environment (the arguments are ignored).
    Off-cluster: `hparams`, `config` (an experiment config as a dict), one searcher operation of
    `max_length` (in the unit of `config['searcher']['max_length']`; default: its value, else
    `DET_MAX_LENGTH`; `hparams` and `config` default to `DET_HPARAMS` and `DET_EXPERIMENT_CONFIG`
    so `python3 -m harness.launch --nproc 2 model_def:MyTrial` works), checkpoints under
    `checkpoint_dir` (default `./checkpoints`), resuming from `latest_checkpoint` (a uuid there).
    """
    info = harness.get_cluster_info()
    dist = distributed
    if dist is None:
        from harness.core._distributed import from_env

        dist = from_env()
    seed: int | None
    trial_id: int | None
    exp_id: int | None
    if info is not None:
        hp, cfg = dict(info.trial.hparams), dict(info.trial.config)
        seed, latest = info.trial.trial_seed, info.latest_checkpoint
        trial_id, exp_id = info.trial.trial_id, info.trial.experiment_id
        storage = None
    else:
        if hparams is None:
            hparams = json.loads(os.environ.get("DET_HPARAMS") or "{}")
        if config is None:
            config = json.loads(os.environ.get("DET_EXPERIMENT_CONFIG") or "{}")
        hp, cfg = dict(hparams or {}), dict(config or {})
        seed = trial_seed
        if seed is None:
            seed = int((cfg.get("reproducibility") or {}).get("experiment_seed") or 0)
        latest = latest_checkpoint
        trial_id = exp_id = None
        storage = checkpoint_dir
    # MANUAL: the training loop writes and uploads the TensorBoard events itself.
    core = harness.core.init(
        distributed=dist,
        checkpoint_storage=storage,
        tensorboard_mode=harness.core.TensorboardMode.MANUAL,
    )
    with core:
        if info is None:
            length = max_length
            if length is None:
                ml = (cfg.get("searcher") or {}).get("max_length")
                length = (
                    next(iter(ml.values()))
                    if isinstance(ml, dict) and ml
                    else int(os.environ.get("DET_MAX_LENGTH", "1"))
                )
            core.searcher._local_max_length = int(length)
        # A DeepSpeedTrial brings its own loop (harness.pytorch.deepspeed, imported only then).
        make = getattr(trial_class, "_make_controller", None)
        controller = (make or partial(_Controller, trial_class))(
            core,
            hparams=hp,
            config=cfg,
            trial_seed=seed,
            trial_id=trial_id,
            experiment_id=exp_id,
            latest_checkpoint=latest,
        )
        return controller.run()
    return None  # InvalidHP: core's exit reported it as an early exit
