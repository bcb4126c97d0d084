"""Elastic agents on GCP, end to end: google-cloud-compute's REST client in a real master
against the fake Compute Engine API, instances 'booted' as real det-agent processes."""

from __future__ import annotations

import signal
import time

import pytest

from agent.credential import credential_path
from tests.cluster import wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit
from tests.provisioner.conftest import Notice, boot_agent, join_token, poll_with, pools
from tests.provisioner.fake_gce import FakeComputeEngine

pytestmark = pytest.mark.integration


def gcp_yaml(gce: FakeComputeEngine, **over: object) -> str:
    opts = {"max_instances": 2, "max_idle_agent_period": "3s", **over}
    extra = "\n".join(f"      {k}: {v}" for k, v in opts.items())
    return f"""
resource_pools:
  - pool_name: default
  - pool_name: gpu
    provider:
      type: gcp
      project: lab-project
      zone: us-central1-a
      api_endpoint: {gce.url}
      instance_type:
        machine_type: n1-standard-8
        gpu_type: nvidia-tesla-t4
        gpu_num: 2
        preemptible: true
      boot_disk_source_image: projects/lab/global/images/det-agent
      boot_disk_size: 100
      label_key: detlab-test
      label_value: cluster-g
      network_tags: [det-agents]
      launch_error_backoff: 2s
      master_url: http://master.example:8080
{extra}
"""


def startup(inst: dict) -> str:
    return next(i["value"] for i in inst["metadata"]["items"] if i["key"] == "startup-script")


def test_gcp_launch_run_and_reap(cluster_factory, gce) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(master_yaml=gcp_yaml(gce))
    exp = submit(
        cluster,
        make_config(
            cluster.ckpt_dir, batches=5, resources={"resource_pool": "gpu", "slots_per_trial": 2}
        ),
    )
    wait_for(lambda: gce.instances, 30, what="an instance inserted")
    assert len(gce.inserted) == 1
    body = gce.inserted[0]
    name = body["name"]
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["labels"]["detlab-test"] == "cluster-g" and body["labels"]["detlab-pool"] == "gpu"
    assert body["scheduling"]["preemptible"] is True
    assert body["guestAccelerators"][0]["acceleratorCount"] == 2
    assert body["disks"][0]["initializeParams"]["sourceImage"].endswith("images/det-agent")
    assert body["tags"]["items"] == ["det-agents"]
    script = startup(body)
    assert f"DET_AGENT_ID=$(echo {name})" in script and "--resource-pool gpu" in script
    assert "instance/preempted" in script and "test-agent-token" not in script
    token = join_token(script)
    wait_for(
        lambda: [i["state"] for i in pools(cluster)["gpu"]["instances"]] == ["STARTING"],
        20,
        what="the launch recorded",
    )
    assert poll_with(cluster, "not-" + name, token) == 403

    boot_agent(cluster, name, token, "gpu", 2)  # a 2-GPU instance: the 2-slot trial fits it
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    assert only_trial(cluster, exp)["restarts"] == 0
    wait_for(lambda: name in gce.deleted, 60, what="idle instance deleted")
    assert len(gce.inserted) == 1  # one instance for one 2-slot trial
    row = wait_for(lambda: pools(cluster)["gpu"]["recent"], 20, what="row terminated")[0]
    assert row["cloud_id"] == name and row["state"] == "TERMINATED"
    assert row["instance_type"] == "n1-standard-8" and row["spot"] is True
    wait_for(lambda: poll_with(cluster, name, token) == 401, 20, what="token revoked")
    credential = credential_path(cluster.tmp / f"data-{name}", name).read_text().strip()
    wait_for(lambda: poll_with(cluster, name, credential) == 401, 20, what="credential revoked")


def test_gcp_launch_error_is_shown_and_retried_with_backoff(cluster_factory, gce) -> None:  # type: ignore[no-untyped-def]
    gce.fail_inserts = "QUOTA_EXCEEDED"
    cluster = cluster_factory(master_yaml=gcp_yaml(gce))
    exp = submit(
        cluster,
        make_config(
            cluster.ckpt_dir, batches=3, resources={"resource_pool": "gpu", "slots_per_trial": 1}
        ),
    )
    pool = wait_for(lambda: pools(cluster)["gpu"]["last_error"] and pools(cluster)["gpu"], 30)
    assert "QUOTA_EXCEEDED" in pool["last_error"] and pool["backoff_until"]
    failed = [r for r in pool["recent"] if r["state"] == "FAILED"]
    assert failed and "QUOTA_EXCEEDED" in failed[0]["last_error"]
    out = cluster.det("agent", "list").stdout
    assert "QUOTA_EXCEEDED" in out and "gpu" in out
    # Backoff (2 s, doubling): a handful of attempts in 6 s, never a tight loop.
    fails_before = len(pools(cluster)["gpu"]["recent"])
    time.sleep(6)
    attempts = len(pools(cluster)["gpu"]["recent"]) - fails_before
    assert attempts <= 2, attempts
    # The quota is raised: the next retry launches, and the error clears from the listing.
    gce.fail_inserts = None
    wait_for(lambda: gce.instances, 30, what="launch after the quota is raised")
    name = next(iter(gce.instances))
    boot_agent(cluster, name, join_token(startup(gce.instances[name])), "gpu", 2)
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    assert pools(cluster)["gpu"]["backoff_until"] is None


def live(gce: FakeComputeEngine) -> set[str]:
    return {n for n, i in gce.instances.items() if i["status"] != "TERMINATED"}


