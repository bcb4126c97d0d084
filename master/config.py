"""The master's own configuration: `master.yaml`, environment variables and command-line flags.

Precedence: flag > environment > file > default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from detlab.constants import MAX_MODEL_DEF_BYTES
from detlab.protocol import MAX_UNIX_ID
from master.login_throttle import ThrottleLimits, parse_limits
from master.rm.config import (
    DEFAULT_RM,
    ResourceManagerConfig,
    RMConfigError,
    check_unique,
    implied_pools,
    parse_additional,
    parse_rm,
)


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
    # The resource manager whose backend runs this pool's allocations (master/rm).
    resource_manager: str = DEFAULT_RM
    # Determined 0.38's per-pool task defaults; a kubernetes RM uses cpu_pod_spec/gpu_pod_spec
    # (master/rm/k8s/podmerge.py).
    task_container_defaults: dict[str, Any] | None = None


@dataclass
class MasterConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # The proxy to notebooks, shells and TensorBoards (master/proxy: aiohttp beside waitress)
    # listens on `host` at this port; 0 picks a free one (`GET /api/v1/master` tells clients).
    proxy_port: int = 0
    # How often idle notebooks are looked for (services/task/idle.py; `idle_timeout` in their
    # config).
    idle_check_interval: float = 5.0
    # Determined's master keys: the idle timeout (seconds) of a notebook / TensorBoard whose
    # config sets no `idle_timeout` (services/task/notebooks.py: cluster_idle_timeout); None:
    # never reaped. Determined's defaults: notebooks never, TensorBoards after 5 minutes.
    notebook_timeout: float | None = None
    tensorboard_timeout: float | None = 300.0
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
    # `resource_manager:` + `additional_resource_managers:` (Determined 0.38's form; master/rm).
    resource_managers: list[ResourceManagerConfig] = field(
        default_factory=lambda: [ResourceManagerConfig()]
    )
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
    # A LOST agent drops out of the default agent views (`det agent list`, det-tui's header, the
    # web cluster page) this long after it was last seen; `--all` / `?all=true` still show it.
    # 0 keeps LOST agents listed forever.
    lost_agent_retention: float = 3600.0
    # Determined's `agent_user_group`: the Unix user ({agent_uid, agent_gid, agent_user,
    # agent_group}) that trials of users not linked with `det user link-with-agent-user` run as.
    # None (the default): agents derive a separate identity per detlab user (docs/security.md).
    agent_user_group: dict[str, Any] | None = None

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


_RM_KEYS = {"resource_pools", "resource_manager", "additional_resource_managers"}
_SIMPLE = {f.name for f in fields(MasterConfig)} - _RM_KEYS - {"resource_managers"}


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
    _resource_managers(cfg, {k: v for k, v in raw.items() if k in _RM_KEYS})
    for key, value in raw.items():
        if key in _RM_KEYS:
            continue
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


# What useradd(8) accepts (and Determined's examples use).
_UNIX_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")
AGENT_USER_GROUP_FIELDS = ("agent_uid", "agent_gid", "agent_user", "agent_group")


class AgentUserGroupError(ValueError):
    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def parse_agent_user_group(body: Any, where: str = "") -> dict[str, Any]:
    """{agent_uid, agent_gid, agent_user, agent_group}, each checked (the error names the field).

    Determined's camelCase names (agentUid, ...) are accepted too."""
    if not isinstance(body, dict):
        raise AgentUserGroupError(f"{where or 'agent_user_group'} must be a mapping", where)
    out: dict[str, Any] = {}
    for name in AGENT_USER_GROUP_FIELDS:
        camel = "agent" + name[6].upper() + name[7:]
        value = body.get(name, body.get(camel))
        path = f"{where}.{name}" if where else name
        if name.endswith(("uid", "gid")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise AgentUserGroupError(f"{name} is required: an integer", path)
            if not 0 <= value <= MAX_UNIX_ID:
                raise AgentUserGroupError(f"{name} must be from 0 to {MAX_UNIX_ID}", path)
        elif not isinstance(value, str) or not _UNIX_NAME.match(value):
            raise AgentUserGroupError(
                f"{name} is required: a Unix name (letters, digits, '_', '.', '-'; at most 32)",
                path,
            )
        out[name] = value
    return out


def _check_values(cfg: MasterConfig) -> None:
    """The values (from any source) the master can honour; MasterConfigError names the key."""
    try:
        cfg.login_throttle = parse_limits(cfg.login_throttle)
    except ValueError as e:
        raise MasterConfigError(f"master config: {e}") from e
    if cfg.agent_user_group is not None:
        try:
            cfg.agent_user_group = parse_agent_user_group(cfg.agent_user_group)
        except AgentUserGroupError as e:
            raise MasterConfigError(f"master config: agent_user_group: {e}") from e
    for key in ("idle_check_interval",):
        value = getattr(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise MasterConfigError(f"master config: {key} must be a positive number of seconds")
    for key in ("notebook_timeout", "tensorboard_timeout"):
        nt = getattr(cfg, key)
        if nt is not None and (
            isinstance(nt, bool) or not isinstance(nt, int | float) or not 0 < nt <= 365 * 86400
        ):
            raise MasterConfigError(
                f"master config: {key} must be a number of seconds, more than 0 and at "
                f"most 365 days (or null: never), got {nt!r}"
            )
    port = cfg.proxy_port
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise MasterConfigError("master config: proxy_port must be a TCP port (0: any free one)")
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
    for key in ("checkpoint_orphan_grace", "lost_agent_retention"):
        val = getattr(cfg, key)
        if not isinstance(val, int | float) or isinstance(val, bool) or not val >= 0:
            raise MasterConfigError(f"master config: {key} must be a number >= 0, got {val!r}")


def _resource_managers(cfg: MasterConfig, raw: dict[str, Any]) -> None:
    """The default RM owns the top-level `resource_pools:`; each additional RM its own."""
    try:
        default = parse_rm(
            raw.get("resource_manager", {"type": "agent"}),
            "resource_manager",
            default_name=DEFAULT_RM,
        )
        extra = parse_additional(raw.get("additional_resource_managers", []))
    except RMConfigError as e:
        raise MasterConfigError(f"master config: {e}") from e
    try:
        pools = (
            _pools(raw["resource_pools"], rm=default.name)
            if "resource_pools" in raw
            else [
                ResourcePoolConfig(name=n, resource_manager=default.name)
                for n in implied_pools(default)
            ]
        )
    except RMConfigError as e:
        raise MasterConfigError(f"master config: {e}") from e
    for i, (rm, raw_pools) in enumerate(extra):
        pools += _pools(
            raw_pools, rm=rm.name, path=f"additional_resource_managers[{i}].resource_pools"
        )
    rms = [default, *(rm for rm, _ in extra)]
    if any(rm.type == "kubernetes" for rm in rms) and not _importable("kubernetes"):
        # An extra (the quick start has no need): say so now, not at the first scheduling pass.
        raise MasterConfigError(
            "master config: a kubernetes resource manager needs the kubernetes client, which is "
            "not installed: pip install 'detlab[k8s]'"
        )
    pools_of = {rm.name: [p.name for p in pools if p.resource_manager == rm.name] for rm in rms}
    try:
        check_unique(rms, pools_of)
    except RMConfigError as e:
        raise MasterConfigError(f"master config: {e}") from e
    cfg.resource_managers, cfg.resource_pools = rms, pools


def _pools(
    value: Any, rm: str = DEFAULT_RM, path: str = "resource_pools"
) -> list[ResourcePoolConfig]:
    if not isinstance(value, list) or not value:
        raise MasterConfigError(f"master config: {path} must be a non-empty list")
    pools = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and "pool_name" in item and "name" not in item:
            item = {("name" if k == "pool_name" else k): v for k, v in item.items()}  # Determined
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise MasterConfigError(f"master config: {path}[{i}] needs a name")
        unknown = set(item) - {
            "name",
            "description",
            "scheduler",
            "provider",
            "task_container_defaults",
        }
        if unknown:
            raise MasterConfigError(
                f"master config: {path}[{i}]: unknown key {sorted(unknown)[0]!r}"
            )
        pools.append(
            ResourcePoolConfig(
                name=item["name"],
                description=item.get("description", ""),
                scheduler=item.get("scheduler") or {"type": "priority"},
                provider=_provider(item.get("provider"), f"{path}[{i}].provider"),
                resource_manager=rm,
                task_container_defaults=_task_defaults(
                    item.get("task_container_defaults"), f"{path}[{i}].task_container_defaults"
                ),
            )
        )
    return pools


def _task_defaults(raw: Any, path: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise MasterConfigError(f"master config: {path} must be a mapping")
    for key in ("cpu_pod_spec", "gpu_pod_spec"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise MasterConfigError(f"master config: {path}.{key} must be a pod spec (a mapping)")
    return raw


def _provider(raw: Any, path: str) -> Any:
    if raw is None:
        return None
    from master.provisioner.config import ProviderConfigError, parse_provider

    try:
        provider = parse_provider(raw, path)
    except ProviderConfigError as e:
        raise MasterConfigError(f"master config: {e}") from e
    # The cloud SDKs are extras (the quick start has no need): say so now, not at the first launch.
    library = {"aws": "boto3", "gcp": "google.cloud.compute_v1"}.get(provider.type)
    if library and not _importable(library):
        raise MasterConfigError(
            f"master config: {path}: a {provider.type} provider needs {library.split('.')[0]}, "
            f"which is not installed: pip install 'detlab[{provider.type}]'"
        )
    return provider


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False
