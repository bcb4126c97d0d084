"""Where a trial runs: `get_cluster_info()` reads the `DET_*` environment the master composes."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrialInfo:
    """The trial this process trains (Determined's `det.TrialInfo`)."""

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    request_id: str | None = None

    @property
    def _config(self) -> dict[str, Any]:  # Determined spells it this way in places
        return self.config


@dataclass(frozen=True)
class ClusterInfo:
    """Everything a process inside a trial knows about the cluster (Determined's names)."""

    master_url: str
    session_token: str
    allocation_id: str
    trial: TrialInfo
    latest_checkpoint: str | None = None
    container_addrs: list[str] = field(default_factory=list)
    container_rank: int = 0
    slot_ids: list[int] = field(default_factory=list)
    agent_id: str | None = None

    @property
    def task_id(self) -> str:
        return str(self.trial.trial_id)

    @property
    def _trial_info(self) -> TrialInfo:  # Determined's private name, used by its examples
        return self.trial

    @property
    def task_type(self) -> str:
        return "TRIAL"

    @property
    def user_data(self) -> dict[str, Any]:
        return {}


def _json(env: Mapping[str, str], name: str, default: Any) -> Any:
    raw = env.get(name, "")
    if not raw.strip():
        return default
    try:
        return json.loads(raw)
    except ValueError as e:
        raise RuntimeError(f"{name} is not valid JSON: {e}") from e


def _int(env: Mapping[str, str], name: str, default: int = 0) -> int:
    raw = env.get(name, "").strip()
    return int(raw) if raw else default


def get_cluster_info(env: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The `ClusterInfo` of this trial, or None when not running on a detlab cluster.

    Read on each call (cheap) so tests and launchers that change the environment see it.
    """
    env = os.environ if env is None else env
    if not env.get("DET_TRIAL_ID") or not env.get("DET_MASTER"):
        return None
    hparams = _json(env, "DET_HPARAMS", {})
    config = _json(env, "DET_EXPERIMENT_CONFIG", {})
    trial = TrialInfo(
        trial_id=_int(env, "DET_TRIAL_ID"),
        experiment_id=_int(env, "DET_EXPERIMENT_ID"),
        trial_seed=_int(env, "DET_TRIAL_SEED"),
        hparams=hparams if isinstance(hparams, dict) else {},
        config=config if isinstance(config, dict) else {},
        request_id=env.get("DET_TRIAL_REQUEST_ID") or None,
    )
    addrs = _json(env, "DET_CONTAINER_ADDRS", [])
    slots = _json(env, "DET_SLOT_IDS", [])
    return ClusterInfo(
        master_url=env["DET_MASTER"],
        session_token=env.get("DET_SESSION_TOKEN", ""),
        allocation_id=env.get("DET_ALLOCATION_ID", ""),
        trial=trial,
        latest_checkpoint=env.get("DET_LATEST_CHECKPOINT") or None,
        container_addrs=[str(a) for a in addrs] if isinstance(addrs, list) else [],
        container_rank=_int(env, "DET_CONTAINER_RANK"),
        slot_ids=[int(s) for s in slots] if isinstance(slots, list) else [],
        agent_id=env.get("DET_AGENT_ID") or None,
    )
