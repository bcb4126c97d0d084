"""Helpers for the Determined-compatibility tests: configs for the scripts in scripts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster import Cluster
from tests.integration.test_foundation import submit

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TERMINAL = {"COMPLETED", "ERROR", "CANCELED"}


def config(
    cluster: Cluster,
    searcher: dict[str, Any],
    hparams: dict[str, Any],
    entrypoint: str = "python3 core_script.py",
    **extra: Any,
) -> str:
    """A Determined-style experiment config (no detlab-only keys)."""
    cfg: dict[str, Any] = {
        "name": "compat",
        "entrypoint": entrypoint,
        "hyperparameters": hparams,
        "searcher": {"metric": "loss", "smaller_is_better": True, **searcher},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
        **extra,
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def run(cluster: Cluster, text: str, timeout: float = 240, model: Path = SCRIPTS) -> dict:
    exp_id = submit(cluster, text, model)
    return cluster.wait_experiment(exp_id, TERMINAL, timeout=timeout)
