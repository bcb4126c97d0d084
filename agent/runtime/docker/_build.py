"""What a trial's container is made of: image (pulled when needed), environment, mounts, GPUs."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from agent.identity import TaskIdentity
from agent.images import BUILD_HINT, DEFAULT_IMAGES, default_image
from agent.runtime import AGENT_LINE_PREFIX, RuntimeContext
from agent.runtime._dirs import prepare_checkpoint_dir
from agent.runtime._env import EnvLayout, task_env
from agent.runtime.docker._common import (
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
from agent.runtime.process import build_argv
from detlab.protocol import ExitCause, StartSpec


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

    def image_of(self, spec: StartSpec) -> str:
        image = spec.environment.get("image")
        gpu = bool(self._gpu_slots(spec))
        if isinstance(image, dict):  # Determined's per-device form, if the master passed it on
            image = (
                image.get("cuda" if gpu else "cpu")
                or image.get("gpu")
                or next((v for v in image.values() if v), None)
            )
        return str(image or default_image(gpu))

    def _gpu_slots(self, spec: StartSpec) -> list[dict[str, Any]]:
        by_index = {int(s["index"]): s for s in self.ctx.slots}
        out = []
        for i in spec.slot_indexes:
            slot = by_index.get(i)
            if slot is not None and slot.get("type") == "gpu":
                out.append(slot)
        return out

    def build_env(
        self,
        spec: StartSpec,
        image_env: list[str] | None = None,
        ident: TaskIdentity | None = None,
    ) -> dict[str, str]:
        """The container's environment (agent/runtime/_env.py): nothing of the agent's own."""
        image_pp = next(
            (e.partition("=")[2] for e in image_env or [] if e.startswith("PYTHONPATH=")), ""
        )
        layout = EnvLayout(
            # harness/_alias: the trial-only `determined` alias (Determined scripts run as is).
            code_dirs=(LIB_DIR, WORKDIR, f"{LIB_DIR}/harness/_alias"),
            default_pythonpath=image_pp,
            renumber_gpus=True,
            # The image's HOME belongs to its own user; the task's is its work dir.
            home=None if ident is None else WORKDIR,
            user=None if ident is None else ident.name,
        )
        return task_env(
            spec,
            slots=self.ctx.slots,
            master_url=self.master_url,
            agent_id=self.ctx.agent_id,
            layout=layout,
        )

    def build_mounts(self, spec: StartSpec, ident: TaskIdentity | None = None) -> list[Any]:
        Mount = self._docker.types.Mount
        mounts = [Mount(target=LIB_DIR, source=str(self._lib), type="bind", read_only=True)]
        targets = {LIB_DIR}
        storage = spec.checkpoint_storage
        host_path = storage.get("host_path")
        if storage.get("type", "shared_fs") == "shared_fs" and host_path:
            Path(host_path).mkdir(parents=True, exist_ok=True)
            prepare_checkpoint_dir(storage, ident)
            mounts.append(Mount(target=str(host_path), source=str(host_path), type="bind"))
            targets.add(str(host_path))
        for bm in spec.bind_mounts:
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
        self,
        spec: StartSpec,
        image: str,
        image_env: list[str] | None = None,
        ident: TaskIdentity | None = None,
    ) -> dict[str, Any]:
        """Everything `containers.create` gets for this allocation (run as `ident` if given)."""
        aid = spec.allocation_id
        argv = build_argv(spec.entrypoint)
        gpus = self._gpu_slots(spec)
        kwargs: dict[str, Any] = {
            "image": image,
            "name": f"det-{_safe(self.ctx.agent_id)}-{_safe(aid)}"[:200],
            "entrypoint": ["/bin/sh", "-c", ENTRY_SCRIPT, "det-entry"],
            "command": argv,
            "working_dir": WORKDIR,
            "environment": self.build_env(spec, image_env, ident),
            "labels": {
                L_MANAGED: "det-agent",
                L_AGENT: self.ctx.agent_id,
                L_ALLOCATION: aid,
                L_TRIAL: str(spec.trial_id),
                L_EXPERIMENT: str(spec.experiment_id),
            },
            "mounts": self.build_mounts(spec, ident),
            "network_mode": self.opts.network,
            "init": self.opts.use_init,
            "stdin_open": False,
            "tty": False,
            "detach": True,
            "log_config": self._docker.types.LogConfig(
                type="json-file", config={"max-size": "100m", "max-file": "3"}
            ),
        }
        if ident is not None:
            kwargs["user"] = f"{ident.uid}:{ident.gid}"
            # As on the process runtime: what it writes (checkpoints too) is its own alone.
            kwargs["entrypoint"] = ["/bin/sh", "-c", "umask 077; " + ENTRY_SCRIPT, "det-entry"]
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
        env = spec.environment
        if env.get("add_capabilities"):
            kwargs["cap_add"] = list(env["add_capabilities"])
        if env.get("drop_capabilities"):
            kwargs["cap_drop"] = list(env["drop_capabilities"])
        return kwargs

    def _ensure_image(self, aid: str, image: str, spec: StartSpec) -> dict[str, Any]:
        """The image's attributes, pulling it when missing (or always with force_pull_image)."""
        force = bool(spec.environment.get("force_pull_image"))
        auth = spec.environment.get("registry_auth")
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
                how = (
                    f"it is detlab's default image: build it on this agent's machine with "
                    f"{BUILD_HINT}, or name another in environment.image"
                    if image in DEFAULT_IMAGES.values()
                    else "check environment.image, the registry and its credentials"
                )
                raise _StartError(
                    f"{ExitCause.IMAGE_PULL_FAILED.message} {image!r}: {_explain(e)} ({how})",
                    ExitCause.IMAGE_PULL_FAILED,
                ) from e
            self.ctx.log_sink(
                aid,
                "stdout",
                f"{AGENT_LINE_PREFIX}pulled image {image} in {time.monotonic() - t0:.1f} s",
            )
            return attrs
