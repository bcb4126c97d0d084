"""When an interactive task is idle (pure): Determined's `idle_timeout` and
`notebook_idle_type`, read from what Jupyter says of its kernels and terminals and what the
proxy saw. A kernel that is busy always makes its notebook in use, whatever the type.

- `kernels_or_terminals` (the default): in use while any kernel or terminal is open;
- `kernel_connections`: in use while any kernel has a client connected;
- `activity`: in use until no request, kernel or terminal has been active for the timeout
  (Jupyter's own `last_activity`, and every byte through the proxy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JupyterView:
    """What a notebook's Jupyter said (its `/api/kernels`, `/api/terminals`, `/api/status`)."""

    kernels: tuple[dict[str, Any], ...]
    terminals: int
    last_activity: float  # Jupyter's status, seconds since the epoch


def in_use(idle_type: str, view: JupyterView) -> bool:
    """True when the notebook is in use now (its idle clock restarts)."""
    if any(k.get("execution_state") in ("busy", "starting") for k in view.kernels):
        return True
    if idle_type == "kernels_or_terminals":
        return bool(view.kernels) or view.terminals > 0
    if idle_type == "kernel_connections":
        return any(int(k.get("connections") or 0) > 0 for k in view.kernels)
    return False


def idle_for(
    idle_type: str, view: JupyterView, *, now: float, since: float, last_in_use: float,
    proxy_last: float,
) -> float:  # fmt: skip
    """Seconds the notebook has been idle (0 when in use now). `since`: when it started;
    `last_in_use`: the last check that found it in use."""
    if in_use(idle_type, view):
        return 0.0
    last = max(since, last_in_use)
    if idle_type == "activity":
        last = max(last, view.last_activity, proxy_last)
    return max(0.0, now - last)


def shell_idle_for(open_sessions: int, *, now: float, since: float, proxy_last: float) -> float:
    """A shell is in use while a terminal session is open through the proxy; otherwise idle
    since the later of its start and the last byte through the proxy."""
    if open_sessions > 0:
        return 0.0
    return max(0.0, now - max(since, proxy_last))


def tensorboard_idle_for(*, now: float, since: float, proxy_last: float) -> float:
    """A TensorBoard is idle since the later of its start and the last byte through the proxy
    (an open TensorBoard page reloads its data every 30 s, so an open tab keeps it in use)."""
    return max(0.0, now - max(since, proxy_last))
