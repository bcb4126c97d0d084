"""The log pipeline of the docker runtime: container log frames -> lines -> the shipper, with
the delivered position saved so a restarted agent resumes each log exactly."""

from __future__ import annotations

import contextlib
import json
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.images import missing_module, missing_module_message
from agent.runtime import AGENT_LINE_PREFIX, Allocation, RuntimeContext
from agent.runtime.docker._common import (
    _Container,
    _safe,
    log,
)
from agent.runtime.docker._logpos import (
    FrameFilter,
    LineAssembler,
    LogPos,
    ResentLines,
    _LogState,
    _now_iso,
    iso_us,
    parse_ts,
)


def read_exactly(raw: Any, n: int) -> bytes:
    """n bytes of the stream, fewer only at its end: a read may return less than asked (a chunk
    boundary), which must not end the stream (a reconnect) or cut a frame."""
    buf = b""
    while len(buf) < n:
        chunk = raw.read(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


class LogPipeline:
    """Mixed into DockerRuntime: everything between the engine's log stream and the shipper."""

    # Set by DockerRuntime.__init__.
    api: Any
    ctx: RuntimeContext
    _logs: dict[str, _LogState]
    _log_lock: threading.Lock
    _state_dir: Path
    _sink_ts: bool
    _tap: bool
    _delivery: Any
    # ... and by Runtime and DockerRuntime.
    _lock: threading.RLock
    _errors: Any
    _exited: Callable[..., None]  # Runtime._exited

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
        touched: dict[int, _LogState] = {}
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
                header = read_exactly(raw, 8)
                if len(header) < 8:
                    return
                kind, length = struct.unpack(">BxxxL", header)
                if not length:
                    continue
                data = read_exactly(raw, length)
                if len(data) < length:
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
        missing: str | None = None  # the last module a traceback said was missing
        while True:
            # Every request starts 1 ms before the position (since_param): a fresh filter skips
            # what was taken already. Reusing one filtered against the first start only, so the
            # frames of the last millisecond came again on every reconnect and in the final
            # re-read: the last line(s) of every trial twice.
            filt = filt.resumed()
            try:
                for stream, ts, text in self._frames(handle.id, filt.cur, follow=True):
                    line = self._take(aid, filt, asm, stream, ts, text)
                    if line is not None and stream == "stderr":
                        missing = missing_module(line) or missing
            except Exception as e:  # the engine restarted, the connection broke, ...
                if not handle.stop_evt.is_set():
                    log.warning("log stream of %s broke: %s", aid, e)
            state = self._inspect_state(handle.id)
            if state is None or not state.get("Running") and not state.get("Restarting"):
                break
            time.sleep(0.5)
        # The engine has everything now: take what the follow stream may have missed.
        filt = filt.resumed()
        with contextlib.suppress(Exception):
            for stream, ts, text in self._frames(handle.id, filt.cur, follow=False):
                line = self._take(aid, filt, asm, stream, ts, text)
                if line is not None and stream == "stderr":
                    missing = missing_module(line) or missing
        for stream, iso, line in asm.rest():
            self._emit(aid, stream, iso, line, filt.cur)
            missing = (stream == "stderr" and missing_module(line)) or missing
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
        elif code != 0 and missing and not error:
            # A bare traceback does not say that the image is the problem: the agent does.
            error = missing_module_message(missing, handle.image)
            self.ctx.log_sink(aid, "stderr", AGENT_LINE_PREFIX + error)
        handle.exited.set()
        log.info("allocation %s: container %s exited with code %d", aid, handle.name, code)
        self._exited(rec, code, error)

    def _take(
        self, aid: str, filt: FrameFilter, asm: LineAssembler, stream: str, ts: str, text: str
    ) -> str | None:
        """Feed one frame; returns the line it completed (and emitted), if any."""
        try:
            ns, iso = parse_ts(ts)
        except ValueError:
            ns, iso = filt.cur.ns, _now_iso()
        if not filt.accept(ns):
            return None
        line = asm.feed(stream, iso, text)
        if line is not None:
            self._emit(aid, stream, asm.first_iso(stream) or iso, line, filt.cur)
        return line

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

    def _resent_lines(self, aid: str, delivered: LogPos) -> ResentLines | None:
        """What the master stored of this allocation's log from the delivered position on."""
        if self._delivery is None:
            return None
        try:
            tail = self._delivery.stored_tail(aid)
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
