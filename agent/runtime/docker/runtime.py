"""DockerRuntime: the lifecycle of trial containers (start, stop, remove) and re-attaching after
an agent restart. Its container spec is built by `_build`, its logs flow through `_pipeline`."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import posixpath
import shlex
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agent.identity import IdentityRefused
from agent.runtime import AGENT_LINE_PREFIX, Allocation, Runtime, RuntimeContext, _inject
from agent.runtime.docker._build import ContainerBuilder
from agent.runtime.docker._common import (
    L_AGENT,
    L_ALLOCATION,
    L_PROXY_PORT,
    LIB_DIR,
    WORKDIR,
    DockerOptions,
    DockerUnavailable,
    _accepts_timestamp,
    _checked_model_def,
    _Container,
    _explain,
    _StartError,
    log,
    owned_workdir_tar,
    recovered_proxy_port,
)
from agent.runtime.docker._logpos import (
    LogPos,
    _LogState,
)
from agent.runtime.docker._pipeline import LogPipeline
from agent.runtime.process import build_argv, free_tcp_port
from detlab.protocol import ReportedState, StartSpec


class DockerRuntime(LogPipeline, ContainerBuilder, Runtime):
    """Runs each allocation as a Docker container."""

    name = "docker"

    def __init__(
        self,
        ctx: RuntimeContext,
        options: DockerOptions | None = None,
        *,
        client: Any = None,
    ) -> None:
        super().__init__(ctx)
        self.opts = options or DockerOptions()
        try:
            import docker
            import docker.errors
            import docker.types
        except ImportError as e:
            raise DockerUnavailable(f"the docker SDK is not installed ({e})") from e
        self._docker = docker
        self._errors = docker.errors
        try:
            self.client = client or docker.from_env(timeout=int(self.opts.docker_timeout))
            self.client.ping()
        except Exception as e:
            raise DockerUnavailable(
                f"the Docker engine does not answer "
                f"({os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'}): {e}"
            ) from e
        self.api = self.client.api
        self.master_url = self._container_master_url()
        self._state_dir = ctx.work_dir / "docker"
        self._state_dir.mkdir(parents=True, exist_ok=True)
        self._inject_base = ctx.work_dir / "docker-inject"
        self._lib = _inject.build_lib(self._inject_base)
        self._pull_locks: dict[str, threading.Lock] = {}
        self._logs: dict[str, _LogState] = {}
        self._log_lock = threading.Lock()
        self._sink_ts = _accepts_timestamp(ctx.log_sink)
        # With the shipper's delivery reports a restarted agent resumes each log exactly after
        # the last line the master has; without, positions are saved as lines are queued.
        self._delivery = ctx.log_delivery
        self._tap = self._delivery is not None
        if self._delivery is not None:
            self._delivery.on_delivered(self._on_delivered)
        self._recover()
        _inject.prune(self._inject_base, self._mounted_libs() | {self._lib})

    def image_present(self, image: str) -> bool:
        """Whether the engine has the image (det-agent's start-up line says so)."""
        try:
            self.api.inspect_image(image)
        except Exception:  # noqa: BLE001 - not there, or the engine cannot say: not usable now
            return False
        return True

    # -- setup -------------------------------------------------------------------------------

    def _container_master_url(self) -> str:
        if self.opts.container_master_url:
            return self.opts.container_master_url.rstrip("/")
        url = self.ctx.master_url.rstrip("/")
        if self.opts.network == "host":
            return url
        parts = urlsplit(url)
        host = parts.hostname or ""
        loopback = host == "localhost"
        with contextlib.suppress(ValueError):
            loopback = loopback or ipaddress.ip_address(host).is_loopback
        if not loopback:
            return url
        try:
            net = self.client.networks.get(self.opts.network)
            gateway = net.attrs["IPAM"]["Config"][0]["Gateway"]
        except Exception as e:
            raise DockerUnavailable(
                f"the master URL {url} is a loopback address, which containers on network "
                f"{self.opts.network!r} cannot reach, and its gateway is unknown ({e}): "
                "pass --container-master-url"
            ) from e
        netloc = gateway + (f":{parts.port}" if parts.port else "")
        derived = urlunsplit(parts._replace(netloc=netloc))
        log.info(
            "containers reach the master at %s (the gateway of network %r; the master must "
            "listen there; else pass --container-master-url)",
            derived,
            self.opts.network,
        )
        return derived

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, spec: StartSpec, model_def_path: Path | None) -> None:
        aid = spec.allocation_id
        rec = self._claim(aid)
        if rec is None:
            return
        image = self.image_of(spec)
        try:
            ident = self._identity(spec)
            model_tar = _checked_model_def(model_def_path)
            archive_at = WORKDIR
            if ident is not None:
                model_tar = owned_workdir_tar(model_tar, ident.uid, ident.gid)
                archive_at = posixpath.dirname(WORKDIR)
            build_argv(spec.entrypoint)
            attrs = self._ensure_image(aid, image, spec)
            image_env = (attrs.get("Config") or {}).get("Env")
            kwargs = self.create_kwargs(spec, image, image_env, ident)
            if spec.proxy:
                rec.proxy_port = self._serve_port(kwargs)
        except IdentityRefused as e:
            self.fail(aid, 1, f"allocation {aid} refused: {e}")
            return
        except _StartError as e:
            self.fail(aid, 1, str(e), e.cause)
            return
        except (ValueError, OSError, KeyError) as e:
            self.fail(aid, 1, f"cannot prepare allocation {aid}: {e}")
            return
        with self._lock:
            if rec.state == ReportedState.EXITED:  # killed while the image was pulled
                return
            rec.launching = True
        try:
            container = self._create(kwargs)
        except Exception as e:
            self.fail(aid, 125, f"cannot create the container for allocation {aid}: {_explain(e)}")
            return
        handle = _Container(container.id, kwargs["name"], image)
        st = _LogState(self._state_path(aid), container.id, LogPos())
        try:
            self._save(st)
            if model_tar is not None:
                self.api.put_archive(container.id, archive_at, model_tar)
            self.api.start(container.id)
            pid = (self._inspect_state(container.id) or {}).get("Pid") or None
        except Exception as e:
            self._remove(handle.id)
            self._state_path(aid).unlink(missing_ok=True)
            self.fail(aid, 125, f"cannot start the container for allocation {aid}: {_explain(e)}")
            return
        with self._log_lock:
            self._logs[aid] = st
        self._running(rec, pid, handle)
        log.info(
            "allocation %s started: container %s (%s), image %s: %s",
            aid,
            handle.name,
            handle.id[:12],
            image,
            shlex.join(kwargs["command"]),
        )
        threading.Thread(
            target=self._pump, args=(rec, handle, LogPos()), name=f"logs-{aid}", daemon=True
        ).start()
        with self._lock:
            kill_now = rec.kill_requested
        if kill_now:
            self._kill_launched(rec)

    def _serve_port(self, kwargs: dict[str, Any]) -> int:
        """A notebook's or shell's port (StartSpec.proxy), where the master's proxy reaches it at
        this agent's address: the host's own on the host network, else published on the host
        under the same number (the task binds DET_TASK_PORT inside the container)."""
        port = free_tcp_port()
        kwargs["environment"]["DET_TASK_PORT"] = str(port)
        kwargs["labels"][L_PROXY_PORT] = str(port)
        if self.opts.network != "host":
            kwargs["ports"] = {f"{port}/tcp": port}
        return port

    def _create(self, kwargs: dict[str, Any]) -> Any:
        try:
            return self.client.containers.create(**kwargs)
        except self._errors.APIError as e:
            if getattr(e, "status_code", None) != 409:
                raise
            # A leftover with the same name (e.g. created by an agent that died before starting
            # it): nothing runs in it, so it goes.
            self._remove(kwargs["name"])
            return self.client.containers.create(**kwargs)

    stop_subject = "the container"

    def _begin_stop(self, rec: Allocation, handle: _Container) -> None:
        log.info("allocation %s: docker stop (SIGKILL after %g s)", rec.id, self.ctx.kill_grace)
        threading.Thread(
            target=self._stop, args=(rec, handle), name=f"kill-{rec.id}", daemon=True
        ).start()

    def _stop(self, rec: Allocation, handle: _Container) -> None:
        grace = self.ctx.kill_grace
        try:
            self.api.stop(handle.id, timeout=max(0, int(round(grace))))
        except self._errors.NotFound:
            return
        except Exception as e:
            log.warning("docker stop of %s failed (%s): killing it", rec.id, e)
            with contextlib.suppress(Exception):
                self.api.kill(handle.id)
        if not handle.exited.wait(5.0):
            with contextlib.suppress(Exception):
                self.api.kill(handle.id)

    def forget(self, allocation_id: str) -> None:
        with self._lock:
            rec = self._allocs.get(allocation_id)
        super().forget(allocation_id)
        with self._lock:
            gone = rec is not None and allocation_id not in self._allocs
        if not gone or rec is None:
            return
        with self._log_lock:
            self._logs.pop(allocation_id, None)
        self._state_path(allocation_id).unlink(missing_ok=True)
        handle = rec.handle
        if not isinstance(handle, _Container):
            return
        failed = rec.exit_code not in (0, None) and not rec.killing
        threading.Thread(
            target=self._dispose, args=(handle, failed), name="dispose", daemon=True
        ).start()

    def _dispose(self, handle: _Container, failed: bool) -> None:
        if failed and self.opts.keep_failed > 0:
            log.info("keeping failed container %s for debugging", handle.name)
        else:
            self._remove(handle.id)
        self._prune_kept()

    def _prune_kept(self) -> None:
        """Remove exited containers of this agent that no allocation needs, beyond the newest
        `keep_failed` (only failed ones are left exited: the others are removed at once)."""
        try:
            found = self.api.containers(
                all=True, filters={"label": f"{L_AGENT}={self.ctx.agent_id}", "status": "exited"}
            )
        except Exception as e:
            log.debug("cannot list containers: %s", e)
            return
        with self._lock:
            live = set(self._allocs)
        kept = [c for c in found if (c.get("Labels") or {}).get(L_ALLOCATION) not in live]
        kept.sort(key=lambda c: c.get("Created") or 0, reverse=True)
        for c in kept[max(0, self.opts.keep_failed) :]:
            self._remove(c["Id"])

    def _remove(self, ref: str) -> None:
        try:
            self.api.remove_container(ref, force=True)
        except self._errors.NotFound:
            pass
        except Exception as e:
            log.warning("cannot remove container %s: %s", ref, e)

    # -- restart -----------------------------------------------------------------------------

    def _recover(self) -> None:
        """Re-attach to this agent's containers from an earlier run (before the first poll)."""
        try:
            found = self.api.containers(
                all=True, filters={"label": f"{L_AGENT}={self.ctx.agent_id}"}
            )
        except Exception as e:
            log.warning("cannot list this agent's containers: %s", e)
            return
        for c in found:
            aid = (c.get("Labels") or {}).get(L_ALLOCATION)
            status = c.get("State") or ""
            if not aid:
                continue
            state = self._read_state(aid)
            if status == "created":
                self._remove(c["Id"])  # never started: the master sends the start again
                self._state_path(aid).unlink(missing_ok=True)
                continue
            if status in ("exited", "dead") and state is None:
                continue  # a failed container kept for debugging
            if state is not None and state.get("container") not in (None, c["Id"]):
                continue
            delivered = LogPos(**(state or {}).get("delivered", {}))
            name = (c.get("Names") or [c["Id"][:12]])[0].lstrip("/")
            handle = _Container(c["Id"], name, c.get("Image") or "")
            rec = Allocation(aid)
            rec.handle = handle
            info = self._inspect_state(c["Id"]) or {}
            rec.pid = info.get("Pid") or None
            rec.proxy_port = self._recovered_port(c)
            with self._lock:
                self._allocs[aid] = rec
            st = _LogState(self._state_path(aid), c["Id"], delivered)
            with self._log_lock:
                self._logs[aid] = st
            self._save(st)
            running = status not in ("exited", "dead")
            log.info(
                "re-attached to container %s of allocation %s (%s); its log resumes after %s",
                name,
                aid,
                status,
                "the beginning" if not delivered.ns else f"{delivered.ns} ns (#{delivered.count})",
            )
            if running:
                self.ctx.log_sink(
                    aid,
                    "stderr",
                    f"{AGENT_LINE_PREFIX}det-agent restarted and re-attached to this trial's "
                    "container",
                )
            threading.Thread(
                target=self._pump,
                args=(rec, handle, delivered, True),
                name=f"logs-{aid}",
                daemon=True,
            ).start()
        if found:
            self.changed.set()

    def _recovered_port(self, c: dict[str, Any]) -> int | None:
        """The proxy port of a re-attached container (its label; an older one's environment)."""
        labels = c.get("Labels") or {}
        env: list[str] | None = None
        if L_PROXY_PORT not in labels:
            try:
                env = (self.api.inspect_container(c["Id"]).get("Config") or {}).get("Env")
            except Exception as e:  # noqa: BLE001 - gone meanwhile: its exit is reported anyway
                log.debug("inspect %s failed: %s", c["Id"][:12], e)
        return recovered_proxy_port(labels, env)

    def _mounted_libs(self) -> set[Path]:
        out: set[Path] = set()
        try:
            found = self.api.containers(
                all=True, filters={"label": f"{L_AGENT}={self.ctx.agent_id}"}
            )
            for c in found:
                for m in c.get("Mounts") or []:
                    if m.get("Destination") == LIB_DIR and m.get("Source"):
                        out.add(Path(m["Source"]))
        except Exception as e:
            log.debug("cannot list mounts: %s", e)
        return out
