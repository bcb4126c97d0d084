"""The `docker` runtime: one container per allocation, through the Docker SDK.

- The image is `environment.image` (pulled when missing, or always with `force_pull_image`); an
  image that cannot be had fails the allocation at once with a message in the trial's logs.
- The harness and its pure-Python dependencies are injected (a read-only mount, see _inject.py),
  so any image with `python3` and `/bin/sh` works. The model directory is copied into the
  container's working directory, `/run/determined/workdir`. An optional `startup-hook.sh` there
  is sourced before the entrypoint runs.
- Environment: `environment.environment_variables` < the master's `DET_*` < the agent's own
  (`DET_MASTER` = the container master URL, `DET_AGENT_ID`, `CUDA_VISIBLE_DEVICES`, PYTHONPATH).
- Mounts: `bind_mounts`, and a shared_fs checkpoint storage's `host_path` at the same path, so
  checkpoints land where the master expects them.
- GPUs: a device request for exactly the allocation's GPUs (by UUID); CPU slots get none and
  `NVIDIA_VISIBLE_DEVICES=void`, so a `nvidia` default runtime exposes no GPU either.
- Output is streamed from the engine's log (one connection per container, both streams, with
  the engine's timestamps) to the master as it happens.
- A kill is `docker stop` with the agent's kill grace (SIGTERM, then SIGKILL); a container runs
  under the engine's init, so the trial gets the SIGTERM even though it is PID 1's child.
- Containers are labelled with agent, allocation, trial and experiment. They are removed once
  the master has seen their exit, except the last `keep_failed` failed ones (for debugging).
- Restart: an agent that starts while its containers run re-attaches to them before its first
  poll (so the master sees them RUNNING; it kills those it no longer wants), and resumes their
  log streams exactly after the last line the master received: the position (engine timestamp,
  frames at that timestamp) of the last *delivered* line is kept in `<work-dir>/docker/<id>.json`.
  An agent killed after the master stored a batch but before it saved that position would send
  the batch again, so a re-attached stream first asks the master for the allocation's newest
  lines and drops the re-read lines it already has (`ResentLines`).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import ipaddress
import json
import logging
import os
import re
import shlex
import struct
import tarfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agent.runtime import AGENT_LINE_PREFIX, EXITED, Allocation, Runtime, RuntimeContext, _inject
from agent.runtime.process import _user_env_vars, build_argv

log = logging.getLogger(__name__)

LABEL_PREFIX = "ai.detlab"
L_MANAGED = f"{LABEL_PREFIX}.managed-by"
L_AGENT = f"{LABEL_PREFIX}.agent"
L_ALLOCATION = f"{LABEL_PREFIX}.allocation"
L_TRIAL = f"{LABEL_PREFIX}.trial"
L_EXPERIMENT = f"{LABEL_PREFIX}.experiment"

WORKDIR = "/run/determined/workdir"
LIB_DIR = "/run/determined/lib"
DEFAULT_IMAGE = "python:3.11-slim"
STARTUP_HOOK = "startup-hook.sh"

# Sources startup-hook.sh when the model directory has one, then execs the entrypoint ("$@").
ENTRY_SCRIPT = (
    f"if [ -f ./{STARTUP_HOOK} ]; then "
    f'. ./{STARTUP_HOOK} || {{ rc=$?; echo "{AGENT_LINE_PREFIX}{STARTUP_HOOK} failed with exit '
    'code $rc" >&2; exit $rc; }; fi; exec "$@"'
)


class DockerUnavailable(Exception):
    """The Docker engine (or the SDK) cannot be used; says why."""


@dataclass
class DockerOptions:
    """The docker runtime's settings (det-agent flags)."""

    container_master_url: str | None = None  # default: derived from the agent's master URL
    network: str = "host"  # host | bridge | a user-defined network
    keep_failed: int = 3  # failed containers kept for debugging (the newest N)
    memory_limit: str | None = None  # e.g. "32g"; no swap beyond it (so the limit is real)
    shm_size: str | None = "4g"  # PyTorch data loaders need more than Docker's 64 MB
    use_init: bool = True  # run the engine's init as PID 1 (signals reach the trial)
    pull_timeout: float = 600.0
    docker_timeout: float = 60.0