def test_gcp_cap_and_a_master_killed_mid_way_makes_no_duplicates_nor_orphans(  # type: ignore[no-untyped-def]
    cluster_factory, gce
) -> None:
    cluster = cluster_factory(master_yaml=gcp_yaml(gce, max_instances=3))
    exp = submit(
        cluster,
        make_config(
            cluster.ckpt_dir,
            batches=5,
            resources={"resource_pool": "gpu", "slots_per_trial": 1},
            searcher={"name": "random", "max_trials": 10, "max_concurrent_trials": 10},
        ),
    )
    # Ten pending 1-slot trials, 2-GPU instances, max_instances 3: exactly 3 inserted.
    wait_for(lambda: len(gce.instances) == 3, 60, what="3 instances")
    names = set(gce.instances)
    # Labelled for this master and pool, but never launched by it: an orphan, deleted.
    gce.add_labelled("stray-vm", {"detlab-test": "cluster-g", "detlab-pool": "gpu"})
    wait_for(lambda: "stray-vm" in gce.deleted, 30, what="orphan deleted")

    cluster.stop_master(signal.SIGKILL)
    cluster.start_master()
    for _ in range(10):  # several provisioning passes (one a second): nothing new inserted
        assert set(gce.instances) == names and len(gce.inserted) == 3
        time.sleep(0.5)
    # The orphan is listed (TERMINATING) until a pass of the restarted master sees it gone from
    # the cloud; on a loaded machine that pass can come after the five seconds above.
    wait_for(
        lambda: {i["cloud_id"] for i in pools(cluster)["gpu"]["instances"]} == names,
        30,
        what="the listing to show exactly the three launched instances",
    )
    # Boot one: trials run on it two at a time; still 3 instances in all.
    first = sorted(names)[0]
    boot_agent(cluster, first, join_token(startup(gce.instances[first])), "gpu", 2)
    wait_for(
        lambda: sum(t["state"] == "COMPLETED" for t in cluster.experiment(exp)["trials"]) >= 2,
        180,
        what="two trials completed on the booted instance",
    )
    assert set(gce.instances) == names and len(gce.inserted) == 3
    cluster.det("experiment", "kill", str(exp))


def test_gcp_preemption_requeues_the_trial_without_a_failure(  # type: ignore[no-untyped-def]
    cluster_factory, gce, gce_notice: Notice
) -> None:
    """GCE preempts the VM: the agent reads `instance/preempted` = TRUE, the trial checkpoints
    and stops, the master requeues it without counting a failure, deletes the stopped VM and
    launches another, on which the trial resumes and completes."""
    cluster = cluster_factory(master_yaml=gcp_yaml(gce, max_idle_agent_period="60s"))
    exp = submit(
        cluster,
        make_config(
            cluster.ckpt_dir,
            batches=400,
            hparams={"sleep": 0.05, "checkpoint_every": 20},
            max_restarts=0,
            resources={"resource_pool": "gpu", "slots_per_trial": 2},
        ),
    )
    name = wait_for(lambda: list(gce.instances), 30, what="preemptible instance")[0]
    assert gce.instances[name]["scheduling"]["preemptible"] is True
    extra = ("--interruption-url", gce_notice.url, "--interruption-interval", "0.3")
    boot_agent(cluster, name, join_token(startup(gce.instances[name])), "gpu", 2, *extra)
    trial = only_trial(cluster, exp)
    cluster.wait_trial(trial["id"], lambda t: t["steps_completed"] >= 20, 120, what="progress")
    gce_notice.interrupt()
    cluster.wait_trial(
        trial["id"], lambda t: t["display_state"] == "QUEUED", 120, what="trial requeued"
    )
    # GCE stops the VM (it stays listed as TERMINATED): the master deletes it, launches anew.
    cluster.stop_agent(name)
    gce.preempt(name)
    wait_for(lambda: name in gce.deleted, 30, what="the stopped VM deleted")
    second = wait_for(lambda: sorted(live(gce) - {name}), 30, what="a new instance")[0]
    row = next(r for r in pools(cluster)["gpu"]["recent"] if r["cloud_id"] == name)
    assert row["state"] == "TERMINATED" and row["interrupted_at"]
    boot_agent(cluster, second, join_token(startup(gce.instances[second])), "gpu", 2)
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    t = only_trial(cluster, exp)
    assert t["restarts"] == 0  # max_restarts: 0 -- a counted failure would have ended it
    logs = "\n".join(cluster.logs(t["id"]))
    assert "being interrupted" in logs and "resumed from" in logs


def test_gcp_instance_that_never_connects_is_replaced(cluster_factory, gce) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(
        master_yaml=gcp_yaml(gce, max_agent_starting_period="5s", max_instances=1)
    )
    exp = submit(
        cluster,
        make_config(
            cluster.ckpt_dir, batches=3, resources={"resource_pool": "gpu", "slots_per_trial": 1}
        ),
    )
    first = wait_for(lambda: list(gce.instances), 30, what="first instance")[0]
    second = wait_for(lambda: sorted(set(gce.instances) - {first}), 60, what="a replacement")[0]
    assert first in gce.deleted and set(gce.instances) == {second}  # max_instances: 1
    listing = pools(cluster)["gpu"]
    rows = {r["cloud_id"]: r for r in listing["instances"] + listing["recent"]}
    assert "its agent did not connect within 5s" in rows[first]["state_reason"]
    boot_agent(cluster, second, join_token(startup(gce.instances[second])), "gpu", 2)
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
