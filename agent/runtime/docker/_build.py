"""What a trial's container is made of: image (pulled when needed), environment, mounts, GPUs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from agent.runtime import AGENT_LINE_PREFIX, RuntimeContext
from agent.runtime.docker._common import (
    DEFAULT_IMAGE,
    ENTRY_SCRIPT,
    L_AGENT,
    L_ALLOCATION,
    L_EXPERIMENT,
    L_MANAGED,
    L_TRIAL,
    LIB_DIR,
    WORKDIR,
    DockerOptions,
    _explain,
    _safe,
    _StartError,
)
from agent.runtime.process import _user_env_vars, build_argv
from detlab.protocol import ExitCause


class ContainerBuilder:
    """Mixed into DockerRuntime: the container spec of an allocation, and its image."""

    # Set by DockerRuntime.__init__.
    api: Any
    ctx: RuntimeContext
    opts: DockerOptions
    master_url: str
    _lib: Path
    _docker: Any
    _pull_locks: dict[str, threading.Lock]
    # ... and by Runtime and DockerRuntime.
    _lock: threading.RLock
    _errors: Any

    def image_of(self, spec: dict[str, Any]) -> str:
        env = spec.get("environment") or {}
        image = env.get("image") if isinstance(env, dict) else None
        if isinstance(image, dict):  # Determined's per-device form, if the master passed it on
            gpu = bool(self._gpu_slots(spec))
            image = (
                image.get("cuda" if gpu else "cpu")
                or image.get("gpu")
                or next((v for v in image.values() if v), None)
            )
        return str(image or DEFAULT_IMAGE)

    def _gpu_slots(self, spec: dict[str, Any]) -> list[dict[str, Any]]:
        by_index = {int(s["index"]): s for s in self.ctx.slots}
        out = []
        for i in spec.get("slot_indexes") or []:
            slot = by_index.get(int(i))
            if slot is not None and slot.get("type") == "gpu":
                out.append(slot)
        return out

    def build_env(self, spec: dict[str, Any], image_env: list[str] | None = None) -> dict[str, str]:
        """The container's environment: user env vars < master's DET_* < the agent's own."""
        gpus = self._gpu_slots(spec)
        env = _user_env_vars(spec.get("environment"), gpu=bool(gpus))
        env.update(
            {str(k): "" if v is None else str(v) for k, v in (spec.get("env") or {}).items()}
        )
        env.pop("DET_AGENT_TOKEN", None)
        env["DET_MASTER"] = self.master_url
        env["DET_AGENT_ID"] = self.ctx.agent_id
        env.setdefault("DET_ALLOCATION_ID", str(spec["allocation_id"]))
        # Inside the container its GPUs are numbered from 0 (the device request picks them).
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
        if gpus:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        else:
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        env["PYTHONUNBUFFERED"] = "1"
        image_pp = next(
            (e.partition("=")[2] for e in image_env or [] if e.startswith("PYTHONPATH=")), ""
        )
        extra = [p for p in (env.get("PYTHONPATH", "") or image_pp).split(":") if p]
        # harness/_alias: the trial-only `determined` alias (Determined scripts run unchanged).
        env["PYTHONPATH"] = ":".join([LIB_DIR, WORKDIR, f"{LIB_DIR}/harness/_alias", *extra])
        return env

    def build_mounts(self, spec: dict[str, Any]) -> list[Any]:
        Mount = self._docker.types.Mount
        mounts = [Mount(target=LIB_DIR, source=str(self._lib), type="bind", read_only=True)]
        targets = {LIB_DIR}
        storage = spec.get("checkpoint_storage") or {}
        host_path = storage.get("host_path") if isinstance(storage, dict) else None
        if storage.get("type", "shared_fs") == "shared_fs" and host_path:
            Path(host_path).mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(target=str(host_path), source=str(host_path), type="bind"))
            targets.add(str(host_path))
        for bm in spec.get("bind_mounts") or []:
            target = str(bm["container_path"])
            if not target.startswith("/"):
                target = f"{WORKDIR}/{target}"
            if target in targets:
                raise ValueError(f"two mounts at {target}")
            targets.add(target)
            mounts.append(
                Mount(
                    target=target,
                    source=str(bm["host_path"]),
                    type="bind",
                    read_only=bool(bm.get("read_only")),
                    propagation=bm.get("propagation") or None,
                )
            )
        return mounts

    def create_kwargs(
        self, spec: dict[str, Any], image: str, image_env: list[str] | None = None
    ) -> dict[str, Any]:
        """Everything `containers.create` gets for this allocation."""
        aid = str(spec["allocation_id"])
        argv = build_argv(spec.get("entrypoint"))
        gpus = self._gpu_slots(spec)
        kwargs: dict[str, Any] = {
            "image": image,
            "name": f"det-{_safe(self.ctx.agent_id)}-{_safe(aid)}"[:200],
            "entrypoint": ["/bin/sh", "-c", ENTRY_SCRIPT, "det-entry"],
            "command": argv,
            "working_dir": WORKDIR,
            "environment": self.build_env(spec, image_env),
            "labels": {
                L_MANAGED: "det-agent",
                L_AGENT: self.ctx.agent_id,
                L_ALLOCATION: aid,
                L_TRIAL: str(spec.get("trial_id", "")),
                L_EXPERIMENT: str(spec.get("experiment_id", "")),
            },
            "mounts": self.build_mounts(spec),
            "network_mode": self.opts.network,
            "init": self.opts.use_init,
            "stdin_open": False,
            "tty": False,
            "detach": True,
            "log_config": self._docker.types.LogConfig(
                type="json-file", config={"max-size": "100m", "max-file": "3"}
            ),
        }
        if self.opts.shm_size:
            kwargs["shm_size"] = self.opts.shm_size
        if self.opts.memory_limit:
            kwargs["mem_limit"] = self.opts.memory_limit
            kwargs["memswap_limit"] = self.opts.memory_limit
        if gpus:
            kwargs["device_requests"] = [
                self._docker.types.DeviceRequest(
                    driver="nvidia",
                    device_ids=[str(s.get("uuid") or s["index"]) for s in gpus],
                    capabilities=[["gpu", "compute", "utility"]],
                )
            ]
        env = spec.get("environment") or {}
        if isinstance(env, dict):
            if env.get("add_capabilities"):
                kwargs["cap_add"] = list(env["add_capabilities"])
            if env.get("drop_capabilities"):
                kwargs["cap_drop"] = list(env["drop_capabilities"])
        return kwargs

    def _ensure_image(self, aid: str, image: str, spec: dict[str, Any]) -> dict[str, Any]:
        """The image's attributes, pulling it when missing (or always with force_pull_image)."""
        env = spec.get("environment") or {}
        force = bool(env.get("force_pull_image")) if isinstance(env, dict) else False
        auth = env.get("registry_auth") if isinstance(env, dict) else None
        with self._lock:
            lock = self._pull_locks.setdefault(image, threading.Lock())
        with lock:
            if not force:
                try:
                    return self.api.inspect_image(image)
                except self._errors.ImageNotFound:
                    pass
            repo, tag = self._docker.utils.parse_repository_tag(image)
            self.ctx.log_sink(aid, "stdout", f"{AGENT_LINE_PREFIX}pulling image {image}")
            t0 = time.monotonic()
            try:
                for msg in self.api.pull(
                    repo, tag=tag or "latest", stream=True, decode=True, auth_config=auth
                ):
                    if isinstance(msg, dict) and msg.get("error"):
                        raise RuntimeError(msg["error"])
                    if time.monotonic() - t0 > self.opts.pull_timeout:
                        raise RuntimeError(f"no result after {self.opts.pull_timeout:g} s")
                attrs = self.api.inspect_image(image)
            except Exception as e:
                raise _StartError(
                    f"{ExitCause.IMAGE_PULL_FAILED.message} {image!r}: {_explain(e)} "
                    "(check environment.image, the registry and its credentials)",
                    ExitCause.IMAGE_PULL_FAILED,
                ) from e
            self.ctx.log_sink(
                aid,
                "stdout",
                f"{AGENT_LINE_PREFIX}pulled image {image} in {time.monotonic() - t0:.1f} s",
            )
            return attrs