@dataclass
class _Container:
    id: str
    name: str
    image: str
    stop_evt: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)


# -- log positions -----------------------------------------------------------------------------


def parse_ts(text: str) -> tuple[int, str]:
    """An engine timestamp (RFC 3339, nanoseconds) -> (ns since the epoch, ISO with µs + Z)."""
    head, _, frac = text.rstrip("Z").partition(".")
    frac, tz = _split_tz(frac)
    base = datetime.fromisoformat(head + (tz or "+00:00"))
    digits = (frac + "000000000")[:9]
    ns = int(base.timestamp()) * 1_000_000_000 + int(digits)
    iso = base.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{digits[:6]}Z"
    return ns, iso


def _split_tz(frac: str) -> tuple[str, str]:
    for sign in ("+", "-"):
        if sign in frac:
            a, _, b = frac.partition(sign)
            return a, sign + b
    return frac, ""


@dataclass
class LogPos:
    """A position in a container's log: the engine timestamp of a frame, and how many frames
    with exactly that timestamp are at or before it (timestamps can repeat)."""

    ns: int = 0
    count: int = 0

    def since_param(self) -> str | None:
        if self.ns <= 0:
            return None
        ns = max(0, self.ns - 1_000_000)  # 1 ms early: the filter below is exact
        return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"

    def to_json(self) -> dict[str, int]:
        return {"ns": self.ns, "count": self.count}


class FrameFilter:
    """Skips the frames at or before a position, and tracks the position of the frames after."""

    def __init__(self, after: LogPos) -> None:
        self.after = LogPos(after.ns, after.count)
        self.cur = LogPos(after.ns, after.count)
        self._seen_at_after = 0

    def accept(self, ns: int) -> bool:
        """Whether the frame with this timestamp is new; updates `cur` if so."""
        if ns < self.after.ns:
            return False
        if ns == self.after.ns:
            self._seen_at_after += 1
            if self._seen_at_after <= self.after.count:
                return False
        # The position only moves forward: stdout and stderr are stamped independently, so a
        # frame can carry a timestamp a hair older than the one before it.
        if ns == self.cur.ns:
            self.cur = LogPos(ns, self.cur.count + 1)
        elif ns > self.cur.ns:
            self.cur = LogPos(ns, 1)
        return True


class LineAssembler:
    """Frames (one log entry each; the engine splits long lines into partial entries without a
    newline) -> whole lines, each with the position of its last frame."""

    def __init__(self) -> None:
        self._parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._first_iso: dict[str, str] = {}

    def feed(self, stream: str, iso: str, text: str) -> str | None:
        parts = self._parts[stream]
        if not parts:
            self._first_iso[stream] = iso
        parts.append(text)
        if not text.endswith("\n"):
            return None
        line = "".join(parts).rstrip("\r\n")
        parts.clear()
        return line

    def first_iso(self, stream: str) -> str:
        return self._first_iso.get(stream, "")

    def rest(self) -> list[tuple[str, str, str]]:
        """Unterminated lines at the end of the log: (stream, iso, line)."""
        out = []
        for stream, parts in self._parts.items():
            if parts:
                out.append((stream, self._first_iso[stream], "".join(parts).rstrip("\r\n")))
                parts.clear()
        return out


# -- delivery tracking -------------------------------------------------------------------------


