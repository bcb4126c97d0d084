"""The fake Kubernetes API server's Secrets and Events, driven by the official client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.cluster import wait_for
from tests.k8s.fake_apiserver import FakeApiServer
from tests.k8s.test_fake_apiserver import _job

NS = "detlab"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeApiServer, client.ApiClient]]:
    with FakeApiServer(grace_s=2.0) as srv:
        api = config.new_client_from_config(str(srv.kubeconfig(tmp_path / "kubeconfig")))
        yield srv, api
        api.close()


def _secret(name: str, **labels: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}, "stringData": {"TOKEN": "s3cret"}}


def test_secrets_create_list_patch_delete(fake: tuple[FakeApiServer, client.ApiClient]) -> None:
    _, api = fake
    core = client.CoreV1Api(api)
    core.create_namespaced_secret(NS, _secret("a", app="t"))
    core.create_namespaced_secret(NS, _secret("b", app="other"))
    with pytest.raises(ApiException) as e:
        core.create_namespaced_secret(NS, _secret("a"))
    assert e.value.status == 409
    with pytest.raises(ApiException) as e:
        core.create_namespaced_secret(NS, {"metadata": {"name": "c"}, "data": {"k": "%%%"}})
    assert e.value.status == 422 and "base64" in str(e.value.body)
    with pytest.raises(ApiException) as e:
        core.create_namespaced_secret(NS, {"metadata": {"name": "c"}, "data": {"a/b": ""}})
    assert e.value.status == 422
    listed = core.list_namespaced_secret(NS, label_selector="app=t").items
    assert [s.metadata.name for s in listed] == ["a"]
    assert listed[0].data == {"TOKEN": "czNjcmV0"}  # stringData is stored base64, as data
    patched = core.patch_namespaced_secret(
        "a",
        NS,
        {
            "metadata": {
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u1"}]
            }
        },
    )
    assert patched.metadata.owner_references[0].uid == "u1"
    core.delete_namespaced_secret("a", NS)
    with pytest.raises(ApiException) as e:
        core.read_namespaced_secret("a", NS)
    assert e.value.status == 404


def test_a_pod_reads_a_secret_and_waits_for_one_that_is_missing(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", cpus=4)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    job = _job("j", [sys.executable, "-c", "import os; print('token=' + os.environ['TOKEN'])"])
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "TOKEN"}}})
    env.append(
        {"name": "NONE", "valueFrom": {"secretKeyRef": {"name": "t", "key": "K", "optional": True}}}
    )
    created = batch.create_namespaced_job(NS, job)
    pod = wait_for(
        lambda: (
            (p := core.list_namespaced_pod(NS).items) and p[0].status.container_statuses and p[0]
        ),
        10,
        what="the pod bound",
    )
    waiting = pod.status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == (
        "CreateContainerConfigError",
        'secret "s" not found',
    )
    assert pod.status.phase == "Pending"
    # The Secret comes: the kubelet starts the container, which reads it.
    core.create_namespaced_secret(NS, _secret("s"))
    core.patch_namespaced_secret(
        "s",
        NS,
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "j",
                        "uid": created.metadata.uid,
                    }
                ]
            }
        },
    )
    name = pod.metadata.name
    wait_for(
        lambda: core.read_namespaced_pod(name, NS).status.phase == "Succeeded", 30, what="it ran"
    )
    assert "token=s3cret" in core.read_namespaced_pod_log(name, NS)
    # The garbage collector: deleting the Job (Background) takes the Secret it owns.
    batch.delete_namespaced_job("j", NS, propagation_policy="Background")
    assert not core.list_namespaced_secret(NS).items


def test_an_orphaned_secret_loses_its_owner_reference(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    _, api = fake
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    created = batch.create_namespaced_job(NS, _job("j", [sys.executable, "-c", "pass"]))
    core.create_namespaced_secret(NS, _secret("s"))
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": created.metadata.uid}
    core.patch_namespaced_secret("s", NS, {"metadata": {"ownerReferences": [ref]}})
    batch.delete_namespaced_job("j", NS)  # no policy: Orphan, a Job's default
    assert not core.read_namespaced_secret("s", NS).metadata.owner_references


def test_what_the_fake_simulates_it_reports_as_events(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    srv.cluster.add_node("n1", gpus=1)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    warnings = "involvedObject.kind=Pod,type=Warning"
    # A watch from now, on Warning events about pods only.
    rv = core.list_namespaced_event(NS, field_selector=warnings).metadata.resource_version
    batch.create_namespaced_job(NS, _job("big", [sys.executable, "-c", "pass"], gpus=2))
    (pod,) = core.list_namespaced_pod(NS).items
    w = watch.Watch()
    (ev,) = [
        e["object"]
        for e in w.stream(
            core.list_namespaced_event,
            NS,
            field_selector=warnings,
            resource_version=rv,
            timeout_seconds=1,
        )
    ]
    assert (ev.type, ev.reason, ev.involved_object.name) == (
        "Warning",
        "FailedScheduling",
        pod.metadata.name,
    )
    assert ev.message == "0/1 nodes are available: insufficient nvidia.com/gpu."
    assert ev.source.component == "default-scheduler"
    # An image that cannot be pulled; a pod that runs gets Normal events, which the selector
    # leaves out.
    job = _job("img", [sys.executable, "-c", "pass"])
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "unpullable/x:1"
    batch.create_namespaced_job(NS, job)
    batch.create_namespaced_job(NS, _job("ok", [sys.executable, "-c", "pass"]))
    by_reason = {
        (e.reason, e.involved_object.name.split("-")[0])
        for e in core.list_namespaced_event(NS, field_selector=warnings).items
    }
    assert by_reason == {("FailedScheduling", "big"), ("Failed", "img")}
    (failed,) = [
        e for e in srv.cluster.events_of(_pod_named(core, "img")) if e["type"] == "Warning"
    ]
    assert failed["message"].startswith('Failed to pull image "unpullable/x:1"')
    normal = {e["reason"] for e in srv.cluster.events_of(_pod_named(core, "ok"))}
    assert normal == {"Scheduled", "Started"}


def _pod_named(core: client.CoreV1Api, prefix: str) -> str:
    (name,) = [
        p.metadata.name
        for p in core.list_namespaced_pod(NS).items
        if p.metadata.name.startswith(prefix + "-")
    ]
    return name


def test_a_repeated_event_is_counted_not_repeated(
    fake: tuple[FakeApiServer, client.ApiClient],
) -> None:
    srv, api = fake
    core = client.CoreV1Api(api)
    srv.cluster.add_node("n1")
    pod = srv.cluster.create_pod(
        NS,
        {
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "command": ["true"]}]},
        },
    )
    for _ in range(3):
        srv.cluster.emit_event(pod, "Warning", "BackOff", "Back-off restarting", "kubelet")
    (ev,) = core.list_namespaced_event(NS, field_selector="reason=BackOff").items
    assert ev.count == 3 and ev.involved_object.uid == pod["metadata"]["uid"]
