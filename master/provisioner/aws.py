"""AWS EC2 adapter (boto3). `endpoint_url` points it at another EC2 API (tests: moto's server)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from master.provisioner.config import ProviderConfig
from master.provisioner.provider import (
    LAUNCH_TAG,
    POOL_TAG,
    CloudInstance,
    LaunchError,
    LaunchRequest,
)

# Spot requests that fail for lack of capacity or price are retried on demand.
SPOT_UNAVAILABLE = {
    "InsufficientInstanceCapacity",
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
}
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


class AwsProvider:
    kind = "aws"

    def __init__(self, cfg: ProviderConfig, pool: str, tag_value: str) -> None:
        self.cfg = cfg
        self.pool = pool
        self.tag_value = tag_value
        self.ec2 = boto3.client(
            "ec2",
            region_name=cfg.region,
            endpoint_url=cfg.endpoint_url or None,
            config=Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10),
        )

    def _filters(self) -> list[dict[str, Any]]:
        return [
            {"Name": f"tag:{self.cfg.tag_key}", "Values": [self.tag_value]},
            {"Name": f"tag:{POOL_TAG}", "Values": [self.pool]},
            {"Name": "instance-state-name", "Values": LIVE_STATES},
        ]

    def list_instances(self) -> list[CloudInstance]:
        out = []
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=self._filters())
        for page in pages:
            for res in page.get("Reservations", []):
                for inst in res.get("Instances", []):
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                    out.append(
                        CloudInstance(
                            cloud_id=inst["InstanceId"],
                            launch_id=tags.get(LAUNCH_TAG, ""),
                            pool=tags.get(POOL_TAG, ""),
                            state=_state(inst.get("State", {}).get("Name", "")),
                            instance_type=inst.get("InstanceType", ""),
                            spot=inst.get("InstanceLifecycle") == "spot",
                        )
                    )
        return out

    def _params(self, req: LaunchRequest, spot: bool) -> dict[str, Any]:
        cfg = self.cfg
        tags = [
            {"Key": cfg.tag_key, "Value": self.tag_value},
            {"Key": POOL_TAG, "Value": self.pool},
            {"Key": LAUNCH_TAG, "Value": req.launch_id},
            {"Key": "Name", "Value": req.name},
            *({"Key": k, "Value": v} for k, v in cfg.custom_tags),
        ]
        params: dict[str, Any] = {
            "ImageId": cfg.image_id,
            "InstanceType": cfg.aws_instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": req.user_data,
            "ClientToken": f"{req.launch_id}-{'spot' if spot else 'od'}",
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
            "BlockDeviceMappings": [
                {
                    "DeviceName": "/dev/sda1",
                    "Ebs": {"VolumeSize": cfg.root_volume_size, "DeleteOnTermination": True},
                }
            ],
        }
        if cfg.iam_instance_profile_arn:
            params["IamInstanceProfile"] = {"Arn": cfg.iam_instance_profile_arn}
        if cfg.ssh_key_name:
            params["KeyName"] = cfg.ssh_key_name
        ni = cfg.network_interface
        if ni:
            nic: dict[str, Any] = {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": bool(ni.get("public_ip", True)),
            }
            if ni.get("subnet_id"):
                nic["SubnetId"] = ni["subnet_id"]
            if ni.get("security_group_id"):
                nic["Groups"] = [ni["security_group_id"]]
            params["NetworkInterfaces"] = [nic]
        if spot:
            opts: dict[str, Any] = {"SpotInstanceType": "one-time"}
            if cfg.spot_max_price:
                opts["MaxPrice"] = cfg.spot_max_price
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": opts}
        return params

    def launch(self, req: LaunchRequest) -> CloudInstance:
        try:
            try:
                reply = self.ec2.run_instances(**self._params(req, req.spot))
            except ClientError as e:
                if not req.spot or _code(e) not in SPOT_UNAVAILABLE:
                    raise
                # No spot capacity: fall back to on demand.
                reply = self.ec2.run_instances(**self._params(req, False))
        except ClientError as e:
            message = e.response.get("Error", {}).get("Message", str(e))
            raise LaunchError(f"{_code(e)}: {message}") from e
        except BotoCoreError as e:
            raise LaunchError(str(e)) from e
        inst = reply["Instances"][0]
        return CloudInstance(
            cloud_id=inst["InstanceId"],
            launch_id=req.launch_id,
            pool=self.pool,
            state=_state(inst.get("State", {}).get("Name", "pending")),
            instance_type=inst.get("InstanceType", ""),
            spot=inst.get("InstanceLifecycle") == "spot",
        )

    def terminate(self, cloud_ids: list[str]) -> None:
        if cloud_ids:
            self.ec2.terminate_instances(InstanceIds=cloud_ids)


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", "Error"))


def _state(name: str) -> str:
    if name in ("pending", "running"):
        return name
    if name in ("terminated",):
        return "terminated"
    return "stopping"
