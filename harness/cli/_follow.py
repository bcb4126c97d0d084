"""Watch an experiment: state changes, a progress bar and its trials' logs, until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from detlab.constants import TERMINAL_STATES
from harness.api.client import Client
from harness.cli._common import trial_state

DRAIN_GRACE = 30.0  # after the experiment ends, how long to wait for trials' last log lines


class LogTail:
    """Polls the logs of every trial of an experiment without blocking on any one of them."""

    def __init__(self, client: Client, emit: Callable[[int, dict[str, Any]], None]) -> None:
        self.client = client
        self.emit = emit
        self.after: dict[int, int] = {}
        self.done: set[int] = set()

    def poll(self, trial_ids: list[int]) -> int:
        """Print new lines of each unfinished trial; returns how many were printed."""
        printed = 0
        for tid in sorted(trial_ids):
            if tid in self.done:
                continue
            page = self.client.trial_logs(tid, after=self.after.get(tid, 0), limit=1000)
            logs = page.get("logs") or []
            for log in logs:
                self.emit(tid, log)
            printed += len(logs)
            if logs:
                self.after[tid] = int(logs[-1].get("seq", self.after.get(tid, 0)))
            elif page.get("done"):
                self.done.add(tid)
        return printed


def print_log_line(tid: int, log: dict[str, Any], prefix: bool = True) -> None:
    line = str(log.get("line", "")).rstrip("\n")
    sys.stdout.write(f"[trial {tid}] {line}\n" if prefix else f"{line}\n")
    sys.stdout.flush()


def follow_experiment(
    client: Client,
    exp_id: int,
    *,
    show_progress: bool = True,
    show_states: bool = True,
    interval: float = 1.0,
) -> str:
    """Follow until the experiment reaches a terminal state; returns that state."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]experiment {task.fields[exp_id]}[/] {task.fields[state]}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not show_progress or not console.is_terminal,
        transient=False,
    )
    tail = LogTail(client, print_log_line)
    exp_state: str | None = None
    trial_states: dict[int, str] = {}
    ended_at: float | None = None

    def say(msg: str) -> None:
        if show_states:
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()

    with progress:
        task = progress.add_task("", total=1.0, exp_id=exp_id, state="")
        while True:
            detail = client.describe_experiment(exp_id)
            exp, trials = detail["experiment"], detail.get("trials") or []
            if exp["state"] != exp_state:
                exp_state = exp["state"]
                say(f"Experiment {exp_id} is {exp_state}")
            for t in trials:
                shown = trial_state(t)
                if trial_states.get(t["id"]) != shown:
                    trial_states[t["id"]] = shown
                    say(f"Trial {t['id']} is {shown}")
            progress.update(task, completed=float(exp.get("progress") or 0.0), state=exp_state)
            printed = tail.poll([t["id"] for t in trials])
            if exp_state in TERMINAL_STATES:
                ended_at = ended_at or time.monotonic()
                all_done = all(t["id"] in tail.done for t in trials)
                if all_done or time.monotonic() - ended_at > DRAIN_GRACE:
                    if exp_state == "COMPLETED":
                        progress.update(task, completed=1.0)
                    return exp_state
            if not printed:
                time.sleep(interval)
