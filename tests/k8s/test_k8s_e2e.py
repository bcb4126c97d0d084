"""The kubernetes resource manager end to end: a real master process against the fake API server
(tests/k8s/fake_apiserver.py), whose pods run as local processes and really train."""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_scheduling import long_job
from tests.integration.test_search import asha_config, check_asha_result
from tests.integration.test_trial_api import digits_config, metrics, model_dir
from tests.k8s.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.integration

NS = "detlab"


def master_yaml(kubeconfig: Path, pool: dict[str, Any] | None = None, **over: Any) -> str:
    rm = {
        "type": "kubernetes",
        "namespace": NS,
        "kubeconfig_path": str(kubeconfig),
        "launcher": [sys.executable, "-m", "agent.podstart"],
        "watch_timeout": 5,
        **over,
    }
    return yaml.safe_dump(
        {"resource_manager": rm, "resource_pools": [{"pool_name": "default", **(pool or {})}]},
        sort_keys=False,
    )


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer(grace_s=5.0) as srv:
        yield srv


@pytest.fixture
def k8s_cluster(
    cluster_factory: Callable[..., Cluster], fake: FakeApiServer
) -> Callable[..., Cluster]:
    def make(**over: Any) -> Cluster:
        c = cluster_factory(start=False)
        kubeconfig = fake.kubeconfig(c.tmp / "kubeconfig")
        c.master_yaml = master_yaml(kubeconfig, **over)
        c.start_master()
        return c

    return make


def _pods(fake: FakeApiServer, **labels: str) -> list[dict[str, Any]]:
    items, _ = fake.cluster.list("Pod", NS)
    return [p for p in items if all(p["metadata"]["labels"].get(k) == v for k, v in labels.items())]


def test_digits_trains_to_completion_on_kubernetes(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("gpu-1", gpus=1)
    cluster = k8s_cluster()
    exp_id = submit(cluster, digits_config(cluster), model_dir(cluster.tmp))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trial = only_trial(cluster, exp_id)
    m = metrics(cluster, trial["id"])
    assert m["validation"] and m["validation"][-1][1]["validation_accuracy"] > 0.8
    ckpts = cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert ckpts and (cluster.ckpt_dir / ckpts[-1]["uuid"] / "state.pt").exists()
    # One Job of one pod, pinned to the node detlab placed it on, with the GPU as a limit.
    jobs = [c.obj for c in fake.cluster.history if c.kind == "Job" and c.type == "ADDED"]
    assert len(jobs) == 1
    spec = jobs[0]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 0)
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    # The pod's output is in the trial's logs.
    wait_for(lambda: any("validation_accuracy" in ln for ln in cluster.logs(trial["id"])), 30)
    # Its Job and its Secret are deleted once it ended.
    wait_for(lambda: not _jobs(fake) and not _secrets(fake), 30, what="the Job and Secret deleted")


def _jobs(fake: FakeApiServer) -> list[dict[str, Any]]:
    return fake.cluster.list("Job", NS)[0]


def _reason(cluster: Cluster, exp_id: int) -> str:
    jobs = cluster.det_json("job", "list")[0]["jobs"]
    return next((j.get("reason") or "" for j in jobs if j["experiment_id"] == exp_id), "")


