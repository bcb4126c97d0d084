"""The kicker: runs the scheduling pass in a background thread whenever something changes."""

from __future__ import annotations

import logging
import threading

from flask import Flask

from master.context import master_state

log = logging.getLogger("detlab.scheduler")


class Kicker:
    """Runs the scheduling pass in a background thread whenever asked, coalescing requests."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._event = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schedule-kicker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        self._event.set()

    def stop(self) -> None:
        self._stop.set()
        self._event.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._event.wait()
            self._event.clear()
            if self._stop.is_set():
                return
            try:
                from master.services.queue.scheduling import schedule_pass

                with self.app.app_context():
                    schedule_pass()
            except Exception:
                log.exception("scheduling pass failed")


def request_schedule() -> None:
    """Run a scheduling pass soon (at once, in the kicker's thread); no-op without background."""
    kicker = master_state().scheduling.kicker
    if kicker is not None:
        kicker.kick()
