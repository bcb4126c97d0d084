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


class PlainProgress:
    """Progress as plain lines when stderr is not a terminal (a pipe, a CI log): one line per
    10 % step and on every state change, so a log file still shows the run advancing."""

    STEP = 0.1

    def __init__(self, exp_id: int, out: Callable[[str], None]) -> None:
        self.exp_id = exp_id
        self.out = out
        self.last: tuple[int, str] | None = None
        out(
            "(not a terminal: progress is printed as plain lines; run in a terminal for a "
            "progress bar)"
        )

    def update(self, progress: float, state: str) -> None:
        bucket = int(min(max(progress, 0.0), 1.0) / self.STEP + 1e-9)
        if (bucket, state) != self.last:
            self.last = (bucket, state)
            self.out(f"experiment {self.exp_id}: {progress * 100:.0f}% ({state})")


def follow_again_hint(exp_id: int) -> str:
    return (
        f"stopped following; experiment {exp_id} keeps running on the cluster. Follow it again: "
        f"det experiment logs {exp_id} -f (stop it: det experiment kill {exp_id})"
    )


def follow_experiment(
    client: Client,
    exp_id: int,
    *,
    show_progress: bool = True,
    show_states: bool = True,
    interval: float = 1.0,
) -> str:
    """Follow until the experiment reaches a terminal state; returns that state.

    Ctrl-C stops following only: it says so (the experiment keeps running) and re-raises."""
    try:
        return _follow(client, exp_id, show_progress, show_states, interval)
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(f"\n{follow_again_hint(exp_id)}", file=sys.stderr)
        raise


def _follow(
    client: Client, exp_id: int, show_progress: bool, show_states: bool, interval: float
) -> str:
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

    plain = PlainProgress(exp_id, say) if show_progress and not console.is_terminal else None

    with progress:
        task = progress.add_task("", total=1.0, exp_id=exp_id, state="")
        while True:
            detail = client.describe_experiment(exp_id)
            exp, trials = detail["experiment"], detail.get("trials") or []
            printed = tail.poll([t["id"] for t in trials])
            # A state is told once the lines before it are out: the end states (STOPPING_*,
            # terminal) of the experiment and of each trial wait for the logs to drain.
            if exp["state"] != exp_state and not _ending(exp["state"]):
                exp_state = exp["state"]
                say(f"Experiment {exp_id} is {exp_state}")
            for t in trials:
                shown = trial_state(t)
                if _ending(shown) and t["id"] not in tail.done:
                    continue
                if trial_states.get(t["id"]) != shown:
                    trial_states[t["id"]] = shown
                    say(f"Trial {t['id']} is {shown}")
            state = exp["state"]
            fraction = float(exp.get("progress") or 0.0)
            progress.update(task, completed=fraction, state=state)
            if state in TERMINAL_STATES:
                ended_at = ended_at or time.monotonic()
                all_done = all(t["id"] in tail.done for t in trials)
                if all_done or time.monotonic() - ended_at > DRAIN_GRACE:
                    if state == "COMPLETED":
                        progress.update(task, completed=1.0)
                        fraction = 1.0
                    if plain:
                        plain.update(fraction, state)
                    say(f"Experiment {exp_id} is {state}")
                    return str(state)
            elif plain and not _ending(state):  # the end state comes after the last lines
                plain.update(fraction, state)
            if not printed:
                time.sleep(interval)


def _ending(state: str | None) -> bool:
    return bool(state) and (str(state).startswith("STOPPING_") or state in TERMINAL_STATES)
