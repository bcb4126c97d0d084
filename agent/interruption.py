"""Watch the cloud's spot/preemptible interruption notice and tell the master once.

AWS: `.../meta-data/spot/instance-action` answers 404 until a notice, then 200 with JSON.
GCP: `.../instance/preempted` answers "FALSE" until preempted, then "TRUE" (header
`Metadata-Flavor: Google`). Anything else that answers 200 with a body other than FALSE counts
as a notice, so a test (or another cloud) can point `--interruption-url` at its own server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

import requests

log = logging.getLogger(__name__)


def notice(url: str, timeout: float = 2.0) -> str | None:
    """The notice's text when the instance is being interrupted, else None."""
    headers = {"Metadata-Flavor": "Google"}
    if "/latest/meta-data/" in url:  # EC2 IMDSv2: a session token first (ignored if refused)
        parts = urlsplit(url)
        try:
            r = requests.put(
                f"{parts.scheme}://{parts.netloc}/latest/api/token",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
                timeout=timeout,
            )
            if r.ok:
                headers["X-aws-ec2-metadata-token"] = r.text
        except requests.RequestException:
            pass
    try:
        r = requests.get(url, headers=headers, timeout=timeout)
    except requests.RequestException as e:
        log.debug("interruption notice unreadable: %s", e)
        return None
    body = r.text.strip()
    if r.status_code != 200 or body.upper() in ("", "FALSE"):
        return None
    return body or "interrupted"


class InterruptionWatcher:
    """Polls `url` every `interval` seconds; calls `on_notice(text)` once, then stops."""

    def __init__(
        self,
        url: str,
        on_notice: Callable[[str], object],
        stopping: threading.Event,
        interval: float = 5.0,
    ) -> None:
        self.url = url
        self.on_notice = on_notice
        self.stopping = stopping
        self.interval = interval
        self.seen: str | None = None
        self._thread = threading.Thread(target=self._run, name="interruption", daemon=True)

    def start(self) -> InterruptionWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self.stopping.wait(self.interval):
            text = notice(self.url)
            if text is None:
                continue
            self.seen = text
            log.warning("interruption notice (%s): asking the master to requeue our trials", text)
            while not self.stopping.is_set():
                try:
                    self.on_notice(text)
                    return
                except Exception as e:  # the master may be briefly down: keep telling it
                    log.warning("cannot report the interruption (retrying): %s", e)
                    self.stopping.wait(1.0)
