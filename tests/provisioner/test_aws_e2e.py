"""Elastic agents on AWS, end to end: a real master with an aws pool, boto3 against moto's
server, instances 'booted' as real det-agent processes with their own join tokens."""

from __future__ import annotations

import signal
import time

import pytest

from tests.cluster import Cluster, wait_for
from tests.fixtures.scripted_config import make_config
from tests.integration.test_foundation import only_trial, submit
from tests.provisioner.conftest import boot_agent, ec2_user_data, join_token, poll_with, pools

pytestmark = pytest.mark.integration


def aws_yaml(moto_url: str, **over: object) -> str:
    opts = {
        "max_instances": 3,
        "instance_slots": 1,
        "max_idle_agent_period": "4s",
        "max_agent_starting_period": "120s",
        "spot": False,
        **over,
    }
    extra = "\n".join(
        f"      {k}: {v if not isinstance(v, bool) else str(v).lower()}" for k, v in opts.items()
    )
    return f"""
resource_pools:
  - pool_name: default
  - pool_name: gpu
    provider:
      type: aws
      region: us-west-2
      endpoint_url: {moto_url}
      image_id: ami-0abcdef1234567890
      instance_type: g4dn.xlarge
      tag_key: detlab-test-master
      tag_value: cluster-a
      custom_tags: [{{key: team, value: vision}}]
      startup_script: "echo preparing the instance"
      master_url: http://master.example:8080
      launch_error_backoff: 1s
{extra}
"""


def live(ec2) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    filters = [
        {"Name": "tag:detlab-test-master", "Values": ["cluster-a"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    for res in ec2.describe_instances(Filters=filters)["Reservations"]:
        out.extend(res["Instances"])
    return out


def gpu_config(cluster: Cluster, **kw: object) -> str:
    return make_config(cluster.ckpt_dir, resources={"resource_pool": "gpu"}, **kw)


def test_pending_trial_launches_instance_which_runs_it_and_is_reaped_when_idle(
    cluster_factory,
    ec2,
    moto_url,  # type: ignore[no-untyped-def]
) -> None:
    cluster = cluster_factory(master_yaml=aws_yaml(moto_url))
    exp = submit(cluster, gpu_config(cluster, batches=5))
    insts = wait_for(lambda: live(ec2), 30, what="an instance launched")
    assert len(insts) == 1
    inst = insts[0]
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert inst["InstanceType"] == "g4dn.xlarge" and inst["ImageId"] == "ami-0abcdef1234567890"
    assert tags["detlab-test-master"] == "cluster-a" and tags["detlab-pool"] == "gpu"
    assert tags["team"] == "vision" and tags["detlab-launch"]
    script = ec2_user_data(ec2, inst["InstanceId"])
    assert "echo preparing the instance" in script
    assert "--master http://master.example:8080" in script and "--resource-pool gpu" in script
    assert "169.254.169.254/latest/meta-data/instance-id" in script
    assert "test-agent-token" not in script  # never the cluster-wide agent token
    token = join_token(script)

    listing = wait_for(
        lambda: (p := pools(cluster)["gpu"])["instances"][0]["state"] == "STARTING" and p,
        20,
        what="the launch recorded",
    )
    assert [i["cloud_id"] for i in listing["instances"]] == [inst["InstanceId"]]
    # The join token is good for this instance alone.
    assert poll_with(cluster, "someone-else", token) == 403

    boot_agent(cluster, inst["InstanceId"], token, "gpu")
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    assert only_trial(cluster, exp)["restarts"] == 0
    trial_id = only_trial(cluster, exp)["id"]
    assert any(inst["InstanceId"] in line for line in cluster.logs(trial_id))

    # The agent exchanged its join token for a credential of its own (agent/credential.py).
    cred_file = (
        cluster.tmp / f"data-{inst['InstanceId']}" / f"agent-{inst['InstanceId']}.credential"
    )
    credential = cred_file.read_text().strip()
    assert poll_with(cluster, inst["InstanceId"], credential) == 200

    # Idle for max_idle_agent_period (4 s): terminated, its token and credential revoked.
    wait_for(lambda: not live(ec2), 60, what="idle instance terminated")
    row = wait_for(lambda: pools(cluster)["gpu"]["recent"], 20, what="instance TERMINATED")[0]
    assert row["state"] == "TERMINATED" and row["cloud_id"] == inst["InstanceId"]
    assert row["state_reason"] == "terminated (idle for 4s)"
    assert pools(cluster)["gpu"]["instances"] == []
    wait_for(lambda: poll_with(cluster, inst["InstanceId"], token) == 401, 20, what="revoked")
    wait_for(
        lambda: poll_with(cluster, inst["InstanceId"], credential) == 401,
        20,
        what="the instance's agent credential revoked",
    )
    out = cluster.det("agent", "list").stdout
    assert inst["InstanceId"] in out


def test_max_instances_caps_launches_and_a_restart_makes_no_duplicates_nor_orphans(
    cluster_factory,
    ec2,
    moto_url,  # type: ignore[no-untyped-def]
) -> None:
    cluster = cluster_factory(master_yaml=aws_yaml(moto_url))
    cfg = gpu_config(
        cluster,
        batches=5,
        searcher={"name": "random", "max_trials": 10, "max_concurrent_trials": 10},
    )
    exp = submit(cluster, cfg)
    wait_for(lambda: len(cluster.experiment(exp)["trials"]) == 10, 60, what="10 trials")
    wait_for(lambda: len(live(ec2)) == 3, 30, what="3 instances")
    ids = {i["InstanceId"] for i in live(ec2)}
    # An instance tagged for this master that it never launched: an orphan, terminated.
    ec2.run_instances(
        ImageId="ami-0abcdef1234567890",
        InstanceType="g4dn.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "detlab-test-master", "Value": "cluster-a"},
                    {"Key": "detlab-pool", "Value": "gpu"},
                ],
            }
        ],
    )
    wait_for(lambda: {i["InstanceId"] for i in live(ec2)} == ids, 30, what="orphan terminated")

    cluster.stop_master(signal.SIGKILL)
    cluster.start_master()
    # The restarted master finds its instances in the cloud: no duplicate launches.
    for _ in range(10):  # several provisioning passes (one a second)
        assert {i["InstanceId"] for i in live(ec2)} == ids
        time.sleep(0.5)
    listing = pools(cluster)["gpu"]
    assert {i["cloud_id"] for i in listing["instances"] if i["state"] != "TERMINATING"} == ids
    orphan = [r for r in listing["instances"] + listing["recent"] if r["cloud_id"] not in ids]
    assert len(orphan) == 1 and "orphan" in orphan[0]["state_reason"]
    # Boot one: its trials run one after another on it; the others stay at 3 in all.
    users = {}
    for inst in live(ec2):
        users[inst["InstanceId"]] = join_token(ec2_user_data(ec2, inst["InstanceId"]))
    first = sorted(users)[0]
    boot_agent(cluster, first, users[first], "gpu")
    wait_for(
        lambda: sum(t["state"] == "COMPLETED" for t in cluster.experiment(exp)["trials"]) >= 2,
        180,
        what="two trials completed on the booted instance",
    )
    assert {i["InstanceId"] for i in live(ec2)} == ids
    cluster.det("experiment", "kill", str(exp))


