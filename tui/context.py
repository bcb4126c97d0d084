"""What every screen is given when it is made: the API and the app's settings.

Screens get this object instead of reaching into the app (they never import `tui.app`); the app
hands the same one to each screen it opens.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from tui.api import JSON, ClusterAPI


@dataclass
class Context:
    api: ClusterAPI
    clock: Callable[[], float] = time.time
    readonly: bool = False
    max_log_lines: int = 50_000
    interval_scale: float = 1.0  # every refresh interval is multiplied by this (tests: fast)
    # Who we are (GET /me), filled in by the app's first refresh; None until then (the master
    # then decides what we may do).
    user: JSON | None = field(default=None)

    # What views last showed (an experiment, a trial), so that opening one again shows it at once
    # while a worker fetches the current state. UI thread only.
    shown: OrderedDict[Hashable, Any] = field(default_factory=OrderedDict)

    def remember(self, key: Hashable, value: Any, keep: int = 32) -> None:
        self.shown[key] = value
        self.shown.move_to_end(key)
        while len(self.shown) > keep:
            self.shown.popitem(last=False)

    @property
    def master_url(self) -> str:
        return str(getattr(self.api, "master", "?"))
