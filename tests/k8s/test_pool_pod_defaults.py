"""A pool's `task_container_defaults` pod spec (Determined 0.38's form) under the experiment's
`environment.pod_spec`, merged as a strategic merge patch: alone, in the master config, and in
the Job the master creates against the fake API server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from master.config import MasterConfigError, load_master_config
from master.rm.k8s.podmerge import pool_pod_spec, strategic_merge
from tests.cluster import Cluster
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_scheduling import long_job
from tests.k8s.fake_apiserver import FakeApiServer
from tests.k8s.test_k8s_e2e import NS, fake, k8s_cluster  # noqa: F401,F811 - fixtures

GPU_DEFAULT = {
    "metadata": {"labels": {"team": "vision"}},
    "spec": {
        "priorityClassName": "lab-gpu",
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "containers": [
            {
                "name": "determined-container",
                "env": [{"name": "FROM_POOL", "value": "1"}, {"name": "SHARED", "value": "pool"}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    },
}
EXPERIMENT = {
    "spec": {
        "tolerations": [{"key": "big", "operator": "Exists"}],
        "containers": [
            {
                "name": "determined-container",
                "env": [{"name": "SHARED", "value": "exp"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {"name": "sidecar", "image": "busybox"},
        ],
        "volumes": [{"name": "data", "hostPath": {"path": "/data"}}],
    }
}


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def test_the_experiments_pod_spec_is_a_strategic_merge_patch_on_the_pools() -> None:
    spec = pool_pod_spec({"gpu_pod_spec": GPU_DEFAULT}, EXPERIMENT, gpu=True)
    assert spec is not None
    s = spec["spec"]
    assert s["priorityClassName"] == "lab-gpu" and spec["metadata"]["labels"] == {"team": "vision"}
    assert s["tolerations"] == [{"key": "big", "operator": "Exists"}]  # a plain list: replaced
    assert set(_by_name(s["volumes"])) == {"dshm", "data"}  # merged by name
    containers = _by_name(s["containers"])
    assert set(containers) == {"determined-container", "sidecar"}
    ours = containers["determined-container"]
    assert {e["name"]: e["value"] for e in ours["env"]} == {"FROM_POOL": "1", "SHARED": "exp"}
    assert [m["name"] for m in ours["volumeMounts"]] == ["dshm", "data"]
    assert GPU_DEFAULT["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def test_the_pools_default_is_chosen_by_the_tasks_kind() -> None:
    defaults = {"cpu_pod_spec": {"spec": {"priorityClassName": "cpu"}}, "gpu_pod_spec": GPU_DEFAULT}
    assert pool_pod_spec(defaults, None, gpu=False) == {"spec": {"priorityClassName": "cpu"}}
    assert pool_pod_spec(defaults, None, gpu=True) == GPU_DEFAULT
    assert pool_pod_spec(None, EXPERIMENT, gpu=True) == EXPERIMENT
    assert pool_pod_spec({}, None, gpu=True) is None
    assert strategic_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}


@pytest.mark.parametrize(
    ("tcd", "message"),
    [
        ("nope", "resource_pools[0].task_container_defaults must be a mapping"),
        ({"gpu_pod_spec": [1]}, "task_container_defaults.gpu_pod_spec must be a pod spec"),
    ],
)
def test_a_bad_task_container_defaults_names_the_key(
    tmp_path: Path, tcd: Any, message: str
) -> None:
    path = tmp_path / "master.yaml"
    pool = {"pool_name": "default", "task_container_defaults": tcd}
    path.write_text(yaml.safe_dump({"resource_pools": [pool]}))
    with pytest.raises(MasterConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_master_config(path)


def test_a_pools_pod_spec_reaches_the_job_under_the_experiments(
    k8s_cluster: Callable[..., Cluster],  # noqa: F811 - the fixture
    fake: FakeApiServer,  # noqa: F811
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster(pool={"task_container_defaults": {"gpu_pod_spec": GPU_DEFAULT}})
    config = yaml.safe_load(long_job(cluster, "defaults", batches=3))
    config["environment"] = {"pod_spec": EXPERIMENT}
    exp_id = submit(cluster, yaml.safe_dump(config))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert only_trial(cluster, exp_id)["restarts"] == 0
    jobs = [c.obj for c in fake.cluster.history if c.kind == "Job" and c.type == "ADDED"]
    assert len(jobs) == 1 and jobs[0]["metadata"]["namespace"] == NS
    template = jobs[0]["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "vision"
    spec = template["spec"]
    assert spec["priorityClassName"] == "lab-gpu"
    assert set(_by_name(spec["volumes"])) == {"dshm", "data"}
    ours = _by_name(spec["containers"])["determined-container"]
    env = {e["name"]: e.get("value") for e in ours["env"]}
    assert env["FROM_POOL"] == "1" and env["SHARED"] == "exp" and "DET_MASTER" in env
    assert ours["resources"]["limits"] == {"nvidia.com/gpu": "1"}  # detlab's limits still win
