"""The agent's loop: poll the master, apply its actions, report every change at once.

Two threads talk to the master. The poller long-polls (`wait` = --poll-wait) so new work arrives
without delay; the reporter sends an immediate `wait: 0` poll whenever the runtime says an
allocation started or exited, because the long poll may be parked on the master for seconds.
Both apply the actions of their reply; actions are idempotent, so a duplicate is harmless.
The agent keeps no state the master cannot rebuild: what runs is what the runtime reports.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from agent import __version__
from agent.client import AgentClient, Backoff
from agent.devices import Slot, sample_stats
from agent.identity import Isolation
from agent.logs import LogShipper
from agent.modeldef import ModelDefCache
from agent.runtime import Runtime
from detlab.protocol import (
    ActionType,
    PollReply,
    PollRequest,
    ProtocolError,
    ReportedState,
    SlotReport,
    StartSpec,
)
from harness.api import BadRequest, DetError, Forbidden, Unauthenticated

log = logging.getLogger(__name__)


class Agent:
    """One agent: slots, a runtime, and the conversation with the master."""

    def __init__(
        self,
        *,
        agent_id: str,
        client: AgentClient,
        runtime: Runtime,
        shipper: LogShipper,
        model_defs: ModelDefCache,
        slots: list[Slot],
        resource_pool: str = "default",
        poll_wait: float = 20.0,
        hostname: str | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.agent_id = agent_id
        # Told to the master in every poll (None: say nothing, as tests driving an Agent do).
        self.acceptance = None if isolation is None else isolation.acceptance()
        self.client = client
        self.runtime = runtime
        self.shipper = shipper
        self.model_defs = model_defs
        self.slots = slots
        self.resource_pool = resource_pool
        self.poll_wait = poll_wait
        self.hostname = hostname or socket.gethostname()
        self.stopping = threading.Event()
        self.fatal: str | None = None
        self.polls = 0  # successful polls, for tests and logs
        self._threads: list[threading.Thread] = []

    # -- lifecycle --

    def start(self) -> None:
        """Start the poller and the reporter threads."""
        for target, name in ((self._poll_loop, "poller"), (self._report_loop, "reporter")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Ask the agent to shut down (signal handlers call this; it returns at once)."""
        self.stopping.set()

    def serve(self) -> int:
        """Run until stop() (or a fatal error), then shut down. Returns the exit status."""
        self.start()
        while not self.stopping.wait(0.5):
            pass
        self.shutdown()
        return 2 if self.fatal else 0

    def shutdown(self, final_poll_timeout: float = 5.0) -> None:
        """Kill every allocation (gracefully), ship their logs, report their exits, stop."""
        self.stopping.set()
        self.client.abort.set()  # other threads' retry loops give up now
        running = [a.id for a in self.runtime.states() if a.state != ReportedState.EXITED]
        if running:
            log.info("shutting down: stopping %d allocation(s)", len(running))
        if not self.runtime.shutdown():
            log.warning("some allocations did not exit in time")
        self.shipper.close(timeout=final_poll_timeout)
        if self.fatal is None:
            try:
                self._poll(wait=0.0, deadline=time.monotonic() + final_poll_timeout)
            except DetError as e:
                log.warning("could not report the final state to the master: %s", e)
        log.info("stopped")

    # -- polling --

    def payload(self, wait: float) -> PollRequest:
        """The poll: who we are, our slots with fresh stats, every allocation we have."""
        try:
            stats = sample_stats(self.slots)
        except Exception as e:  # statistics are nice to have; never worth a missed heartbeat
            log.debug("cannot sample slot stats: %s", e)
            stats = [{} for _ in self.slots]
        return PollRequest(
            resource_pool=self.resource_pool,
            version=__version__,
            runtime=self.runtime.name,
            hostname=self.hostname,
            acceptance=self.acceptance,
            slots=tuple(
                SlotReport.parse({**slot, "stats": st}, f"slots[{i}]")
                for i, (slot, st) in enumerate(zip(self.slots, stats, strict=True))
            ),
            allocations=tuple(self.runtime.states()),
            wait=wait,
        )

    def _poll(self, wait: float, deadline: float | None = None) -> PollReply:
        sent: list[PollRequest] = []

        def build() -> dict[str, Any]:  # anew for every attempt (see AgentClient.poll)
            sent.append(self.payload(wait))
            return sent[-1].to_json()

        raw = self.client.poll(build, deadline=deadline)
        body = sent[-1]  # what the master answered
        self.polls += 1
        # The master has now seen these exits: the agent may let go of them.
        for alloc in body.allocations:
            if alloc.state == ReportedState.EXITED:
                self.runtime.forget(alloc.id)
        try:
            reply, errors = PollReply.parse(raw)
        except ProtocolError as e:
            log.error("the master's reply does not follow the protocol: %s", e)
            return PollReply()
        for err in errors:
            log.error("ignoring an action that does not follow the protocol: %s", err)
        return reply

    def _poll_loop(self) -> None:
        backoff = Backoff(first=1.0, cap=10.0)
        refused = Backoff(first=2.0, cap=60.0)  # a refused token will not fix itself soon
        refused_logged: float | None = None
        registered = False
        while not self.stopping.is_set():
            try:
                reply = self._poll(self.poll_wait)
            except (Unauthenticated, Forbidden) as e:
                if not registered:
                    self.fatal = (
                        f"the master at {self.client.master_url} refused this agent's "
                        f"credential (HTTP {e.status}: {e}): if an admin reset it (det agent "
                        "reset-credential) or it belongs to another cluster, remove "
                        "agent-<id>.credential from the agent's --data-dir and start it again "
                        "with the cluster's agent token (DET_AGENT_TOKEN)"
                    )
                    log.error("%s", self.fatal)
                    self.stop()
                    return
                # Advice for agents, not people: the master's 401 text says "det user login".
                delay = refused.next()
                if refused_logged is None or time.monotonic() - refused_logged > 60:
                    refused_logged = time.monotonic()
                    log.error(
                        "the master at %s refused this agent's credential (HTTP %s): reset by an "
                        "admin (det agent reset-credential)? remove agent-<id>.credential from "
                        "this agent's --data-dir and restart it with the cluster's agent token "
                        "(DET_AGENT_TOKEN); retrying with back-off (next in %.0f s, at most "
                        "every %.0f s)",
                        self.client.master_url,
                        e.status,
                        delay,
                        refused.cap,
                    )
                self.stopping.wait(delay)
                continue
            except BadRequest as e:
                if e.path == "resource_pool":  # --resource-pool names no pool: retrying cannot help
                    self.fatal = (
                        f"the master at {self.client.master_url} refused this agent's pool: "
                        f"{e.message} (restart det-agent with --resource-pool NAME)"
                    )
                    log.error("%s", self.fatal)
                    self.stop()
                    return
                log.error("poll failed: %s", e)
                self.stopping.wait(backoff.next())
                continue
            except DetError as e:
                if self.stopping.is_set():
                    return
                log.error("poll failed: %s", e)
                self.stopping.wait(backoff.next())
                continue
            except Exception:
                log.exception("unexpected error while polling")
                self.stopping.wait(backoff.next())
                continue
            if not registered:
                log.info("registered with the master at %s", self.client.master_url)
                registered = True
            elif refused_logged is not None:
                log.info(
                    "the master at %s accepts this agent's token again", self.client.master_url
                )
            refused_logged = None
            refused.reset()
            backoff.reset()
            self.apply(reply)
            if reply.poll_interval > 0:
                self.stopping.wait(reply.poll_interval)

    def _report_loop(self) -> None:
        changed = self.runtime.changed
        while not self.stopping.is_set():
            if not changed.wait(0.5):
                continue
            changed.clear()
            time.sleep(0.02)  # coalesce a burst of changes into one poll
            if self.stopping.is_set():
                return
            if any(a.state == ReportedState.EXITED for a in self.runtime.states()):
                # Deliver the trial's last lines before the master hears that it ended.
                self.shipper.flush(timeout=5.0)
            try:
                reply = self._poll(0.0)
            except (Unauthenticated, Forbidden):
                # The poll loop says so and backs off; retry the report as slowly.
                changed.set()
                self.stopping.wait(10.0)
                continue
            except DetError as e:
                if not self.stopping.is_set():
                    log.warning("cannot report a state change (will retry): %s", e)
                    changed.set()
                    self.stopping.wait(1.0)
                continue
            except Exception:
                log.exception("unexpected error while reporting")
                changed.set()
                self.stopping.wait(1.0)
                continue
            self.apply(reply)

    # -- actions --

    def apply(self, reply: PollReply) -> None:
        """Carry out a poll reply's actions; a failing action is logged, never fatal."""
        for action in reply.actions:
            try:
                if action.type == ActionType.START and action.spec is not None:
                    self._start(action.spec)
                elif action.type == ActionType.DELETE_CHECKPOINT:
                    from agent.ckpt_gc import delete_checkpoint

                    threading.Thread(
                        target=delete_checkpoint,
                        args=(self.client, action.checkpoint_uuid, action.storage or {}),
                        daemon=True,
                    ).start()
                elif action.type == ActionType.KILL:
                    aid = action.allocation_id
                    if any(
                        a.id == aid and a.state != ReportedState.EXITED
                        for a in self.runtime.states()
                    ):
                        log.info("kill %s", aid)
                    self.runtime.kill(aid)
            except Exception:
                log.exception("cannot apply action %r", action)

    def _start(self, spec: StartSpec) -> None:
        aid = spec.allocation_id
        if self.stopping.is_set() or not self.runtime.reserve(aid):
            log.debug("start %s: already known, ignored", aid)
            return
        log.info("start %s (trial %s)", aid, spec.trial_id)
        threading.Thread(
            target=self._launch, args=(spec,), name=f"launch-{aid}", daemon=True
        ).start()

    def _launch(self, spec: StartSpec) -> None:
        """Download the model definition and start the allocation, off the polling threads."""
        aid = spec.allocation_id
        try:
            path = self.model_defs.fetch(spec)
        except Exception as e:
            self.runtime.fail(aid, 1, f"cannot fetch the model definition: {e}")
            return
        try:
            self.runtime.start(spec, path)
        except Exception as e:
            log.exception("allocation %s failed to start", aid)
            self.runtime.fail(aid, 1, f"the agent failed to start the trial: {e}")
