"""The one small interface every cloud adapter implements, and the startup script it boots."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

# Tags/labels on every instance, besides the master's own (tag_key=tag_value).
POOL_TAG = "detlab-pool"
LAUNCH_TAG = "detlab-launch"

# Where each cloud announces a spot/preemptible loss (the agent's --interruption-url).
AWS_INTERRUPTION_URL = "http://169.254.169.254/latest/meta-data/spot/instance-action"
GCP_INTERRUPTION_URL = "http://metadata.google.internal/computeMetadata/v1/instance/preempted"


class LaunchError(Exception):
    """The cloud refused a launch (quota, capacity, bad image, ...): shown to people, retried
    with backoff."""


@dataclass(frozen=True)
class CloudInstance:
    cloud_id: str  # the EC2 instance id / GCE instance name (also the agent id)
    launch_id: str  # our LAUNCH_TAG ("" when the tag is missing)
    pool: str
    # "pending" | "running" | "stopping" | "terminated" | "stopped": a stopped instance (a
    # preempted GCE VM) still exists and bills for its disks, so the master deletes it.
    state: str
    instance_type: str = ""
    spot: bool = False


@dataclass(frozen=True)
class LaunchRequest:
    launch_id: str
    name: str  # the instance's name (GCE: its id; EC2: the Name tag)
    user_data: str  # the startup script
    spot: bool = False


class Provider(Protocol):
    kind: str

    def list_instances(self) -> list[CloudInstance]:
        """This master's instances of this pool that are not terminated (by tag/label)."""
        ...

    def launch(self, req: LaunchRequest) -> CloudInstance:
        """Launch one instance; raise LaunchError with the cloud's reason."""
        ...

    def terminate(self, cloud_ids: list[str]) -> None: ...


def startup_script(
    *,
    user_script: str,
    master_url: str,
    pool: str,
    join_token: str,
    agent_id_cmd: str,
    interruption_url: str,
) -> str:
    """The instance's boot script: the user's part, then det-agent with this instance's id and
    its own join token (valid for this instance alone)."""
    q = shlex.quote
    parts = ["#!/bin/bash", "set -e"]
    if user_script.strip():
        parts += ["# --- startup_script from master.yaml ---", user_script.rstrip(), "# ---"]
    parts += [
        f"export DET_AGENT_TOKEN={q(join_token)}",
        f"export DET_AGENT_INTERRUPTION_URL={q(interruption_url)}",
        f"DET_AGENT_ID=$({agent_id_cmd})",
        f'exec det-agent --master {q(master_url)} --agent-id "$DET_AGENT_ID" '
        f"--resource-pool {q(pool)}",
        "",
    ]
    return "\n".join(parts)


AWS_AGENT_ID_CMD = (
    "T=$(curl -sf -X PUT http://169.254.169.254/latest/api/token "
    "-H 'X-aws-ec2-metadata-token-ttl-seconds: 300'); "
    'curl -sf -H "X-aws-ec2-metadata-token: $T" '
    "http://169.254.169.254/latest/meta-data/instance-id"
)
