"""The TUI's data layer: background pollers over the shared `Client`, and pure formatting helpers.

Nothing here touches the screen or the network. The snapshots (`ClusterData`, `Freshness`) are
immutable: the app publishes new ones through reactive attributes (tui/app.py) and screens build
their rows from them in Textual workers. The API object is a `tui.api.ClusterAPI`: the real
`harness.api.Client`, or the fixed-data fake (`tui.fake.FakeClient`) in tests and `--demo`.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.text import Text

JSON = dict[str, Any]

STATE_STYLE = {
    "ACTIVE": "green",
    "RUNNING": "bold green",
    "STARTING": "cyan",
    "QUEUED": "yellow",
    "SCHEDULED": "green",
    "PAUSED": "magenta",
    "COMPLETED": "blue",
    "CANCELED": "dim",
    "ERROR": "bold red",
    "LOST": "bold red",
    "DISABLED": "dim yellow",
}
SPARK = "▁▂▃▄▅▆▇█"


# ---- pure helpers ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=32768)
def parse_time(iso: str | None) -> float | None:
    """An ISO 8601 time (the master's, UTC) as a POSIX timestamp; None when missing or bad.
    Cached: every refresh brings the same times again (10,000 jobs' submission times)."""
    if not iso:
        return None
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def fmt_duration(seconds: float | None) -> str:
    """`45s`, `3m05s`, `2h07m`, `3d04h`; `-` when unknown."""
    if seconds is None or seconds != seconds:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def fmt_age(iso: str | None, now: float) -> str:
    t = parse_time(iso)
    return "-" if t is None else fmt_duration(now - t)


def fmt_number(value: Any, digits: int = 4) -> str:
    """A metric value, short: `0.1235`, `1.2e-05`, `12345`; strings (`NaN`) as they are."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) < 10 ** -(digits - 1) or abs(value) >= 10**6):
        return f"{value:.{max(1, digits - 2)}e}"
    return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}"


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "-"
    return f"{mb / 1024:.1f}G" if mb >= 1024 else f"{int(mb)}M"


def load_style(percent: float | None) -> str:
    """Colour of a utilisation figure: green when busy, yellow in between, red when saturated."""
    if percent is None:
        return "dim"
    if percent >= 90:
        return "red"
    if percent >= 60:
        return "yellow"
    if percent >= 10:
        return "green"
    return "bright_black"


def bar(percent: float | None, width: int = 10, label: bool = True) -> Text:
    """A horizontal bar `█████▌    ` (eighth blocks) coloured by load, with the percentage."""
    text = Text(no_wrap=True, overflow="crop")
    if percent is None:
        text.append("·" * width, "dim")
        if label:
            text.append("    -")
        return text
    p = min(100.0, max(0.0, float(percent)))
    eighths = round(p / 100 * width * 8)
    full, part = divmod(eighths, 8)
    body = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part and full < width else "")
    text.append(body.ljust(width, " "), load_style(p))
    if label:
        text.append(f"{p:4.0f}%", load_style(p))
    return text


def sparkline(values: Sequence[float | None], width: int | None = None) -> str:
    """Unicode block sparkline of the last `width` values, scaled to their own min..max."""
    vals = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    if width is not None:
        vals = resample(vals, width)
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = hi - lo
    if span <= 0:
        return SPARK[3] * len(vals)
    return "".join(SPARK[min(7, int((v - lo) / span * 7.999))] for v in vals)


def resample(values: Sequence[float], n: int) -> list[float]:
    """At most `n` values: the means of `n` equal buckets (keeps short lists as they are)."""
    if n <= 0:
        return []
    if len(values) <= n:
        return list(values)
    out = []
    step = len(values) / n
    for i in range(n):
        a, b = int(i * step), max(int(i * step) + 1, int((i + 1) * step))
        chunk = values[a:b]
        out.append(sum(chunk) / len(chunk))
    return out


def styled_state(state: str | None) -> Text:
    state = state or "-"
    style = STATE_STYLE.get(state, "yellow" if state.startswith("waiting") else "")
    return Text(state, style=style, no_wrap=True)


def progress_text(progress: float | None, width: int = 8) -> Text:
    if progress is None:
        return Text("-")
    p = max(0.0, min(1.0, float(progress)))
    return bar(p * 100, width, label=False) + Text(f"{p * 100:4.0f}%")


def trial_display_state(trial: JSON) -> str:
    """What a trial is doing: its display state, or what it waits for (`waiting_for`, e.g. an
    ASHA trial that finished its rung waits for promotion instead of being QUEUED)."""
    if trial.get("waiting_for"):
        return f"waiting for {trial['waiting_for']}"
    return trial.get("display_state") or trial.get("state") or "-"


def latest_metric(latest: Any, metric: str | None) -> Any:
    """The searcher metric's value in a trial's latest validation (a dict of metrics); a bare
    number (older masters, the fake) as it is."""
    if not isinstance(latest, dict):
        return latest
    if metric:
        for name in (metric, metric.removeprefix("validation_"), f"validation_{metric}"):
            if name in latest:
                return latest[name]
    return None


def metrics_text(latest: Any, metric: str | None, others: int = 2) -> str:
    """A validation's metrics, short: the searcher metric first, then `others` more numbers,
    `validation_loss 0.2310 · accuracy 0.9120 (+3 more) at step 400`; never a JSON dict."""
    if not isinstance(latest, dict):
        return fmt_number(latest)
    values = {k: v for k, v in latest.items() if k != "steps_completed"}
    first = next(
        (n for n in (metric, (metric or "").removeprefix("validation_")) if n and n in values),
        None,
    )
    names = ([first] if first else []) + [k for k in values if k != first]
    numeric = [n for n in names if isinstance(values[n], int | float)]
    shown = numeric[: 1 + others]
    parts = [f"{n} {fmt_number(values[n])}" for n in shown]
    text = " · ".join(parts) if parts else "-"
    if len(values) > len(shown):
        text += f" (+{len(values) - len(shown)} more)"
    if isinstance(latest.get("steps_completed"), int):
        text += f" at step {latest['steps_completed']}"
    return text


def job_action_allowed(job_user: str | None, user: JSON | None) -> bool:
    """Owner or admin may change a job; when we don't know who we are yet, let the master say."""
    if not user:
        return True
    return bool(user.get("admin")) or job_user == user.get("username")


def matches(needle: str, haystack: str) -> bool:
    return needle.lower() in haystack.lower()


def highlight(line: str, needle: str, style: str = "reverse yellow") -> Text:
    """`line` with every case-insensitive occurrence of `needle` highlighted."""
    text = Text(line, no_wrap=True)
    if needle:
        text.highlight_words([needle], style, case_sensitive=False)
    return text


ERROR_MARKERS = ("Traceback (most recent call last)", "ERROR", "Error:", "Exception")


def is_error_line(line: str) -> bool:
    return any(m in line for m in ERROR_MARKERS)


class History:
    """Per-key bounded history of samples (e.g. a GPU's utilisation for its sparkline).

    Written by the app's refresh worker, copied for readers: a lock keeps a copy whole."""

    def __init__(self, length: int = 30) -> None:
        self.length = length
        self._data: dict[Any, deque[float]] = {}
        self._lock = threading.Lock()

    def add(self, key: Any, value: float | None) -> None:
        if value is None:
            return
        with self._lock:
            self._data.setdefault(key, deque(maxlen=self.length)).append(float(value))

    def get(self, key: Any) -> list[float]:
        with self._lock:
            return list(self._data.get(key, ()))

    def snapshot(self) -> dict[str, list[float]]:
        with self._lock:
            return {str(k): list(v) for k, v in self._data.items()}


# ---- what the master said, as immutable snapshots ------------------------------------------------
@dataclass(frozen=True)
class Freshness:
    """When the master last answered, and the error since (the header's indicator)."""

    last_ok: float | None = None
    error: str | None = None
    error_since: float | None = None

    def ok(self, now: float) -> Freshness:
        return Freshness(last_ok=now)

    def failed(self, message: str, now: float) -> Freshness:
        since = self.error_since if self.error_since is not None else now
        return Freshness(self.last_ok, message, since)

    @property
    def reachable(self) -> bool:
        return self.error is None


@dataclass(frozen=True, eq=False)  # eq=False: never compared field by field (10,000 jobs)
class ClusterData:
    """One answer of the app-wide refresh (agents, job queue, provider pools, who we are).

    Raw JSON only: each screen builds its own rows from it (tui/screens/*), off the UI thread.
    `history` is each slot's recent utilisation (a copy, so readers need no lock).
    """

    agents: list[JSON]
    pools: list[JSON] | None
    queue_error: str | None
    summary: dict[str, int | None]
    user: JSON
    history: dict[str, list[float]] = field(default_factory=dict)
    elastic: list[JSON] = field(default_factory=list)  # provider pools (elastic agents)


def summarize(agents: list[JSON], pools: list[JSON] | None) -> dict[str, int | None]:
    """Header figures: slots used/total (ACTIVE agents), queued jobs, agents up."""
    active = [a for a in agents if a.get("state") == "ACTIVE"]
    slots = [s for a in active for s in a.get("slots", []) if s.get("enabled", True)]
    queued = None
    if pools is not None:
        queued = sum(1 for p in pools for j in p.get("jobs", []) if j.get("state") == "QUEUED")
    return {
        "slots_used": sum(1 for s in slots if s.get("allocation_id")),
        "slots_total": len(slots),
        "queued": queued,
        "agents_up": len(active),
        "agents_total": len(agents),
    }


def slot_key(agent: JSON, slot: JSON) -> str:
    return f"{agent['id']}/{slot.get('index')}"


# ---- what may be done to an experiment in which state ------------------------------------------
# The master's table (master/states.py ACTIONS; tests/tui/test_format.py checks they agree): an
# action that cannot be performed is not offered.
EXPERIMENT_ACTIONS: dict[str, frozenset[str]] = {
    "pause": frozenset({"ACTIVE"}),
    "activate": frozenset({"PAUSED"}),
    "kill": frozenset({"ACTIVE", "PAUSED", "STOPPING_COMPLETED", "STOPPING_CANCELED"}),
}


def experiment_action_allowed(action: str, state: str | None) -> bool:
    """Whether `action` (pause, activate, kill) applies to an experiment in `state`; an unknown
    state (an older master) lets the master decide."""
    allowed = EXPERIMENT_ACTIONS.get(action)
    return allowed is None or state is None or state in allowed
