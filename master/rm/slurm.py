"""The Slurm resource manager: each partition a pool, each allocation one `sbatch` job.

Slurm queues and places its jobs itself (`queues_itself`): the scheduling pass submits every
request of a Slurm pool in the scheduler's order, and Slurm decides when it runs. `refresh`
runs once per scheduling pass: one bulk `squeue` for every detlab job, the new lines of each
job's output file into the task's logs, and each ended job's exit from the status file its
batch script wrote (master/rm/slurm_cli.py builds the command lines and reads their output).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flask import current_app
from sqlalchemy import select

import master
from agent.runtime import _inject
from detlab.protocol import ExitCause
from master.context import master_state
from master.db import db, utcnow
from master.models import Allocation, Task
from master.rm import slurm_cli as cli
from master.rm import slurm_gang as gangs
from master.rm import slurm_handover as handover
from master.rm import slurm_health as health
from master.rm import slurm_podman as podman
from master.rm.backoff import next_backoff
from master.rm.base import AllocationStatus, Placements
from master.rm.slurm_config import SlurmConfig
from master.rm.slurm_request import slots_of, slurm_section
from master.scheduler import AgentView
from master.services.task.allocations import (
    containers_of,
    new_allocation,
    request_preemption,
    set_container,
)
from master.services.trial.logs import ingest_agent_logs, write_line
from master.states import LIVE_ALLOCATION, AllocationState, TaskType

log = logging.getLogger("detlab.slurm")

CLI_TIMEOUT_S = 30.0
LOG_CHUNK_BYTES = 1 << 20  # at most this much of one job's output per tick
# What a container's Python may lack: detlab's own packages come with its code root.
INJECTED = tuple(p for p in _inject.PACKAGES if p not in ("harness", "detlab"))


def run_cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """One Slurm command; a missing command or a hung slurmctld is an rc 1 with its reason."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not installed here")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            argv, 1, "", f"{argv[0]} did not answer within {CLI_TIMEOUT_S:g} s"
        )


