"""A pool's `provider` section: Determined's keys parse; bad ones fail at master start with the
path of the bad field."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from master.config import MasterConfigError, load_master_config
from master.provisioner.config import parse_duration
from master.provisioner.provider import startup_script
from tests.cluster import BIN

DETERMINED_AWS = """
resource_pools:
  - pool_name: default
  - pool_name: aws-gpu
    description: burst to EC2
    provider:
      type: aws
      region: us-east-1
      image_id: ami-0123
      instance_type: p3.8xlarge
      instance_slots: 4
      min_instances: 0
      max_instances: 8
      max_idle_agent_period: 10m
      max_agent_starting_period: 1h30m
      tag_key: det-cluster
      tag_value: lab
      spot: true
      spot_max_price: "1.5"
      custom_tags: [{key: team, value: nlp}]
      network_interface: {public_ip: true, subnet_id: subnet-1, security_group_id: sg-1}
      iam_instance_profile_arn: arn:aws:iam::1:instance-profile/det
      agent_docker_image: determinedai/determined-agent:0.38.0
"""

DETERMINED_GCP = """
resource_pools:
  - pool_name: gcp
    provider:
      type: gcp
      project: p
      zone: europe-west4-a
      instance_type: {machine_type: a2-highgpu-2g, gpu_type: nvidia-tesla-a100, gpu_num: 2}
      boot_disk_size: 300
      label_key: det
      label_value: lab
      service_account: {email: det@p.iam.gserviceaccount.com, scopes: [cloud-platform]}
      base_config: {}
"""


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "master.yaml"
    p.write_text(text)
    return load_master_config(p)


def test_determined_aws_config_carries_over(tmp_path: Path) -> None:
    cfg = load(tmp_path, DETERMINED_AWS)
    assert cfg.pool_names() == ["default", "aws-gpu"]
    pc = cfg.resource_pools[1].provider
    assert (pc.type, pc.instance_slots, pc.max_instances, pc.spot) == ("aws", 4, 8, True)
    assert pc.max_idle_agent_period == 600 and pc.max_agent_starting_period == 5400
    assert pc.custom_tags == (("team", "nlp"),) and pc.instance_type_name == "p3.8xlarge"
    assert pc.ignored == ("agent_docker_image",)
    assert cfg.resource_pools[0].provider is None


def test_determined_gcp_config_carries_over(tmp_path: Path) -> None:
    pc = load(tmp_path, DETERMINED_GCP).resource_pools[0].provider
    assert pc.type == "gcp" and pc.instance_slots == 2  # from gpu_num
    assert pc.gcp_instance_type.machine_type == "a2-highgpu-2g"
    assert pc.max_idle_agent_period == 300  # the default: 5 minutes
    assert pc.ignored == ("base_config",)


@pytest.mark.parametrize(
    ("instance_type", "slots"),
    [("p3.8xlarge", 4), ("p3.2xlarge", 1), ("g4dn.xlarge", 1), ("g5.48xlarge", 8), ("t3.large", 1)],
)
def test_aws_instance_slots_default_to_the_types_gpu_count(
    tmp_path: Path, instance_type: str, slots: int
) -> None:
    # Determined's aws configs name only the instance type.
    text = DETERMINED_AWS.replace("      instance_slots: 4\n", "").replace(
        "p3.8xlarge", instance_type
    )
    pc = load(tmp_path, text).resource_pools[1].provider
    assert pc.instance_slots == slots


def test_aws_unknown_instance_type_needs_instance_slots(tmp_path: Path) -> None:
    text = DETERMINED_AWS.replace("      instance_slots: 4\n", "").replace("p3.8xlarge", "x9.huge")
    with pytest.raises(MasterConfigError) as e:
        load(tmp_path, text)
    msg = str(e.value)
    assert "resource_pools[1].provider.instance_slots" in msg and "'x9.huge'" in msg
    assert "p3" in msg  # the families it does know
    # ... and an explicit count is taken as given, known type or not.
    text = DETERMINED_AWS.replace("p3.8xlarge", "x9.huge")
    assert load(tmp_path, text).resource_pools[1].provider.instance_slots == 4


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ("max_instances: -1", "resource_pools[1].provider.max_instances"),
        ("max_idle_agent_period: soon", "resource_pools[1].provider.max_idle_agent_period"),
        ("spot: maybe", "resource_pools[1].provider.spot"),
        ("instance_slotz: 4", "resource_pools[1].provider.instance_slotz"),
        ("min_instances: 9", "resource_pools[1].provider.min_instances"),
        ("custom_tags: [{key: 1}]", "resource_pools[1].provider.custom_tags[0]"),
    ],
)
def test_bad_field_is_named_by_path(tmp_path: Path, change: str, path: str) -> None:
    text = DETERMINED_AWS + "      " + change + "\n"
    with pytest.raises(MasterConfigError) as e:
        load(tmp_path, text)
    assert path in str(e.value)


def test_required_fields(tmp_path: Path) -> None:
    with pytest.raises(MasterConfigError, match=r"resource_pools\[0\]\.provider\.type"):
        load(tmp_path, "resource_pools: [{name: x, provider: {type: azure}}]")
    with pytest.raises(MasterConfigError, match=r"provider\.image_id: required"):
        load(tmp_path, "resource_pools: [{name: x, provider: {type: aws, instance_slots: 1}}]")
    with pytest.raises(MasterConfigError, match=r"provider\.zone: required"):
        load(tmp_path, "resource_pools: [{name: x, provider: {type: gcp, project: p}}]")


def test_master_refuses_to_start_with_bad_provider_config(tmp_path: Path) -> None:
    cfg = tmp_path / "master.yaml"
    cfg.write_text(DETERMINED_AWS + "      max_agent_starting_period: -5m\n")
    proc = subprocess.run(
        [str(BIN / "det-master"), "--config", str(cfg), "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "resource_pools[1].provider.max_agent_starting_period" in proc.stderr


def test_durations() -> None:
    assert parse_duration("5m", "x") == 300 and parse_duration("1h30m", "x") == 5400
    assert parse_duration("1.5s", "x") == 1.5 and parse_duration(45, "x") == 45


def test_startup_script_quotes_and_runs_the_agent_last() -> None:
    s = startup_script(
        user_script="apt-get install -y foo",
        master_url="http://m:8080",
        pool="gpu pool",
        join_token="join-abc",
        agent_id_cmd="echo i-1",
        interruption_url="http://169.254.169.254/x",
    )
    lines = s.splitlines()
    assert lines[0] == "#!/bin/bash" and "apt-get install -y foo" in s
    assert lines[-1].startswith("exec det-agent") and "--resource-pool 'gpu pool'" in lines[-1]
    assert "export DET_AGENT_TOKEN=join-abc" in s
