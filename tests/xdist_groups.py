"""Which tests share a pytest-xdist worker (`--dist loadgroup`), and the ports each worker uses.

Under `-n N` the tests of one group run one after another on one worker, never beside each
other; every other test goes to whichever worker is free. A test belongs to a group when it
uses something of which the machine has one and that the tests treat as theirs alone:

- `slurm`: the one-node test Slurm; its autouse fixture cancels *every* job left in the queue
  before each test (tests/slurm/conftest.py), which would cancel a neighbour's jobs.
- `docker`: the Docker engine; its tests start containers that fill the node's memory and CPU
  (the OOM and CPU-limit tests) and count the containers of their agent.
- `tmux`: the terminal tests; the newcomer's session loads every core on purpose.
- `solo`: tests that time the master (a 4xx within 1 s under a hostile request).

Nothing is dropped or skipped: the grouping only orders the tests. Without `--dist loadgroup`
(a plain run, or `-n` with another mode) the markers are inert.
"""

from __future__ import annotations

import os
import socket

# Path prefixes (relative to the repository root, as in a node id) -> group.
PATH_GROUPS: tuple[tuple[str, str], ...] = (
    ("tests/slurm/", "slurm"),
    ("tests/integration/test_request_memory.py", "solo"),
)
# Markers -> group; a path rule wins over a marker.
MARKER_GROUPS: tuple[tuple[str, str], ...] = (("docker", "docker"), ("tmux", "tmux"))


def group_for(nodeid: str, markers: set[str]) -> str | None:
    """The group a test belongs to, or None (any worker, beside anything)."""
    for prefix, group in PATH_GROUPS:
        if nodeid.startswith(prefix):
            return group
    for marker, group in MARKER_GROUPS:
        if marker in markers:
            return group
    return None


# Ports: a test's master and agents probe a free port and bind it a second later. Two workers
# probing with bind(0) at once can be handed the same port in that gap, so each worker takes its
# ports from a range of its own below Linux's ephemeral range (32768-60999), which bind(0) never
# hands out. A plain run (no worker) keeps bind(0).
PORT_BASE = 20000
PORTS_PER_WORKER = 1000
MAX_WORKERS = 12

_next: dict[int, int] = {}  # worker index -> offset of the next port to try


def worker_index(env: dict[str, str] | None = None) -> int | None:
    """This xdist worker's index (`gw3` -> 3), or None outside xdist."""
    name = (os.environ if env is None else env).get("PYTEST_XDIST_WORKER", "")
    if name.startswith("gw") and name[2:].isdigit():
        return int(name[2:])
    return None


def port_range(index: int) -> range:
    if not 0 <= index < MAX_WORKERS:
        raise ValueError(f"xdist worker gw{index}: at most {MAX_WORKERS} workers (-n)")
    start = PORT_BASE + index * PORTS_PER_WORKER
    return range(start, start + PORTS_PER_WORKER)


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def worker_port(index: int) -> int:
    """The next port of this worker's range that binds now, round-robin so a port just given
    out (its process maybe still starting) is the last to be given again."""
    ports = port_range(index)
    for _ in ports:
        offset = _next.get(index, 0)
        _next[index] = (offset + 1) % len(ports)
        if bindable(ports[offset]):
            return ports[offset]
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} (xdist worker gw{index})")