def test_instance_that_never_connects_is_replaced(
    cluster_factory,
    ec2,
    moto_url,  # type: ignore[no-untyped-def]
) -> None:
    cluster = cluster_factory(
        master_yaml=aws_yaml(moto_url, max_agent_starting_period="5s", max_instances=1)
    )
    exp = submit(cluster, gpu_config(cluster, batches=3))
    first = wait_for(lambda: live(ec2), 30, what="first instance")[0]["InstanceId"]
    second = wait_for(
        lambda: [i for i in live(ec2) if i["InstanceId"] != first], 60, what="a replacement"
    )
    assert len(live(ec2)) == 1  # the stuck one went first (max_instances: 1)
    listing = pools(cluster)["gpu"]
    rows = {r["cloud_id"]: r for r in listing["instances"] + listing["recent"]}
    assert rows[first]["state"] in ("TERMINATING", "TERMINATED")
    assert "its agent did not connect within 5s" in rows[first]["state_reason"]
    inst = second[0]["InstanceId"]
    boot_agent(cluster, inst, join_token(ec2_user_data(ec2, inst)), "gpu")
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=180)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)


def test_spot_interruption_requeues_the_trial_without_a_failure(
    cluster_factory,
    ec2,
    moto_url,
    notice,  # type: ignore[no-untyped-def]
) -> None:
    cluster = cluster_factory(master_yaml=aws_yaml(moto_url, spot=True, max_instances=2))
    cfg = gpu_config(
        cluster, batches=400, hparams={"sleep": 0.05, "checkpoint_every": 20}, max_restarts=0
    )
    exp = submit(cluster, cfg)
    inst = wait_for(lambda: live(ec2), 30, what="spot instance")[0]
    assert inst.get("InstanceLifecycle") == "spot"
    token = join_token(ec2_user_data(ec2, inst["InstanceId"]))
    boot_agent(
        cluster,
        inst["InstanceId"],
        token,
        "gpu",
        1,
        "--interruption-url",
        notice.url,
        "--interruption-interval",
        "0.3",
    )
    trial = only_trial(cluster, exp)
    cluster.wait_trial(trial["id"], lambda t: t["steps_completed"] >= 20, 120, what="progress")
    notice.interrupt()
    # The trial checkpoints, stops, and queues again; a new instance is launched for it.
    cluster.wait_trial(
        trial["id"], lambda t: t["display_state"] == "QUEUED", 120, what="trial requeued"
    )
    second = wait_for(
        lambda: [i for i in live(ec2) if i["InstanceId"] != inst["InstanceId"]], 30, what="new"
    )[0]
    cluster.stop_agent(inst["InstanceId"])  # the cloud takes the interrupted instance away
    ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    boot_agent(
        cluster, second["InstanceId"], join_token(ec2_user_data(ec2, second["InstanceId"])), "gpu"
    )
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    t = only_trial(cluster, exp)
    assert t["restarts"] == 0  # max_restarts: 0 -- a counted failure would have ended it
    logs = "\n".join(cluster.logs(t["id"]))
    assert "being interrupted" in logs and "resumed from" in logs