def test_a_two_pod_gang_starts_only_when_both_fit_and_kill_deletes_its_job(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    fake.cluster.add_node("b", gpus=1)
    # Someone else's pod holds b's GPU: only one of the gang's two GPUs is free.
    blocker = fake.cluster.create_pod(
        NS,
        {
            "metadata": {"name": "not-detlab"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "b"},
                "containers": [
                    {
                        "name": "c",
                        "command": [sys.executable, "-c", "import time; time.sleep(120)"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    assert blocker["spec"]["nodeName"] == "b"
    cluster = k8s_cluster()
    config = long_job(cluster, "gang", resources={"slots_per_trial": 2})
    exp_id = submit(cluster, config)
    wait_for(lambda: "slot" in _reason(cluster, exp_id), 60, what="the gang waits for slots")
    assert not _jobs(fake), "no Job while only one of the gang's two GPUs is free"
    assert only_trial(cluster, exp_id)["display_state"] == "QUEUED"
    fake.cluster.delete_pod(NS, "not-detlab")
    ours = wait_for(
        lambda: (
            len(p := _pods(fake, **{"detlab.ai/resource-manager": "default"})) == 2
            and all(x["status"]["phase"] == "Running" for x in p)
            and p
        ),
        60,
        what="both pods of the gang running",
    )
    assert sorted(p["spec"]["nodeName"] for p in ours) == ["a", "b"]
    (job,) = _jobs(fake)
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    cluster.det("experiment", "kill", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    assert d["experiment"]["state"] == "CANCELED", cluster.diagnose(exp_id)
    wait_for(lambda: not _jobs(fake) and not _pods(fake), 30, what="the Job and its pods gone")


def test_a_watch_broken_mid_run_with_410_loses_nothing(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("gpu-1", gpus=1)
    cluster = k8s_cluster()
    exp_id = submit(cluster, long_job(cluster, "gone", batches=40))
    trial = wait_for(
        lambda: (t := only_trial(cluster, exp_id))["display_state"] == "RUNNING" and t,
        60,
        what="the trial runs",
    )
    # The API server goes away while the pod finishes; its history is compacted meanwhile, so
    # the RM's watch comes back to a 410 Gone and must re-list to learn the pod ended.
    fake.cluster.frozen = True
    fake.cluster.break_watches()
    wait_for(
        lambda: any(p["status"]["phase"] == "Succeeded" for p in _pods(fake)),
        120,
        what="the pod ends while the API is away",
    )
    fake.cluster.compact()
    fake.cluster.frozen = False
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    steps = [s for s, _ in metrics(cluster, trial["id"])["training"]]
    assert steps == list(range(1, 41)), "every step reported once"
    assert "re-listing" in cluster.read_log("master")


def test_node_loss_restarts_the_trial_from_its_checkpoint(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster()
    exp_id = submit(cluster, long_job(cluster, "lost", batches=200, max_restarts=2))
    trial = only_trial(cluster, exp_id)
    cluster.wait_trial(trial["id"], lambda t: t["steps_completed"] >= 25, what="a checkpoint")
    fake.cluster.add_node("b", gpus=1)
    fake.cluster.remove_node("a")
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    logs = "\n".join(cluster.logs(trial["id"]))
    assert re.search(r"resumed from \S+ at step (\d+)", logs), logs[-3000:]
    nodes = {p["spec"]["nodeName"] for p in _pods(fake)} | {
        c.obj["spec"].get("nodeName") for c in fake.cluster.history if c.kind == "Pod"
    }
    assert {"a", "b"} <= nodes


PREEMPTING = {"scheduler": {"type": "priority", "preemption": True}}


def test_a_higher_priority_experiment_preempts_which_resumes_from_its_checkpoint(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster(pool=PREEMPTING)
    low = submit(cluster, long_job(cluster, "low", batches=150, resources={"priority": 60}))
    low_trial = only_trial(cluster, low)["id"]
    cluster.wait_trial(low_trial, lambda t: t["steps_completed"] >= 20, what="low trains")
    high = submit(cluster, long_job(cluster, "high", batches=20, resources={"priority": 5}))
    d = cluster.wait_experiment(high, {"COMPLETED", "ERROR"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(high)
    d = cluster.wait_experiment(low, {"COMPLETED", "ERROR"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(low)
    logs = "\n".join(cluster.logs(low_trial))
    stopped = int(re.search(r"preempted at step (\d+)", logs).group(1))  # type: ignore[union-attr]
    resumed = int(re.search(r"resumed from \S+ at step (\d+)", logs).group(1))  # type: ignore[union-attr]
    assert stopped == resumed >= 20
    assert only_trial(cluster, low)["restarts"] == 0, "a preemption is not a failure"


def test_a_pod_unschedulable_past_the_deadline_is_withdrawn_and_requeued(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster(pending_timeout=3)
    fake.cluster.hold_binding = True  # the cluster's scheduler is slow to bind detlab's pod...
    exp_id = submit(cluster, long_job(cluster, "late", batches=20))
    wait_for(lambda: _pods(fake), 60, what="detlab's pod created")
    # ...and meanwhile someone else's pod, bound by hand, takes the node's only GPU.
    fake.cluster.create_pod(
        NS,
        {
            "metadata": {"name": "squatter"},
            "spec": {
                "nodeName": "a",
                "containers": [
                    {
                        "name": "c",
                        "command": [sys.executable, "-c", "import time; time.sleep(120)"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    fake.cluster.release_binding()
    trial = only_trial(cluster, exp_id)
    wait_for(
        lambda: any("stayed unschedulable" in ln for ln in cluster.logs(trial["id"])),
        60,
        what="the gang withdrawn",
    )
    wait_for(lambda: not _jobs(fake), 30, what="its Job deleted")
    assert only_trial(cluster, exp_id)["display_state"] == "QUEUED"
    logs = "\n".join(cluster.logs(trial["id"]))
    assert "waits: Unschedulable: 0/1 nodes are available" in logs, logs
    fake.cluster.delete_pod(NS, "squatter")
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert only_trial(cluster, exp_id)["restarts"] == 0, "a withdrawal is not the trial's fault"


def test_an_asha_search_completes_across_a_master_restart(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    fake.cluster.add_node("b", gpus=1)
    cluster = k8s_cluster()
    exp_id = submit(cluster, asha_config(cluster, sleep=0.05))
    wait_for(lambda: len(cluster.experiment(exp_id)["trials"]) >= 3, 120, what="3 trials")
    # Pods run on and end while no master watches: the new master's first list finds them.
    cluster.stop_master()
    cluster.start_master()
    check_asha_result(cluster, exp_id)
    wait_for(lambda: not _jobs(fake) and not _secrets(fake), 30, what="every Job, Secret deleted")


def test_a_two_pod_distributed_digits_trial_trains_to_completion(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    fake.cluster.add_node("b", gpus=1)
    cluster = k8s_cluster()
    config = digits_config(cluster, "distributed.yaml", max_restarts=0)
    exp_id = submit(cluster, config, model_dir(cluster.tmp))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    trial = only_trial(cluster, exp_id)
    assert metrics(cluster, trial["id"])["validation"][-1][1]["validation_accuracy"] > 0.8
    pods = [c.obj for c in fake.cluster.history if c.kind == "Pod" and c.type == "ADDED"]
    assert len(pods) == 2  # one Job, two pods, one per node, ranks 0 and 1
    ranks = sorted(
        e["value"]
        for p in pods
        for e in p["spec"]["containers"][0]["env"]
        if e["name"] == "JOB_COMPLETION_INDEX"
    )
    assert ranks == ["0", "1"]


def test_an_image_that_cannot_be_pulled_fails_the_trial_at_once(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster()
    config = yaml.safe_load(long_job(cluster, "pull", batches=10, max_restarts=3))
    config["environment"] = {"image": "unpullable/detlab:1"}
    exp_id = submit(cluster, yaml.safe_dump(config))
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "ERROR", cluster.diagnose(exp_id)
    trial = only_trial(cluster, exp_id)
    assert trial["restarts"] == 0, "no restart can pull an image that cannot be pulled"
    assert any("ErrImagePull" in ln for ln in cluster.logs(trial["id"]))
    # The kubelet's Warning event says why, in the log and in the trial's exit reason.
    pulled = 'Failed: Failed to pull image "unpullable/detlab:1": pull access denied'
    assert any(pulled in ln for ln in cluster.logs(trial["id"])), cluster.logs(trial["id"])
    assert pulled in (trial["exit_reason"] or ""), trial["exit_reason"]
    wait_for(lambda: not _jobs(fake) and not _pods(fake), 30, what="its Job and pod gone")


def test_a_pods_log_is_stored_once_across_a_master_restart(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster()
    config = long_job(cluster, "relog", batches=200, hparams={"log_lines": 40})
    exp_id = submit(cluster, config)
    trial = only_trial(cluster, exp_id)
    wait_for(
        lambda: any(
            re.search(r"checkpoint \S+ at step 20$", ln) for ln in cluster.logs(trial["id"])
        ),
        120,
        what="lines stored before the restart",
    )
    # The pod trains on while no master follows its log; the new master's follower must start
    # where the old one's stored lines end, not at the log's start.
    cluster.stop_master()
    assert _pods(fake)[0]["status"]["phase"] == "Running", "the pod outlives the master"
    cluster.start_master()
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    expected = [f"log line {i} of 40" for i in range(1, 41)]
    expected += [f"checkpoint at step {s}" for s in range(10, 201, 10)]
    expected += ["validation at step 200", "done"]

    def seen() -> list[str]:
        out = []
        for ln in cluster.logs(trial["id"]):
            ln = re.sub(r"^checkpoint \S+ at", "checkpoint at", ln)
            ln = re.sub(r"^(validation at step \d+) loss .*", r"\1", ln)
            if ln in expected:
                out.append(ln)
        return out

    wait_for(lambda: "done" in seen(), 30, what="the pod's last line stored")
    lines = seen()
    twice = sorted({ln for ln in lines if lines.count(ln) > 1})
    assert not twice, f"stored twice: {twice}"
    assert sorted(lines) == sorted(expected), "every line stored"


def _secrets(fake: FakeApiServer) -> list[dict[str, Any]]:
    return fake.cluster.list("Secret", NS)[0]


def test_the_session_token_is_in_a_secret_never_in_the_job(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    # A Secret a master left behind (it died after creating it, before the Job): the next
    # master deletes it.
    stale = {"detlab.ai/resource-manager": "default", "detlab.ai/allocation": "gone.1"}
    fake.cluster.create_secret(
        NS, {"metadata": {"name": "detlab-gone.1", "labels": stale}, "stringData": {"X": "y"}}
    )
    cluster = k8s_cluster()
    exp_id = submit(cluster, long_job(cluster, "secret", batches=100000))
    trial = only_trial(cluster, exp_id)
    cluster.wait_trial(trial["id"], lambda t: t["steps_completed"] >= 3, what="it trains")
    (job,) = _jobs(fake)
    (secret,) = _secrets(fake)
    assert secret["metadata"]["name"] == job["metadata"]["name"]
    assert secret["metadata"]["labels"] == job["metadata"]["labels"]
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"])
    token = base64.b64decode(secret["data"]["DET_SESSION_TOKEN"]).decode()
    assert len(token) >= 20
    # Whoever can read Jobs and pods reads no token: the pods get it from the Secret.
    assert token not in json.dumps(job) and token not in json.dumps(_pods(fake))
    (c,) = job["spec"]["template"]["spec"]["containers"]
    (ref,) = [e for e in c["env"] if e["name"] == "DET_SESSION_TOKEN"]
    assert ref == {
        "name": "DET_SESSION_TOKEN",
        "valueFrom": {
            "secretKeyRef": {"name": job["metadata"]["name"], "key": "DET_SESSION_TOKEN"}
        },
    }
    cluster.det("experiment", "kill", str(exp_id))
    d = cluster.wait_experiment(exp_id, {"CANCELED", "ERROR", "COMPLETED"}, timeout=60)
    assert d["experiment"]["state"] == "CANCELED", cluster.diagnose(exp_id)
    wait_for(lambda: not _jobs(fake) and not _secrets(fake), 30, what="its Job and Secret gone")


def test_a_pods_warning_event_is_its_pending_reason_and_in_its_log(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    cluster = k8s_cluster(pending_timeout=600)
    fake.cluster.hold_binding = True  # as in the withdrawal test: another pod takes the GPU
    exp_id = submit(cluster, long_job(cluster, "event", batches=20))
    wait_for(lambda: _pods(fake), 60, what="detlab's pod created")
    fake.cluster.create_pod(
        NS,
        {
            "metadata": {"name": "squatter"},
            "spec": {
                "nodeName": "a",
                "containers": [
                    {
                        "name": "c",
                        "command": [sys.executable, "-c", "import time; time.sleep(120)"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    fake.cluster.release_binding()
    why = "FailedScheduling: 0/1 nodes are available: insufficient nvidia.com/gpu."
    reason = wait_for(
        lambda: why in (r := _reason(cluster, exp_id)) and r, 60, what="the event as the reason"
    )
    (pod,) = _pods(fake, **{"detlab.ai/resource-manager": "default"})
    assert reason == f"pod {pod['metadata']['name']}: {why}"
    trial = only_trial(cluster, exp_id)
    wait_for(lambda: any(why in ln for ln in cluster.logs(trial["id"])), 30, what="logged")
    fake.cluster.delete_pod(NS, "squatter")
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert sum(why in ln for ln in cluster.logs(trial["id"])) == 1, "each event logged once"
    assert not _reason(cluster, exp_id)


def test_no_secret_no_job_the_token_never_goes_into_the_spec(
    k8s_cluster: Callable[..., Cluster], fake: FakeApiServer
) -> None:
    fake.cluster.add_node("a", gpus=1)
    fake.cluster.forbidden.add("Secret")  # a deployment whose RBAC predates the Secrets
    cluster = k8s_cluster()
    exp_id = submit(cluster, long_job(cluster, "nosecret", batches=20))
    trial = only_trial(cluster, exp_id)
    refused = "cannot create its Kubernetes Secret and Job: 403 Forbidden"

    def refusals() -> list[str]:  # one line each (the requeue's own line repeats it)
        return [
            ln
            for ln in cluster.logs(trial["id"])
            if refused in ln and "will resume elsewhere" not in ln
        ]

    # Asked again after 5 s, then 10 s (not on every scheduling pass): the second refusal
    # says so, and no third came meanwhile.
    wait_for(lambda: any("asked again in 10 s" in ln for ln in refusals()), 90, what="refused")
    lines = refusals()
    assert "asked again in 5 s" in lines[0] and len(lines) <= 3, lines
    assert not [c for c in fake.cluster.history if c.kind == "Job"], "no Job without its Secret"
    assert only_trial(cluster, exp_id)["restarts"] == 0, "not the trial's fault"
    fake.cluster.forbidden.clear()  # the RBAC is fixed: the queued trial starts and completes
    d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=120)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
