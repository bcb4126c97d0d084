"""The master's own configuration: `master.yaml`, environment variables and command-line flags.

Precedence: flag > environment > file > default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from detlab.constants import MAX_MODEL_DEF_BYTES
from master.login_throttle import ThrottleLimits, parse_limits


class MasterConfigError(ValueError):
    pass


def default_data_dir() -> Path:
    return Path(os.environ.get("DET_DATA_DIR") or Path.home() / ".local/share/detlab")


@dataclass
class ResourcePoolConfig:
    name: str = "default"
    description: str = ""
    scheduler: dict[str, Any] = field(default_factory=lambda: {"type": "priority"})
    # Elastic agents (master/provisioner): a ProviderConfig, or None for a static pool.
    provider: Any = None


@dataclass
class MasterConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = field(default_factory=default_data_dir)
    db: str | None = None  # None -> SQLite file in data_dir
    # An agent that has not polled for this long is LOST and its trials restart elsewhere.
    agent_timeout: float = 30.0
    # The APScheduler tick for the scheduling pass (it also runs on every change).
    scheduling_interval: float = 2.0
    # A trial that ignores the preemption signal this long is killed.
    preemption_timeout: float = 60.0
    max_model_def_bytes: int = MAX_MODEL_DEF_BYTES
    server_threads: int = 128
    checkpoint_storage: dict[str, Any] | None = None
    resource_pools: list[ResourcePoolConfig] = field(default_factory=lambda: [ResourcePoolConfig()])
    token_ttl_hours: float = 24 * 7
    # How often the checkpoint GC job applies every experiment's policy and deletes due files.
    checkpoint_gc_interval: float = 5.0
    # The master cannot reach checkpoint storage: agents delete checkpoints for it.
    checkpoint_gc_via_agents: bool = False
    # Failed logins per username and per client address before a lockout (master/login_throttle).
    login_throttle: ThrottleLimits = field(default_factory=ThrottleLimits)
    # The most trials one search may create (a grid's size, max_trials): checked at submit.
    max_search_trials: int = 100_000
    # Checkpoint data nobody registered (a trial or an upload killed before registering: shared_fs
    # directories, object-store objects, unfinished S3 multipart uploads) is looked for every
    # `checkpoint_orphan_interval` seconds and deleted once idle for `checkpoint_orphan_grace`
    # (longer than a checkpoint takes to write and a trial retries its registration,
    # DET_MASTER_OUTAGE_S); a grace of 0 turns the sweep off.
    checkpoint_orphan_interval: float = 3600.0
    checkpoint_orphan_grace: float = 86400.0

    @property
    def db_url(self) -> str:
        from master.db import normalize_db_url

        if self.db:
            return normalize_db_url(self.db)
        return f"sqlite:///{(Path(self.data_dir) / 'detlab.sqlite').resolve()}"

    def default_checkpoint_storage(self) -> dict[str, Any]:
        if self.checkpoint_storage:
            return dict(self.checkpoint_storage)
        return {
            "type": "shared_fs",
            "host_path": str(Path(self.data_dir).resolve() / "checkpoints"),
        }

    def pool_names(self) -> list[str]:
        return [p.name for p in self.resource_pools]


_SIMPLE = {f.name for f in fields(MasterConfig)} - {"resource_pools"}


def load_master_config(path: str | Path | None, **overrides: Any) -> MasterConfig:
    """Read `master.yaml` (optional), then DET_* environment variables, then `overrides`."""
    raw: dict[str, Any] = {}
    if path:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise MasterConfigError(f"cannot read master config {path}: {e}") from e
        if not isinstance(raw, dict):
            raise MasterConfigError(f"{path}: expected a mapping at the top level")
    cfg = MasterConfig()
    for key, value in raw.items():
        if key == "resource_pools":
            cfg.resource_pools = _pools(value)
        elif key in _SIMPLE:
            setattr(cfg, key, value)
        else:
            raise MasterConfigError(f"master config: unknown key {key!r}")
    env_map = {"DET_DB_URL": "db", "DET_DATA_DIR": "data_dir"}
    for env, key in env_map.items():
        if os.environ.get(env):
            setattr(cfg, key, os.environ[env])
    for key, value in overrides.items():
        if value is not None:
            setattr(cfg, key, value)
    cfg.data_dir = Path(cfg.data_dir).expanduser()
    _check_values(cfg)
    return cfg


def _check_values(cfg: MasterConfig) -> None:
    """The values (from any source) the master can honour; MasterConfigError names the key."""
    try:
        cfg.login_throttle = parse_limits(cfg.login_throttle)
    except ValueError as e:
        raise MasterConfigError(f"master config: {e}") from e
    cap = cfg.max_search_trials
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= 2**31 - 1:
        raise MasterConfigError(
            f"master config: max_search_trials must be an integer from 1 to {2**31 - 1}, "
            f"got {cap!r}"
        )
    for key in (
        "agent_timeout",
        "scheduling_interval",
        "preemption_timeout",
        "checkpoint_gc_interval",
        "checkpoint_orphan_interval",
    ):
        val = getattr(cfg, key)
        if not isinstance(val, int | float) or isinstance(val, bool) or val <= 0:
            raise MasterConfigError(f"master config: {key} must be a positive number, got {val!r}")
    grace = cfg.checkpoint_orphan_grace
    if not isinstance(grace, int | float) or isinstance(grace, bool) or not grace >= 0:
        raise MasterConfigError(
            f"master config: checkpoint_orphan_grace must be a number >= 0, got {grace!r}"
        )


def _pools(value: Any) -> list[ResourcePoolConfig]:
    if not isinstance(value, list) or not value:
        raise MasterConfigError("master config: resource_pools must be a non-empty list")
    pools = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and "pool_name" in item and "name" not in item:
            item = {("name" if k == "pool_name" else k): v for k, v in item.items()}  # Determined
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise MasterConfigError(f"master config: resource_pools[{i}] needs a name")
        unknown = set(item) - {"name", "description", "scheduler", "provider"}
        if unknown:
            raise MasterConfigError(
                f"master config: resource_pools[{i}]: unknown key {sorted(unknown)[0]!r}"
            )
        pools.append(
            ResourcePoolConfig(
                name=item["name"],
                description=item.get("description", ""),
                scheduler=item.get("scheduler") or {"type": "priority"},
                provider=_provider(item.get("provider"), f"resource_pools[{i}].provider"),
            )
        )
    return pools


def _provider(raw: Any, path: str) -> Any:
    if raw is None:
        return None
    from master.provisioner.config import ProviderConfigError, parse_provider

    try:
        return parse_provider(raw, path)
    except ProviderConfigError as e:
        raise MasterConfigError(f"master config: {e}") from e