def test_restart_mid_launch_links_the_instance_and_fails_the_launch_that_never_happened(
    cluster_factory,
    ec2,
    moto_url,  # type: ignore[no-untyped-def]
) -> None:
    """A master killed between writing a launch's row and recording the cloud's answer: the
    restarted master finds the instance by its launch tag (no duplicate, not an orphan); a row
    whose cloud call never happened is marked FAILED, not launched again behind its back."""
    import psycopg2

    cluster = cluster_factory(
        master_yaml=aws_yaml(moto_url, max_instances=2, max_agent_starting_period="10m")
    )
    cluster.stop_master(signal.SIGKILL)
    made = ec2.run_instances(
        ImageId="ami-0abcdef1234567890",
        InstanceType="g4dn.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "detlab-test-master", "Value": "cluster-a"},
                    {"Key": "detlab-pool", "Value": "gpu"},
                    {"Key": "detlab-launch", "Value": "launch-made"},
                ],
            }
        ],
    )["Instances"][0]["InstanceId"]
    conn = psycopg2.connect(cluster.db_url)
    with conn, conn.cursor() as cur:
        for launch_id in ("launch-made", "launch-lost"):
            cur.execute(
                "INSERT INTO instances (id, pool, provider, state, instance_type, slots, spot, "
                "launched_at) VALUES (%s, 'gpu', 'aws', 'LAUNCHING', 'g4dn.xlarge', 1, false, "
                "now() - interval '2 minutes')",
                (launch_id,),
            )
    conn.close()
    cluster.start_master()
    rows = wait_for(
        lambda: (
            (
                r := {
                    x["id"]: x
                    for x in pools(cluster)["gpu"]["instances"] + pools(cluster)["gpu"]["recent"]
                }
            )
            and r["launch-made"]["state"] == "STARTING"
            and r["launch-lost"]["state"] == "FAILED"
            and r
        ),
        30,
        what="rows reconciled",
    )
    assert rows["launch-made"]["cloud_id"] == made
    assert "interrupted" in rows["launch-lost"]["state_reason"]
    time.sleep(3)  # a few passes: nothing else launched, the linked instance kept
    assert [i["InstanceId"] for i in live(ec2)] == [made]


def test_interrupted_instance_that_vanishes_mid_checkpoint_requeues_without_a_failure(
    cluster_factory,
    ec2,
    moto_url,
    notice,  # type: ignore[no-untyped-def]
) -> None:
    """The notice comes, the trial ignores the preemption signal, and the instance is gone
    (agent killed, instance terminated): still no failure counted."""
    cluster = cluster_factory(master_yaml=aws_yaml(moto_url, spot=True, max_instances=2))
    cfg = gpu_config(
        cluster,
        batches=60,
        hparams={"sleep": 0.05, "checkpoint_every": 10, "ignore_preemption": True},
        max_restarts=0,
    )
    exp = submit(cluster, cfg)
    inst = wait_for(lambda: live(ec2), 30, what="spot instance")[0]["InstanceId"]
    wait_for(lambda: pools(cluster)["gpu"]["instances"][0]["state"] == "STARTING", 20)
    extra = ("--interruption-url", notice.url, "--interruption-interval", "0.3")
    boot_agent(cluster, inst, join_token(ec2_user_data(ec2, inst)), "gpu", 1, *extra)
    trial = only_trial(cluster, exp)
    cluster.wait_trial(trial["id"], lambda t: t["steps_completed"] >= 10, 120, what="progress")
    notice.interrupt()
    wait_for(
        lambda: pools(cluster)["gpu"]["instances"][0]["interrupted_at"], 30, what="notice seen"
    )
    cluster.stop_agent(inst, signal.SIGKILL)  # the cloud takes it away mid-checkpoint
    ec2.terminate_instances(InstanceIds=[inst])
    cluster.wait_trial(trial["id"], lambda t: t["display_state"] == "QUEUED", 60, what="requeued")
    second = wait_for(lambda: [i for i in live(ec2) if i["InstanceId"] != inst], 30)[0]
    sid = second["InstanceId"]
    wait_for(
        lambda: any(
            i["cloud_id"] == sid and i["state"] == "STARTING"
            for i in pools(cluster)["gpu"]["instances"]
        ),
        20,
    )
    boot_agent(cluster, sid, join_token(ec2_user_data(ec2, sid)), "gpu")
    d = cluster.wait_experiment(exp, {"COMPLETED", "ERROR", "CANCELED"}, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp)
    assert only_trial(cluster, exp)["restarts"] == 0
    assert any("was interrupted" in line for line in cluster.logs(trial["id"]))
