"""The Kubernetes RM at scale, simulated against the fake API server (docs/kubernetes.md).

    PYTHONPATH=. .venv/bin/python -m tests.k8s.scale_sim [NODES] [PODS]

Builds NODES nodes (8 GPUs each) and PODS running pods (half detlab's, half not; no processes),
then measures what the RM's side costs: a full re-list of nodes and pods through the official
client into the informer caches (time, bytes, memory), one capacity computation over the cached
objects (what each scheduling pass does, with no API call), and the watch events one pod's life
produces. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from kubernetes import client, config

from master.rm.k8s.capacity import free_slots
from master.rm.k8s.config import KubernetesConfig
from master.rm.k8s.informer import Informer
from tests.k8s.fake_apiserver import FakeApiServer


def _pod(i: int, node: str, ours: bool) -> dict[str, Any]:
    labels = {"detlab.ai/resource-manager": "default", "detlab.ai/allocation": f"a{i}"}
    return {
        "metadata": {"name": f"p{i}", "labels": labels if ours else {"app": "other"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def main(nodes: int, pods: int) -> dict[str, Any]:
    with FakeApiServer(token=None) as srv:
        fc = srv.cluster
        fc.run_processes = False
        for n in range(nodes):
            fc.add_node(f"n{n}", gpus=8, cpus=64)
        for i in range(pods):
            fc.create_pod("detlab", _pod(i, f"n{i % nodes}", ours=i % 2 == 0))
        path = Path(tempfile.mkdtemp()) / "kubeconfig"
        api = config.new_client_from_config(str(srv.kubeconfig(path)))
        core = client.CoreV1Api(api)
        events = 0

        def count(kind: str, obj: dict[str, Any]) -> None:
            nonlocal events
            events += 1

        tracemalloc.start()
        t0 = time.perf_counter()
        node_inf = Informer("nodes", core.list_node, count)
        pod_inf = Informer("pods", core.list_pod_for_all_namespaces, count)
        node_inf._relist()
        pod_inf._relist()
        relist_s = time.perf_counter() - t0
        cache_mb = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        node_bytes = len(core.list_node(_preload_content=False).data)
        pod_bytes = len(core.list_pod_for_all_namespaces(_preload_content=False).data)
        used = {f"n{i % nodes}": {0} for i in range(0, pods, 2)}
        t0 = time.perf_counter()
        views = free_slots(
            KubernetesConfig(),
            "default",
            node_inf.objects(),
            pod_inf.objects(),
            used,
            {"default"},
            "default",
        )
        capacity_ms = (time.perf_counter() - t0) * 1000
        # One pod's life as the RM's watch sees it: created, bound, running, ended, deleted.
        rv = fc.rv
        fc.run_processes = True
        fc.create_job(
            "detlab",
            {
                "metadata": {"name": "one"},
                "spec": {
                    "parallelism": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "c", "command": [sys.executable, "-c", "pass"]}
                            ],
                        }
                    },
                },
            },
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not fc.list("Job", "detlab")[0][0]["status"].get(
            "conditions"
        ):
            time.sleep(0.05)
        fc.delete_job("detlab", "one", "Background")
        time.sleep(0.5)
        life = [c for c in fc.changes_since(rv) or [] if c.kind == "Pod"]
        api.close()
        return {
            "nodes": nodes,
            "pods": pods,
            "relist_s": round(relist_s, 2),
            "node_list_kb": node_bytes // 1024,
            "pod_list_kb": pod_bytes // 1024,
            "informer_cache_mb": round(cache_mb, 1),
            "capacity_ms": round(capacity_ms, 1),
            "free_views": len(views),
            "watch_events_per_pod": len(life),
            "relist_events": events,
        }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    p = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    print(json.dumps(main(n, p)))
