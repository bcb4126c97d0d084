"""A hand-written launcher like Determined's custom-launcher examples: one worker per slot of
this container, wired up from ClusterInfo (container_addrs, container_rank, slot_ids)."""

import os
import socket
import subprocess
import sys

import determined as det

info = det.get_cluster_info()
assert info is not None
print(f"container_addrs {info.container_addrs} rank {info.container_rank}", flush=True)
assert info.container_addrs, "ClusterInfo.container_addrs is empty"
n = len(info.slot_ids)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
procs = []
for local_rank in range(n):
    env = dict(os.environ, MY_RANK=str(local_rank), MY_SIZE=str(n), MY_PORT=str(port))
    cmd = [sys.executable, "-m", "determined.launch.wrap_rank", "MY_RANK", "--"]
    procs.append(subprocess.Popen([*cmd, sys.executable, "worker.py"], env=env))
sys.exit(max(p.wait() for p in procs))