class _DeliveryTap:
    """Wraps the log shipper's client: tells the runtime which lines the master accepted."""

    def __init__(self, inner: Any, on_delivered: Any) -> None:
        self._inner = inner
        self._on_delivered = on_delivered

    def ship_logs(self, lines: list[dict[str, Any]], **kwargs: Any) -> None:
        self._inner.ship_logs(lines, **kwargs)
        try:
            self._on_delivered(lines)
        except Exception:  # bookkeeping must never break log shipping
            log.exception("cannot record delivered log lines")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def iso_us(iso: str) -> int:
    """Microseconds since the epoch of an ISO 8601 timestamp (the master keeps microseconds)."""
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MICROSECOND


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class ResentLines:
    """After a re-attach: drops the re-read lines that the master stored already.

    The saved delivery position can lag the master by the lines whose delivery the agent had not
    recorded yet when it died (at most the batch in flight). The master's newest lines of the
    allocation, from the delivered position's microsecond on, are matched in order against the
    re-read lines: a re-read line found among them (after the previous match) is dropped; the
    first one not found ends the overlap, and every line from there on is new.
    """

    def __init__(self, stored: list[tuple[str, int, str]], after_us: int) -> None:
        self._stored = [entry for entry in stored if entry[1] >= after_us]
        self._next = 0
        self.done = not self._stored

    def drop(self, stream: str, us: int, line: str) -> bool:
        if self.done:
            return False
        key = (stream, us, line)
        for i in range(self._next, len(self._stored)):
            if self._stored[i] == key:
                self._next = i + 1
                self.done = self._next >= len(self._stored)
                return True
        self.done = True
        return False


