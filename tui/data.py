"""The TUI's data layer: background pollers over the shared `Client`, and pure formatting helpers.

Nothing here touches the screen. Every network call runs in a worker thread (`Poller`); results go
back to the UI thread with `App.call_from_thread`. The API object is a `tui.api.ClusterAPI`: the
real `harness.api.Client`, or the fixed-data fake (`tui.fake.FakeClient`) in tests and snapshots.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.text import Text

if TYPE_CHECKING:
    from textual.app import App

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
def parse_time(iso: str | None) -> float | None:
    """An ISO 8601 time (the master's, UTC) as a POSIX timestamp; None when missing or bad."""
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
    return Text(state, style=STATE_STYLE.get(state, ""), no_wrap=True)


def progress_text(progress: float | None, width: int = 8) -> Text:
    if progress is None:
        return Text("-")
    p = max(0.0, min(1.0, float(progress)))
    return bar(p * 100, width, label=False) + Text(f"{p * 100:4.0f}%")


def trial_display_state(trial: JSON) -> str:
    return trial.get("display_state") or trial.get("state") or "-"


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
    """Per-key bounded history of samples (e.g. a GPU's utilisation for its sparkline)."""

    def __init__(self, length: int = 30) -> None:
        self.length = length
        self._data: dict[Any, deque[float]] = {}

    def add(self, key: Any, value: float | None) -> None:
        if value is None:
            return
        self._data.setdefault(key, deque(maxlen=self.length)).append(float(value))

    def get(self, key: Any) -> list[float]:
        return list(self._data.get(key, ()))


# ---- the API and freshness --------------------------------------------------------------------
class Freshness:
    """When the master last answered, and the error since, for the header's indicator."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.last_ok: float | None = None
        self.error: str | None = None
        self.error_since: float | None = None

    def ok(self) -> None:
        self.last_ok = self.clock()
        self.error = None
        self.error_since = None

    def failed(self, message: str) -> None:
        self.error = message
        if self.error_since is None:
            self.error_since = self.clock()

    @property
    def reachable(self) -> bool:
        return self.error is None


class Poller:
    """Calls `fetch()` in a worker thread every `interval` seconds and hands the result to
    `apply(result)` on the UI thread. `poke()` refreshes now. Never two fetches at once, so a slow
    master never piles up requests; failures go to `on_error` and the loop retries.
    """

    def __init__(
        self,
        app: App,
        name: str,
        fetch: Callable[[], Any],
        apply: Callable[[Any], None],
        interval: float = 2.0,
        on_error: Callable[[BaseException], None] | None = None,
        active: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.fetch = fetch
        self.apply = apply
        self.interval = interval
        self.on_error = on_error
        self.active = active or (lambda: True)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.fetch_seconds: deque[float] = deque(maxlen=200)  # worker time, for the benchmark
        self.rounds = 0
        self._thread: threading.Thread | None = None

    def start(self) -> Poller:
        """Start the loop (once) in a daemon thread: quitting the app never waits for a fetch."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name=f"poll:{self.name}", daemon=True
            )
            self._thread.start()
        return self

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _deliver(self, fn: Callable[..., None], *args: Any) -> bool:
        if self._stop.is_set() or not app_alive(self.app):
            self._stop.set()
            return False
        try:
            self.app.call_from_thread(fn, *args)
        except BaseException:  # noqa: BLE001 - the app is shutting down (RuntimeError, Cancelled)
            self._stop.set()
            return False
        return True

    def _guarded_apply(self, result: Any) -> None:
        if not self._stop.is_set():
            self.apply(result)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.active():
                self._wake.wait(0.1)  # not visible: look again soon, fetch nothing
                self._wake.clear()
                continue
            t0 = time.perf_counter()
            try:
                result = self.fetch()
            except Exception as e:  # noqa: BLE001 - reported, then retried
                if self.on_error is not None and not self._deliver(self.on_error, e):
                    return
            else:
                self.fetch_seconds.append(time.perf_counter() - t0)
                self.rounds += 1
                if not self._deliver(self._guarded_apply, result):
                    return
            # a slow or huge answer stretches the interval: refreshing never eats the CPU
            self._wake.wait(max(self.interval, 10 * (time.perf_counter() - t0)))
            self._wake.clear()


def app_alive(app: App) -> bool:
    """False once the app is closing (calling into it then only leaks a coroutine)."""
    return bool(getattr(app, "_running", True)) and not getattr(app, "_closing", False)
