"""The Kubernetes RM's pure parts: config, Job manifest, capacity, pod states, log lines."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from master.config import MasterConfigError, load_master_config
from master.rm.k8s.capacity import free_slots
from master.rm.k8s.config import KubernetesConfig, KubernetesConfigError, parse_kubernetes
from master.rm.k8s.events import latest, pod_warning
from master.rm.k8s.logs import Mark, fresh_lines, parse_ts, split_lines
from master.rm.k8s.manifest import JobRequest, job_manifest
from master.rm.k8s.pods import pod_state
from master.rm.k8s.secrets import owner_patch, secret_manifest, split_secret_env
from tests.k8s.fake_objects import node_object


def test_config_in_determined_form() -> None:
    cfg = parse_kubernetes(
        {
            "default_namespace": "lab",
            "max_slots_per_pod": 4,
            "slot_type": "cpu",
            "slot_resource_requests": {"cpu": 2},
            "kubeconfig_path": "/etc/kube",
            "fluent": {"image": "x"},
        },
        "resource_manager",
    )
    assert (cfg.namespace, cfg.max_slots_per_pod, cfg.slot_type, cfg.cpus_per_slot) == (
        "lab",
        4,
        "cpu",
        2,
    )
    assert cfg.kubeconfig_path == "/etc/kube" and cfg.ignored == ("fluent",)
    assert cfg.log_followers == 256
    assert parse_kubernetes({"log_followers": 8}, "rm").log_followers == 8


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ({"max_slots_per_pod": 0}, "resource_manager.max_slots_per_pod"),
        ({"log_followers": 0}, "resource_manager.log_followers"),
        ({"log_followers": "many"}, "resource_manager.log_followers"),
        ({"slot_type": "tpu"}, "resource_manager.slot_type"),
        ({"slot_resource_requests": {"memory": 1}}, "resource_manager.slot_resource_requests"),
        ({"namespace": ""}, "resource_manager.namespace"),
        ({"master_url": "ftp://x"}, "resource_manager.master_url"),
        ({"pending_timeout": "soon"}, "resource_manager.pending_timeout"),
        ({"nodes": 3}, "'nodes'"),
    ],
)
def test_config_errors_name_the_key(raw: dict[str, Any], names: str) -> None:
    with pytest.raises(KubernetesConfigError, match=names):
        parse_kubernetes(raw, "resource_manager")


def _load(tmp_path: Path, raw: dict[str, Any]) -> Any:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_master_config(path)


def test_master_config_takes_a_kubernetes_resource_manager(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        {
            "resource_manager": {"type": "kubernetes", "namespace": "lab"},
            "resource_pools": [{"pool_name": "gpus"}],
        },
    )
    (rm,) = cfg.resource_managers
    assert rm.type == "kubernetes" and rm.kubernetes is not None
    assert rm.kubernetes.namespace == "lab"
    with pytest.raises(MasterConfigError, match=r"resource_manager\.slot_type"):
        _load(tmp_path, {"resource_manager": {"type": "kubernetes", "slot_type": "x"}})


def _req(**over: Any) -> JobRequest:
    base: dict[str, Any] = {
        "allocation_id": "a1",
        "task_id": "1.abc",
        "user": "ada@lab",
        "rm_name": "default",
        "nodes": ("n1", "n2"),
        "slots_per_pod": 2,
        "env": {"DET_K8S_START_SPEC": "{}", "DET_MASTER": "http://m:8080"},
    }
    base.update(over)
    return JobRequest(**base)


def test_one_job_per_allocation_pinned_to_the_placed_nodes() -> None:
    job = job_manifest(KubernetesConfig(namespace="lab", job_ttl_seconds=60), _req())
    spec = job["spec"]
    assert job["metadata"]["namespace"] == "lab"
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (2, 2, 0)
    assert spec["completionMode"] == "Indexed" and spec["ttlSecondsAfterFinished"] == 60
    labels = spec["template"]["metadata"]["labels"]
    assert labels["detlab.ai/allocation"] == "a1" and labels["detlab.ai/user"] == "ada-lab"
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1", "n2"]
    assert "podAntiAffinity" in pod["affinity"]


def test_credentials_are_read_from_the_allocations_secret_not_the_spec() -> None:
    env = {"DET_SESSION_TOKEN": "tok-3f9a", "JUPYTER_TOKEN": "jt", "DET_MASTER": "http://m"}
    public, secret = split_secret_env(env, {"DET_SESSION_TOKEN", "JUPYTER_TOKEN"})
    assert public == {"DET_MASTER": "http://m"}
    # A template that sets the token itself (a user's pod_spec) does not override the Secret.
    user = {
        "spec": {
            "containers": [
                {
                    "name": "determined-container",
                    "env": [{"name": "DET_SESSION_TOKEN", "value": "user-set-7c1"}],
                }
            ]
        }
    }
    job = job_manifest(
        KubernetesConfig(), _req(env=public, secret_keys=tuple(sorted(secret)), pod_spec=user)
    )
    assert "tok-3f9a" not in json.dumps(job) and "user-set-7c1" not in json.dumps(job)
    (c,) = job["spec"]["template"]["spec"]["containers"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in c["env"]
        if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
    }
    assert refs == {
        "DET_SESSION_TOKEN": {"name": "detlab-a1", "key": "DET_SESSION_TOKEN"},
        "JUPYTER_TOKEN": {"name": "detlab-a1", "key": "JUPYTER_TOKEN"},
    }
    md = job["metadata"]
    sec = secret_manifest(md["name"], md["namespace"], md["labels"], secret)
    assert sec["metadata"] == {"name": "detlab-a1", "namespace": "default", "labels": md["labels"]}
    assert base64.b64decode(sec["data"]["DET_SESSION_TOKEN"]) == b"tok-3f9a"
    patch = owner_patch({"metadata": {"name": "detlab-a1", "uid": "u"}})
    assert patch["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_pod_spec_is_merged_as_determined_merged_it() -> None:
    user_spec = {
        "metadata": {"labels": {"team": "vision", "detlab.ai/user": "spoofed"}},
        "spec": {
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "determined-container",
                    "env": [{"name": "A", "value": "1"}, {"name": "DET_MASTER", "value": "x"}],
                    "resources": {"limits": {"memory": "4Gi", "nvidia.com/gpu": "8"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "restartPolicy": "Always",
        },
    }
    job = job_manifest(KubernetesConfig(), _req(nodes=("n1",), pod_spec=user_spec, image="img"))
    tmpl = job["spec"]["template"]
    assert tmpl["metadata"]["labels"]["team"] == "vision"
    assert tmpl["metadata"]["labels"]["detlab.ai/user"] == "ada-lab"  # detlab's label wins
    pod = tmpl["spec"]
    assert pod["restartPolicy"] == "Never" and pod["tolerations"]
    ours, sidecar = pod["containers"]
    assert sidecar["name"] == "sidecar" and ours["image"] == "img"
    env = {e["name"]: e.get("value") for e in ours["env"]}
    assert env["A"] == "1" and env["DET_MASTER"] == "http://m:8080"
    assert ours["resources"]["limits"] == {"memory": "4Gi", "nvidia.com/gpu": "2"}
    assert ours["volumeMounts"] and "podAntiAffinity" not in pod["affinity"]


def _pod(node: str, gpus: int, labels: dict[str, str], phase: str = "Running") -> dict:
    return {
        "metadata": {"name": f"p-{node}", "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_capacity_subtracts_foreign_pods_and_detlabs_allocations() -> None:
    cfg = KubernetesConfig()
    nodes = [node_object("a", 4, 8, 1), node_object("b", 2, 8, 1), node_object("c", 1, 8, 1)]
    nodes[2]["status"]["conditions"][0]["status"] = "False"  # not Ready: left out
    pods = [
        _pod("a", 1, {}),  # someone else's
        _pod("a", 1, {}, phase="Succeeded"),  # ended: holds nothing
        _pod("b", 2, {"detlab.ai/resource-manager": "default"}),  # ours: counted from the DB
    ]
    views = free_slots(cfg, "default", nodes, pods, {"b": {0, 1}, "a": {0}}, {"p"}, "p")
    assert [(v.id, v.free, v.total) for v in views] == [("a", (1, 2), 4), ("b", (), 2)]
    capped = free_slots(KubernetesConfig(max_slots_per_pod=2), "default", nodes, [], {}, {"p"}, "p")
    assert [(v.id, v.total) for v in capped] == [("a", 2), ("b", 2)]
    cpu = free_slots(
        KubernetesConfig(slot_type="cpu", cpus_per_slot=3), "default", nodes, [], {}, {"p"}, "p"
    )
    assert [v.total for v in cpu] == [2, 2]


def test_pod_states() -> None:
    pending = {
        "metadata": {"name": "x", "labels": {"detlab.ai/allocation": "a1"}},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes",
                }
            ],
        },
    }
    ps = pod_state(pending)
    assert ps.unschedulable and ps.allocation == "a1" and not ps.exited
    assert pod_state(pending, deleted=True).phase == "Deleted"
    lost = {
        "metadata": {"name": "y", "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Failed", "reason": "NodeLost"},
    }
    ps = pod_state(lost)
    assert (ps.rank, ps.exit_code, ps.reason, ps.exited) == (1, 137, "NodeLost", True)


def test_split_lines_keeps_the_incomplete_rest() -> None:
    lines, rest = split_lines(b"2026-01-01T00:00:00.1Z hel", b"lo\n2026-01-01T00:00:00.2Z wo")
    assert lines == [("2026-01-01T00:00:00.1Z", "hello")] and rest == b"2026-01-01T00:00:00.2Z wo"


T1, T2, T3 = (f"2026-01-01T00:00:0{i}.000000100Z" for i in (1, 2, 3))


def test_fresh_lines_skip_what_is_stored_ties_included() -> None:
    log = [(T1, "a"), (T2, "b1"), (T2, "b2"), (T2, "b3"), (T3, "c")]
    # Stored up to T2, two lines at T2: b3 (same timestamp) is not lost, b1 and b2 not repeated.
    fresh, mark = fresh_lines(log, Mark(parse_ts(T2), 2))
    assert fresh == [(T2, "b3"), (T3, "c")]
    assert mark == Mark(parse_ts(T3), 1)
    # Nothing stored: everything, and the mark counts the ties.
    fresh, mark = fresh_lines(log[:4], Mark())
    assert [t for _, t in fresh] == ["a", "b1", "b2", "b3"] and mark == Mark(parse_ts(T2), 3)
    # A reopened stream that re-sends all of it: nothing twice.
    assert fresh_lines(log[:4], mark) == ([], mark)
    assert fresh_lines(log, mark) == ([(T3, "c")], Mark(parse_ts(T3), 1))


def test_fresh_lines_compare_at_the_stored_precision() -> None:
    # The task log keeps microseconds: two lines 1 ns apart are a tie there, and stay in order.
    a, b = "2026-01-01T00:00:01.000000100Z", "2026-01-01T00:00:01.000000200Z"
    assert parse_ts(a) == parse_ts(b)
    assert fresh_lines([(a, "x"), (b, "y")], Mark(parse_ts(a), 1))[0] == [(b, "y")]
    # A line without a timestamp cannot be placed: kept, the mark unchanged.
    assert fresh_lines([("", "raw")], Mark(parse_ts(a), 1)) == ([("", "raw")], Mark(parse_ts(a), 1))


def test_a_pods_warning_event() -> None:
    ev: dict[str, Any] = {
        "metadata": {"name": "p.1"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "type": "Warning",
        "reason": "FailedScheduling",
        "message": "0/2 nodes\n are available",
        "firstTimestamp": "2026-01-01T00:00:01Z",
        "lastTimestamp": "2026-01-01T00:00:09Z",
    }
    w = pod_warning(ev)
    assert w is not None and (w.pod, w.key, w.at) == ("p", "p.1", "2026-01-01T00:00:09Z")
    assert w.text() == "FailedScheduling: 0/2 nodes are available"  # one line in the log
    assert pod_warning({**ev, "type": "Normal"}) is None
    assert pod_warning({**ev, "involvedObject": {"kind": "Node", "name": "n"}}) is None
    older = pod_warning({**ev, "reason": "Old", "lastTimestamp": "2026-01-01T00:00:02Z"})
    assert older is not None
    assert latest(w, older) is w and latest(older, w) is w and latest(None, older) is older
    # An event without timestamps (events.k8s.io's eventTime form) still has an order key.
    bare = pod_warning({k: v for k, v in ev.items() if not k.endswith("Timestamp")})
    assert bare is not None and bare.at == ""


def test_a_kubernetes_rm_without_the_client_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import master.config as mc

    monkeypatch.setattr(mc, "_importable", lambda module: module != "kubernetes")
    with pytest.raises(MasterConfigError, match=r"detlab\[k8s\]"):
        _load(tmp_path, {"resource_manager": {"type": "kubernetes"}})
