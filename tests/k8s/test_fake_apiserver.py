"""The fake Kubernetes API server, driven by the official `kubernetes` client."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.cluster import wait_for
from tests.k8s.fake_apiserver import FakeApiServer
from tests.k8s.fake_objects import pod_requests, quantity

NS = "detlab"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeApiServer, client.ApiClient]]:
    with FakeApiServer(grace_s=2.0) as srv:
        api = config.new_client_from_config(str(srv.kubeconfig(tmp_path / "kubeconfig")))
        yield srv, api
        api.close()


def _job(name: str, argv: list[str], pods: int = 1, gpus: int = 0) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "t", "job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "detlab",
                            "command": argv,
                            "env": [{"name": "GREETING", "value": "hi"}],
                            "resources": {"limits": limits},
                        }
                    ],
                },
            },
        },
    }


def test_quantities_and_requests() -> None:
    assert quantity("500m") == 0.5
    assert quantity("2") == 2
    assert quantity("1Gi") == 1024**3
    pod = {
        "spec": {
            "containers": [
                {
                    "resources": {
                        "limits": {"nvidia.com/gpu": "2", "cpu": "4"},
                        "requests": {"cpu": "1"},
                    }
                }
            ]
        }
    }
    assert pod_requests(pod) == {"nvidia.com/gpu": 2.0, "cpu": 1.0}


def test_nodes_jobs_pods_logs(fake: tuple[FakeApiServer, client.ApiClient]) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=2, cpus=4)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "2"
    script = "import os; print(os.environ['GREETING'], os.environ['HOSTNAME'])"
    job = batch.create_namespaced_job(NS, _job("j1", [sys.executable, "-c", script], gpus=1))
    assert job.metadata.uid
    pods = core.list_namespaced_pod(NS, label_selector="job-name=j1").items
    assert len(pods) == 1 and pods[0].spec.node_name == "n1"
    name = pods[0].metadata.name
    wait_for(lambda: core.read_namespaced_pod(name, NS).status.phase == "Succeeded", 30)
    pod = core.read_namespaced_pod(name, NS)
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0
    assert core.read_namespaced_pod_log(name, NS).strip() == f"hi {name}"
    done = batch.read_namespaced_job("j1", NS)
    assert done.status.succeeded == 1 and done.status.conditions[0].type == "Complete"


def test_a_pod_waits_unschedulable_until_a_gpu_frees(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        NS, _job("long", [sys.executable, "-c", "import time; time.sleep(60)"], gpus=1)
    )
    batch.create_namespaced_job(NS, _job("next", [sys.executable, "-c", "pass"], gpus=1))
    (waiting,) = core.list_namespaced_pod(NS, label_selector="job-name=next").items
    assert waiting.status.phase == "Pending" and waiting.spec.node_name is None
    cond = waiting.status.conditions[0]
    assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
    assert "nvidia.com/gpu" in cond.message
    # Deleting the Job with Background propagation ends its pod (SIGTERM) and frees the GPU.
    batch.delete_namespaced_job("long", NS, propagation_policy="Background")
    wait_for(lambda: not core.list_namespaced_pod(NS, label_selector="job-name=long").items, 30)
    wait_for(
        lambda: (
            core.list_namespaced_pod(NS, label_selector="job-name=next").items[0].status.phase
            == "Succeeded"
        ),
        30,
    )


def test_deleting_a_job_without_a_policy_orphans_its_pods(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        NS, _job("j", [sys.executable, "-c", "import time; time.sleep(60)"])
    )
    batch.delete_namespaced_job("j", NS)
    (pod,) = core.list_namespaced_pod(NS, label_selector="job-name=j").items
    assert pod.status.phase == "Running"
    core.delete_namespaced_pod(pod.metadata.name, NS)
    wait_for(lambda: not core.list_namespaced_pod(NS).items, 30)
    with pytest.raises(ApiException) as e:
        batch.read_namespaced_job("j", NS)
    assert e.value.status == 404


def test_watch_replays_from_a_version_and_410s_after_compaction(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    batch.create_namespaced_job(NS, _job("w", [sys.executable, "-c", "pass"]))
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for ev in w.stream(core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=20):
        seen.append((ev["type"], ev["object"].status.phase))
        if ev["object"].status.phase == "Succeeded":
            w.stop()
    assert seen[0] == ("ADDED", "Pending") and seen[-1] == ("MODIFIED", "Succeeded")
    assert ("MODIFIED", "Running") in seen
    srv.cluster.compact()
    with pytest.raises(ApiException) as e:
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5
        ):
            pass
    assert e.value.status == 410
    # A fresh list gives a version to watch from again.
    fresh = core.list_namespaced_pod(NS).metadata.resource_version
    assert int(fresh) > int(rv)


def test_a_watch_sees_changes_as_they_happen_and_ends_when_broken(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    core = client.CoreV1Api(api)
    rv = core.list_node().metadata.resource_version
    got: list[str] = []
    ended = threading.Event()

    def run() -> None:
        for ev in watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=30):
            got.append(f"{ev['type']} {ev['object'].metadata.name}")
        ended.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    srv.cluster.add_node("late", gpus=1)
    wait_for(lambda: got == ["ADDED late"], 10)
    srv.cluster.break_watches()
    assert ended.wait(10)


def test_node_loss_fails_its_pods(fake: tuple[FakeApiServer, client.ApiClient]) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    batch.create_namespaced_job(
        NS, _job("j", [sys.executable, "-c", "import time; time.sleep(60)"], gpus=1)
    )
    srv.cluster.remove_node("n1")
    (pod,) = core.list_namespaced_pod(NS).items
    assert pod.status.phase == "Failed" and pod.status.reason == "NodeLost"
    assert batch.read_namespaced_job("j", NS).status.conditions[0].type == "Failed"


def test_a_wrong_token_is_refused(
    fake: tuple[FakeApiServer, client.ApiClient], tmp_path: Path
) -> None:
    srv, _ = fake
    good = srv.token
    srv.token = "wrong"
    path = srv.kubeconfig(tmp_path / "wrong")
    srv.token = good
    with config.new_client_from_config(str(path)) as api, pytest.raises(ApiException) as e:
        client.CoreV1Api(api).list_node()
    assert e.value.status == 401


def test_logs_follow_with_timestamps(fake: tuple[FakeApiServer, client.ApiClient]) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    script = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.2)"
    batch.create_namespaced_job(NS, _job("f", [sys.executable, "-c", script]))
    (pod,) = core.list_namespaced_pod(NS, label_selector="job-name=f").items
    resp = core.read_namespaced_pod_log(
        pod.metadata.name, NS, follow=True, timestamps=True, _preload_content=False
    )
    got = [ln.split(" ", 1) for ln in resp.data.decode().splitlines()]
    assert [text for _, text in got] == ["line 0", "line 1", "line 2"]
    assert all(ts.endswith("Z") for ts, _ in got)


def test_affinity_pins_pods_to_nodes_one_per_node(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    for n in ("a", "b", "c"):
        srv.cluster.add_node(n, gpus=2)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    job = _job("g", [sys.executable, "-c", "import time; time.sleep(30)"], pods=2, gpus=1)
    job["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["b", "c"],
                            }
                        ]
                    }
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"job": "g"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }
    batch.create_namespaced_job(NS, job)
    pods = core.list_namespaced_pod(NS, label_selector="job-name=g").items
    assert sorted(p.spec.node_name for p in pods) == ["b", "c"]
    batch.delete_namespaced_job("g", NS, propagation_policy="Foreground")
