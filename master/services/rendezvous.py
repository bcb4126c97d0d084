"""Where the containers of a multi-container trial find each other (in memory: one master).

A container whose wait fails (say the master restarted) simply posts again.
"""

from __future__ import annotations

import threading

_store: dict[str, dict[int, str]] = {}
_lock = threading.Lock()


def key(alloc_id: str) -> str:
    return f"rendezvous:{alloc_id}"


def post(alloc_id: str, rank: int, address: str) -> None:
    with _lock:
        _store.setdefault(alloc_id, {})[rank] = address


def addresses(alloc_id: str) -> dict[int, str]:
    with _lock:
        return dict(_store.get(alloc_id, {}))


def forget(alloc_id: str) -> None:
    with _lock:
        _store.pop(alloc_id, None)