class SlurmResourceManager:
    type = "slurm"
    queues_itself = True

    def __init__(self, name: str) -> None:
        self.name = name
        det = current_app.config["DET"]
        rm = next(r for r in det.resource_managers if r.name == name)
        assert rm.slurm is not None, f"resource manager {name} is not a slurm one"
        self.cfg: SlurmConfig = rm.slurm
        self.agent_id = f"slurm:{name}"
        host = self.cfg.master_host or det.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        self.master_url = f"http://{host}:{self.cfg.master_port or det.port}"
        self.pools = {p.name for p in det.resource_pools if p.resource_manager == name}
        # An RM object lives for one call (registry.py builds it): what must outlast it is kept
        # with the app.
        store = current_app.extensions.setdefault("detlab.slurm", {})
        self.health: health.Health = store.setdefault(name, health.Health())
        self.pool_notes = self.health.pool_notes

    def _failed(self, what: str, stderr: str) -> str:
        """A Slurm command failed: munge's failure in one clear line, logged once per outage
        rather than on every tick; the line is returned for the task's log."""
        line = health.munge_failure(stderr) or f"{what} failed: {cli.slurm_words(stderr)}"
        if line != self.health.failing:
            log.error("%s", line)
            self.health.failing = line
        return line

    def _worked(self) -> None:
        if self.health.failing is not None:
            log.warning("Slurm answers again (after: %s)", self.health.failing)
            self.health.failing = None

    # -- capacity ---------------------------------------------------------------------------

    def capacity(self, pools: set[str]) -> list[AgentView]:
        """One view per partition: its slots from `sinfo` (Slurm, not detlab, decides where
        they go, so every slot counts as free)."""
        wait = self.health.hold_until - time.monotonic()
        if wait > 0:
            # Slurm did not answer the last sbatch: no submission until the back-off ends, and
            # the pools say why their trials wait.
            for pool in pools:
                self.pool_notes[pool] = f"{self.health.failing}; asking Slurm again in {wait:.0f} s"
            return []
        problem = self._storage_problem()
        if problem:  # nothing submitted (no restart spent) until the storage is fixed
            for pool in pools:
                self._note(pool, problem)
            return []
        out = run_cli(list(cli.SINFO_ARGV))
        if out.returncode != 0:
            line = self._failed("sinfo", out.stderr)
            for pool in pools:  # the failure itself is logged once, in _failed
                self.pool_notes[pool] = line
            return []
        self._worked()
        rows = cli.parse_sinfo(out.stdout)
        views = []
        for pool in sorted(pools):
            row = rows.get(pool)
            self._note(pool, health.pool_note(row, pool))
            if row is not None:
                self.health.partitions[pool] = row
            if row is None or not row.up:
                continue
            total = cli.partition_slots(row, self.cfg.slot_type_of(pool))
            views.append(AgentView(id=f"{self.agent_id}:{pool}", pool=pool, free=(), total=total))
        return views

    def _storage_problem(self) -> str | None:
        """A master that is not root submitting through sudo hands each job directory over by
        ACLs (master/rm/slurm_handover.py): job_storage_root must allow it."""
        if self.health.storage_ok or os.geteuid() == 0 or not self.cfg.sudo_authorized:
            return None
        problem = handover.storage_problem(Path(self.cfg.job_storage_root))
        self.health.storage_ok = problem is None
        return problem

    def _note(self, pool: str, note: str | None) -> None:
        if note == self.pool_notes.get(pool):
            return
        if note:
            log.warning("pool %s: %s", pool, note)
            self.pool_notes[pool] = note
        else:
            log.info("pool %s: its Slurm partition's nodes take jobs again", pool)
            self.pool_notes.pop(pool, None)

    # -- submission -------------------------------------------------------------------------

    def job_dir(self, alloc_id: str) -> Path:
        return Path(self.cfg.job_storage_root) / alloc_id

    def start(self, task: Task, placements: Placements) -> Allocation:
        """Write the allocation's spec and batch script to its job directory and `sbatch` it.
        A refusal no wait can help ends the allocation as "can never fit" in Slurm's words."""
        from master.services.task.launch import start_spec
        from master.services.task.tasks import allocation_exited, task_pool

        pool = task_pool(task)
        slots = slots_of(task)
        section = slurm_section(task)
        per_node = section.get("slots_per_node")
        gang, row = self._gang(task, pool, slots, per_node)
        # One container per node: the rendezvous waits for that many launchers.
        alloc = new_allocation(
            task, tuple((gangs.container_key(self.agent_id, r), ()) for r in range(gang.nodes))
        )
        why = gangs.never_fits(gang, slots, pool, row.nodes, per_node) if row is not None else None
        if task.type != TaskType.TRIAL:
            why = gangs.one_node_never_fits(task.type.value.lower(), slots, per_node)
        if why is not None:
            write_line(alloc, f"can never fit: {why}")
            allocation_exited(alloc, None, f"can never fit: {why}", ExitCause.NEVER_FITS)
            return alloc
        spec = start_spec(alloc, self.agent_id)
        job_dir = self.job_dir(alloc.id)
        u = spec.user
        user = cli.JobUser(u.unix_user, u.uid, u.gid) if u else cli.JobUser()
        as_root = os.geteuid() == 0
        try:
            uid, sudo_user = handover.job_identity(self.cfg, user, as_root)
        except KeyError as e:
            write_line(alloc, str(e.args[0]))
            allocation_exited(alloc, None, str(e.args[0]))
            return alloc
        try:
            gpu = self.cfg.slot_type_of(pool) != "cpu" and slots > 0
            iface = self.cfg.rendezvous_interface_of(pool)
            self._write_job(job_dir, spec.to_json(), user, uid, gang.nodes, gpu, iface)
        except OSError as e:
            allocation_exited(alloc, None, f"cannot write the Slurm job's files: {e}")
            return alloc
        except ValueError as e:  # the container cannot be made (two bind mounts at one path)
            write_line(alloc, f"cannot start the Slurm job's container: {e}")
            allocation_exited(alloc, None, f"cannot start the Slurm job's container: {e}")
            return alloc
        sub = cli.Submission(
            task_id=task.id,
            allocation_id=alloc.id,
            partition=pool,
            slots=slots,
            job_dir=str(job_dir),
            gang=gang,
            gpu_type=section.get("gpu_type"),
            sbatch_args=tuple(section.get("sbatch_args") or ()),
        )
        out = run_cli(cli.sbatch_argv(self.cfg, sub, user, as_root=as_root))
        if out.returncode != 0:
            words = cli.slurm_words(out.stderr)
            if health.transient_failure(out.stderr):
                self._unanswered(alloc, out.stderr)
            elif cli.refusal_never_fits(out.stderr):
                write_line(alloc, f"can never fit: Slurm refused the job: {words}")
                allocation_exited(alloc, None, f"can never fit: {words}", ExitCause.NEVER_FITS)
            else:
                allocation_exited(alloc, None, f"sbatch failed: {words}")
            return alloc
        self._worked()
        self.health.backoff_s = None
        job_id = cli.parse_job_id(out.stdout)
        # A trial is RUNNING once its harness reports (harness_reported), not when Slurm starts
        # the batch script; a command has no harness, so Slurm's word is all there is.
        awaits = task.type == TaskType.TRIAL
        set_container(
            alloc,
            self.agent_id,
            slurm_job_id=job_id,
            log_offset=0,
            awaits_harness=awaits,
            partition=pool,
            # Whose the job's files must be (read_job_file), and as whom to scancel it.
            job_uid=uid,
            sudo_user=sudo_user,
        )
        nodes = f", {gang.nodes} nodes of {gang.slots_per_node} slot(s)" if gang.nodes > 1 else ""
        write_line(alloc, f"submitted to Slurm as job {job_id} (partition {pool}{nodes})")
        return alloc

    def _gang(
        self, task: Task, pool: str, slots: int, per_node: int | None = None
    ) -> tuple[gangs.Gang, cli.PartitionRow | None]:
        """How many nodes the task spans. Only a trial spans nodes: its launchers meet through
        the rendezvous; a command has none, so one too big for a node is Slurm's to refuse."""
        row = self.health.partitions.get(pool)
        slot_type = self.cfg.slot_type_of(pool)
        # More slots than the whole partition has: submitted as one node, Slurm refuses it in
        # its own words ("Requested node configuration is not available").
        if (
            task.type != TaskType.TRIAL
            or row is None
            or slots > cli.partition_slots(row, slot_type)
        ):
            return gangs.Gang(1, slots), row
        return gangs.plan_gang(slots, cli.node_slots(row, slot_type), per_node), row

    def _unanswered(self, alloc: Allocation, stderr: str) -> None:
        """sbatch failed because Slurm (or munge) did not answer: the trial goes back to the
        queue without spending a restart, and the pool's submissions wait a back-off."""
        from master.services.task.tasks import allocation_exited

        line = self._failed("sbatch", stderr)
        self.health.backoff_s = next_backoff(self.health.backoff_s)
        self.health.hold_until = time.monotonic() + self.health.backoff_s
        write_line(
            alloc,
            f"{line}; back to the queue (its restarts untouched), Slurm is asked again in "
            f"{self.health.backoff_s:g} s",
        )
        allocation_exited(alloc, None, line, ExitCause.BACKEND_UNAVAILABLE)

    def _write_job(
        self,
        job_dir: Path,
        spec: dict[str, Any],
        user: cli.JobUser,
        uid: int,
        nodes: int,
        gpu: bool,
        iface: str | None = None,
    ) -> None:
        job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        doc = {
            "spec": spec,
            "master_url": self.master_url,
            "agent_id": self.agent_id,
            "rendezvous_network_interface": iface,  # agent/netif.py
        }
        # The spec holds the allocation's session token: readable by its owner only.
        fd = os.open(job_dir / cli.SPEC_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        code_root = str(Path(master.__file__).resolve().parent.parent)
        python, container, preamble = sys.executable, "", ""
        if self.cfg.container_run_type == "podman":
            # The injected dependencies live on the shared storage every node mounts.
            lib = str(_inject.build_lib(Path(self.cfg.job_storage_root) / ".inject", INJECTED))
            container = podman.podman_prefix(spec, str(job_dir), code_root, lib, gpu)
            python, preamble = "python3", podman.preamble(spec)
        script = cli.job_script(
            python, code_root, str(job_dir), self.cfg.path, nodes, container, preamble
        )
        (job_dir / cli.SCRIPT_FILE).write_text(script)
        (job_dir / cli.SCRIPT_FILE).chmod(0o700)
        # The job runs as the linked Unix user: the directory (where Slurm writes its output and
        # the job its status) and the spec with the session token become that user's alone.
        handover.give(job_dir, user, uid)

    # -- stopping ---------------------------------------------------------------------------

    def preempt(self, alloc: Allocation) -> bool:
        """A trial hears the preemption from the master (as on agents), checkpoints and exits;
        a command cannot checkpoint, so its job is cancelled and it queues again."""
        if not request_preemption(alloc, alloc.trial_id):
            return False
        if alloc.task.type != TaskType.TRIAL:
            self._scancel(alloc)
        return True

    def kill(self, alloc: Allocation) -> None:
        alloc.kill_requested = True
        if self._scancel(alloc):
            set_container(alloc, self.agent_id, kill_sent=True)

    def _scancel(self, alloc: Allocation, signal: str | None = None) -> bool:
        mine = containers_of(alloc).get(self.agent_id, {})
        job_id = mine.get("slurm_job_id")
        if not job_id:
            return False
        argv = ["scancel", *(["--batch", f"--signal={signal}"] if signal else []), job_id]
        # A job submitted through `sudo -u` is that user's: only its owner (or Slurm's
        # operators) may cancel it, so scancel goes through the same sudo.
        out = run_cli(cli.as_user(self.cfg, mine.get("sudo_user")) + argv)
        if out.returncode != 0:
            log.warning("scancel %s failed: %s", job_id, out.stderr.strip())
        return out.returncode == 0

    def status(self, alloc: Allocation) -> AllocationStatus:
        return AllocationStatus(
            running=alloc.state == AllocationState.RUNNING,
            exited=alloc.state == AllocationState.TERMINATED,
            exit_code=alloc.exit_code,
            error=alloc.exit_reason,
        )

    def release(self, alloc: Allocation) -> None:
        """Nothing is booked in detlab; the spec (with its revoked token) is removed, the
        output file kept for whoever debugs the job."""
        try:
            (self.job_dir(alloc.id) / cli.SPEC_FILE).unlink(missing_ok=True)
        except OSError:
            pass

    # -- tracking ---------------------------------------------------------------------------

    def live_allocations(self) -> list[Allocation]:
        allocs = db.session.execute(
            select(Allocation).where(
                Allocation.agent_id == self.agent_id, Allocation.state.in_(LIVE_ALLOCATION)
            )
        ).scalars()
        return list(allocs)

    def refresh(self) -> None:
        """One `squeue` for every detlab job; ship new output, follow states, record exits.
        When squeue fails (slurmctld restarting) nothing is concluded: jobs are kept."""
        from master.services.task.tasks import allocation_exited

        allocs = self.live_allocations()
        if not allocs:
            return
        out = run_cli(list(cli.SQUEUE_ARGV))
        if out.returncode != 0:  # tracking resumes when it answers
            self._failed("squeue", out.stderr)
            for alloc in allocs:
                self._ship_logs(alloc)
            return
        self._worked()
        rows = cli.parse_squeue(out.stdout)
        waiting = master_state().scheduling.waiting_reasons
        for alloc in allocs:
            self._ship_logs(alloc)
            mine = containers_of(alloc).get(self.agent_id, {})
            job_id = mine.get("slurm_job_id")
            if not job_id:
                continue
            # Level-triggered, as agents are: a kill asked anywhere (the user, a preemption
            # timeout) is sent until the job is seen to end.
            wants_kill = alloc.kill_requested or bool(mine.get("kill"))
            if wants_kill and not mine.get("kill_sent") and self._scancel(alloc):
                set_container(alloc, self.agent_id, kill_sent=True)
            row = rows.get(alloc.id)
            phase = row.phase if row is not None else cli.JobPhase.ENDED
            if phase == cli.JobPhase.PENDING:
                note = self.pool_notes.get(str(mine.get("partition") or ""))
                reason = health.pending_reason(row.reason if row else "", note)
                if reason:
                    waiting[alloc.task_id] = reason
                continue
            waiting.pop(alloc.task_id, None)
            if phase == cli.JobPhase.RUNNING:
                if alloc.state == AllocationState.ASSIGNED:
                    self._started(alloc, job_id, mine, waiting)
                self._take_notice(alloc, job_id)
                continue
            self._take_notice(alloc, job_id)
            code = self._exit_status(alloc)
            self._ship_logs(alloc)  # whatever the job wrote last
            set_container(alloc, self.agent_id, exited=True, exit_code=code)
            # Slurm's preemption is not the trial's fault: its restarts are not spent.
            noticed = containers_of(alloc).get(self.agent_id, {}).get("slurm_notice")
            cause = ExitCause.BACKEND_PREEMPTED if noticed else None
            if code is not None:
                allocation_exited(alloc, code, None, cause if code != 0 else None)
            else:
                allocation_exited(alloc, None, cli.ended_without_status(row, job_id), cause)
        db.session.commit()

    def _started(
        self, alloc: Allocation, job_id: str, mine: dict[str, Any], waiting: dict[str, str]
    ) -> None:
        """Slurm runs the job: RUNNING at once unless a harness is to report first."""
        from master.services.transitions import set_allocation_state

        first = not mine.get("started_at")
        if first:
            set_container(alloc, self.agent_id, started_at=utcnow().isoformat())
        if not mine.get("awaits_harness"):
            set_allocation_state(alloc, AllocationState.RUNNING, f"Slurm job {job_id} runs")
            return
        if first:
            write_line(alloc, f"Slurm job {job_id} started; waiting for the harness to report")
        waiting[alloc.task_id] = f"started in Slurm as job {job_id}, waiting for the harness"

    def _take_notice(self, alloc: Allocation, job_id: str) -> None:
        """Slurm's USR1 (the launcher left a notice file): ask the trial to checkpoint and exit,
        as any preemption does; detlab queues it again (the job was submitted --no-requeue)."""
        if containers_of(alloc).get(self.agent_id, {}).get("slurm_notice"):
            return
        if not (self.job_dir(alloc.id) / cli.NOTICE_FILE).exists():
            return
        set_container(alloc, self.agent_id, slurm_notice=True)
        if request_preemption(alloc, alloc.trial_id):
            write_line(
                alloc,
                f"Slurm wants job {job_id} back (preemption or its time limit): "
                + (
                    "the trial checkpoints, exits and queues again"
                    if alloc.trial_id is not None
                    else "it stops and queues again"
                ),
            )

    def _read(self, alloc: Allocation, name: str, offset: int = 0, limit: int = -1) -> bytes:
        """A file the job wrote, read as untrusted (master/rm/slurm_handover.py); one it may not
        be is refused once in the task's log and reads as missing."""
        mine = containers_of(alloc).get(self.agent_id, {})
        try:
            return handover.read_job_file(
                self.job_dir(alloc.id) / name, mine.get("job_uid"), offset, limit
            )
        except handover.UntrustedFile as e:
            if not mine.get(f"refused_{name}"):
                set_container(alloc, self.agent_id, **{f"refused_{name}": True})
                write_line(alloc, f"[slurm] not reading the job's {name}: {e}")
                log.warning("allocation %s: not reading its %s: %s", alloc.id, name, e)
            raise FileNotFoundError(name) from e

    def _exit_status(self, alloc: Allocation) -> int | None:
        try:
            return cli.parse_status(self._read(alloc, cli.STATUS_FILE).decode(errors="replace"))
        except OSError:
            return None

    def _ship_logs(self, alloc: Allocation) -> None:
        """The job's complete new output lines into the task's logs; the offset lives with the
        allocation, so a restarted master neither loses nor repeats lines."""
        offset = int(containers_of(alloc).get(self.agent_id, {}).get("log_offset") or 0)
        try:
            chunk = self._read(alloc, cli.OUTPUT_FILE, offset, LOG_CHUNK_BYTES)
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        lines = chunk[: end + 1].decode("utf-8", errors="replace").splitlines()
        now = utcnow().isoformat()
        entries = [
            {"allocation_id": alloc.id, "stream": "stdout", "timestamp": now, "line": line}
            for line in lines
        ]
        set_container(alloc, self.agent_id, log_offset=offset + end + 1)
        ingest_agent_logs(self.agent_id, entries)