class _LogState:
    """Per allocation: lines added to the shipper but not yet delivered, the delivered position,
    and the file it is kept in."""

    def __init__(self, path: Path, container_id: str, delivered: LogPos) -> None:
        self.path = path
        self.container_id = container_id
        self.delivered = delivered
        self.pending: deque[tuple[str, str, str, LogPos]] = deque()  # stream, iso, line, pos
        self.written: tuple[int, int] | None = None
        self.resent: ResentLines | None = None  # after a re-attach, until the overlap ends

    def save(self) -> None:
        key = (self.delivered.ns, self.delivered.count)
        if key == self.written:
            return
        data = {"container": self.container_id, "delivered": self.delivered.to_json()}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)
        self.written = key


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).strip("._-") or "x"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class DockerRuntime(Runtime):
    """Runs each allocation as a Docker container."""

    name = "docker"

    def __init__(
        self,
        ctx: RuntimeContext,
        options: DockerOptions | None = None,
        *,
        client: Any = None,
        shipper: Any = None,
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
        self._tap = False
        self._master: Any = None  # the agent's client, to ask what the master has after a restart
        self._sink_ts = _accepts_timestamp(ctx.log_sink)
        self._attach_shipper(shipper if shipper is not None else _shipper_of(ctx.log_sink))
        self._recover()
        _inject.prune(self._inject_base, self._mounted_libs() | {self._lib})

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

    def _attach_shipper(self, shipper: Any) -> None:
        """Track delivery through the shipper's client, so a restarted agent resumes each log
        exactly after the last line the master has."""
        client = getattr(shipper, "client", None)
        if client is not None and hasattr(client, "log_tail"):
            self._master = client
        if client is None or not hasattr(client, "ship_logs"):
            log.debug("no log shipper to watch: log positions are saved as lines are queued")
            return
        if not isinstance(client, _DeliveryTap):
            shipper.client = _DeliveryTap(client, self._on_delivered)
        self._tap = True

    # -- the log pipeline --------------------------------------------------------------------

    def _emit(self, aid: str, stream: str, iso: str, line: str, pos: LogPos) -> None:
        with self._log_lock:
            st = self._logs.get(aid)
            if st is not None and st.resent is not None and not st.pending:
                if st.resent.drop(stream, iso_us(iso), line):
                    st.delivered = pos  # the master has it: never send it again
                    self._save(st)
                    return
                st.resent = None
            if st is not None:
                if self._tap:
                    st.pending.append((stream, iso, line, pos))
                else:
                    st.delivered = pos
        if self._sink_ts:
            self.ctx.log_sink(aid, stream, line, iso)  # type: ignore[call-arg]
        else:
            self.ctx.log_sink(aid, stream, line)
        if st is not None and not self._tap:
            self._save(st)

    def _on_delivered(self, lines: list[dict[str, Any]]) -> None:
        touched: dict[str, _LogState] = {}
        with self._log_lock:
            for entry in lines:
                st = self._logs.get(str(entry.get("allocation_id")))
                if st is None or not st.pending:
                    continue
                key = (entry.get("stream"), entry.get("timestamp"), entry.get("line"))
                # FIFO: the entry is the oldest pending line, unless lines before it were dropped
                # (the shipper's buffer overflowed), or it is an agent line (no match at all).
                for i, (stream, iso, line, _pos) in enumerate(st.pending):
                    if (stream, iso, line) == key:
                        for _ in range(i):
                            st.pending.popleft()
                        st.delivered = st.pending.popleft()[3]
                        touched[id(st)] = st
                        break
        for st in touched.values():
            self._save(st)

    def _save(self, st: _LogState) -> None:
        try:
            st.save()
        except OSError as e:
            log.warning("cannot save the log position of %s: %s", st.path.name, e)

    def _state_path(self, aid: str) -> Path:
        return self._state_dir / f"{_safe(aid)}.json"

    def _read_state(self, aid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._state_path(aid).read_text())
        except (OSError, ValueError):
            return None

    def _frames(self, cid: str, pos: LogPos, follow: bool) -> Any:
        """(stream, engine timestamp, text) for each log entry after `pos`."""
        params: dict[str, Any] = {
            "stdout": 1,
            "stderr": 1,
            "timestamps": 1,
            "follow": 1 if follow else 0,
            "tail": "all",
        }
        since = pos.since_param()
        if since:
            params["since"] = since
        res = self.api._get(
            self.api._url("/containers/{0}/logs", cid), params=params, stream=True, timeout=None
        )
        try:
            self.api._raise_for_status(res)
            raw = res.raw
            with contextlib.suppress(Exception):
                self.api._disable_socket_timeout(self.api._get_raw_response_socket(res))
            while True:
                header = raw.read(8)
                if not header or len(header) < 8:
                    return
                kind, length = struct.unpack(">BxxxL", header)
                if not length:
                    continue
                data = raw.read(length)
                if not data:
                    return
                text = data.decode("utf-8", errors="replace")
                ts, _, rest = text.partition(" ")
                yield ("stderr" if kind == 2 else "stdout"), ts, rest
        finally:
            res.close()

    def _pump(
        self, rec: Allocation, handle: _Container, after: LogPos, reattached: bool = False
    ) -> None:
        """Stream the container's log to the master until it exits, then record the exit."""
        aid = rec.id
        if reattached:
            resent = self._resent_lines(aid, after)
            with self._log_lock:
                st = self._logs.get(aid)
                if st is not None:
                    st.resent = resent
        filt = FrameFilter(after)
        asm = LineAssembler()
        while True:
            try:
                for stream, ts, text in self._frames(handle.id, filt.cur, follow=True):
                    self._take(aid, filt, asm, stream, ts, text)
            except Exception as e:  # the engine restarted, the connection broke, ...
                if not handle.stop_evt.is_set():
                    log.warning("log stream of %s broke: %s", aid, e)
            state = self._inspect_state(handle.id)
            if state is None or not state.get("Running") and not state.get("Restarting"):
                break
            time.sleep(0.5)
        # The engine has everything now: take what the follow stream may have missed.
        with contextlib.suppress(Exception):
            for stream, ts, text in self._frames(handle.id, filt.cur, follow=False):
                self._take(aid, filt, asm, stream, ts, text)
        for stream, iso, line in asm.rest():
            self._emit(aid, stream, iso, line, filt.cur)
        state = self._inspect_state(handle.id) or {}
        code = state.get("ExitCode")
        code = int(code) if isinstance(code, int) else -1
        error: str | None
        with self._lock:
            error = rec.kill_reason
        if state.get("OOMKilled"):
            error = f"the trial ran out of memory: the container was OOM-killed (exit code {code})"
            self.ctx.log_sink(aid, "stderr", AGENT_LINE_PREFIX + error)
        elif state.get("Error"):
            error = error or f"the container failed: {state['Error']}"
        handle.exited.set()
        log.info("allocation %s: container %s exited with code %d", aid, handle.name, code)
        self._exited(rec, code, error)

    def _take(
        self, aid: str, filt: FrameFilter, asm: LineAssembler, stream: str, ts: str, text: str
    ) -> None:
        try:
            ns, iso = parse_ts(ts)
        except ValueError:
            ns, iso = filt.cur.ns, _now_iso()
        if not filt.accept(ns):
            return
        line = asm.feed(stream, iso, text)
        if line is not None:
            self._emit(aid, stream, asm.first_iso(stream) or iso, line, filt.cur)

    def _inspect_state(self, cid: str) -> dict[str, Any] | None:
        for _ in range(3):
            try:
                return self.api.inspect_container(cid).get("State") or {}
            except self._errors.NotFound:
                return None
            except Exception as e:
                log.debug("inspect %s failed: %s", cid, e)
                time.sleep(0.5)
        return None

    # -- building the container --------------------------------------------------------------

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
                    f"cannot pull the image {image!r}: {_explain(e)} "
                    "(check environment.image, the registry and its credentials)"
                ) from e
            self.ctx.log_sink(
                aid,
                "stdout",
                f"{AGENT_LINE_PREFIX}pulled image {image} in {time.monotonic() - t0:.1f} s",
            )
            return attrs

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, spec: dict[str, Any], model_def_path: Path | None) -> None:
        aid = str(spec["allocation_id"])
        with self._lock:
            rec = self._allocs.get(aid)
            if rec is None:
                if not self.reserve(aid):
                    return
                rec = self._allocs[aid]
            elif rec.state == EXITED or rec.handle is not None or rec.launching:
                return
        image = self.image_of(spec)
        try:
            model_tar = _checked_model_def(model_def_path)
            build_argv(spec.get("entrypoint"))
            attrs = self._ensure_image(aid, image, spec)
            kwargs = self.create_kwargs(spec, image, (attrs.get("Config") or {}).get("Env"))
        except _StartError as e:
            self.fail(aid, 1, str(e))
            return
        except (ValueError, OSError, KeyError) as e:
            self.fail(aid, 1, f"cannot prepare allocation {aid}: {e}")
            return
        with self._lock:
            if rec.state == EXITED:  # killed while the image was pulled
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
                self.api.put_archive(container.id, WORKDIR, model_tar)
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

    def _resent_lines(self, aid: str, delivered: LogPos) -> ResentLines | None:
        """What the master stored of this allocation's log from the delivered position on."""
        if self._master is None:
            return None
        try:
            tail = self._master.log_tail(aid)
            stored = [(e["stream"], iso_us(e["timestamp"]), e["line"]) for e in tail]
        except Exception as e:
            log.warning(
                "cannot read what the master has of %s's log (%s); lines shipped just before "
                "the restart may appear twice",
                aid,
                e,
            )
            return None
        return ResentLines(stored, delivered.ns // 1000)

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


class _StartError(Exception):
    pass


def _explain(e: BaseException) -> str:
    explanation = getattr(e, "explanation", None)
    if explanation:
        return str(explanation)
    return str(e) or type(e).__name__


def _checked_model_def(path: Path | None) -> bytes | None:
    """The model definition's bytes, after checking that nothing in it escapes its directory."""
    if path is None:
        return None
    data = path.read_bytes()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                tarfile.data_filter(member, WORKDIR)
    except (tarfile.TarError, EOFError) as e:
        raise ValueError(f"the model definition is refused: {e}") from e
    return data


def _accepts_timestamp(sink: Any) -> bool:
    """Whether the log sink takes the line's timestamp (LogShipper.add does)."""
    try:
        params = inspect.signature(sink).parameters
    except (TypeError, ValueError):
        return False
    return "timestamp" in params or any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()
    )


def _shipper_of(sink: Any) -> Any:
    """The LogShipper behind a bound `add` method, if that is what the sink is."""
    owner = getattr(sink, "__self__", None)
    return owner if owner is not None and hasattr(owner, "client") else None
