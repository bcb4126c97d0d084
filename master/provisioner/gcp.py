"""GCP Compute Engine adapter (google-cloud-compute's REST client).

`api_endpoint` points it at another Compute API; a plain-http endpoint (a local fake, a test)
is used with anonymous credentials, anything else with the application default credentials.
"""

from __future__ import annotations

import re
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from master.provisioner.config import ProviderConfig
from master.provisioner.provider import (
    LAUNCH_TAG,
    POOL_TAG,
    CloudInstance,
    LaunchError,
    LaunchRequest,
)


def label_value(value: str) -> str:
    """GCE label values: lowercase letters, digits, '-' and '_', at most 63."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


class GcpProvider:
    kind = "gcp"

    def __init__(self, cfg: ProviderConfig, pool: str, tag_value: str) -> None:
        self.cfg = cfg
        self.pool = pool
        self.tag_value = label_value(tag_value)
        self.pool_label = label_value(pool)
        options: dict[str, Any] = {}
        credentials = None
        if cfg.api_endpoint:
            options["api_endpoint"] = cfg.api_endpoint
            if cfg.api_endpoint.startswith("http://"):
                from google.auth.credentials import AnonymousCredentials

                credentials = AnonymousCredentials()
        self.client = compute_v1.InstancesClient(
            credentials=credentials, client_options=options, transport="rest"
        )

    def list_instances(self) -> list[CloudInstance]:
        flt = (
            f'(labels.{self.cfg.label_key} = "{self.tag_value}") AND '
            f'(labels.{POOL_TAG} = "{self.pool_label}")'
        )
        out = []
        req = compute_v1.ListInstancesRequest(
            project=self.cfg.project, zone=self.cfg.zone, filter=flt
        )
        for inst in self.client.list(request=req):
            if inst.status in ("TERMINATED", "STOPPED"):
                # GCE's TERMINATED is "stopped" (a preempted VM ends there) and still exists.
                state = "stopped"
            elif inst.status == "RUNNING":
                state = "running"
            elif inst.status in ("STOPPING", "SUSPENDING", "SUSPENDED"):
                state = "stopping"
            else:
                state = "pending"
            out.append(
                CloudInstance(
                    cloud_id=inst.name,
                    launch_id=inst.labels.get(LAUNCH_TAG, ""),
                    pool=self.pool,
                    state=state,
                    instance_type=inst.machine_type.rsplit("/", 1)[-1],
                    spot=bool(inst.scheduling.preemptible),
                )
            )
        return out

    def _resource(self, req: LaunchRequest) -> compute_v1.Instance:
        cfg = self.cfg
        zone = cfg.zone
        it = cfg.gcp_instance_type
        ni = cfg.network_interface
        nic = compute_v1.NetworkInterface(
            network=ni.get("network", "global/networks/default"),
            subnetwork=ni.get("subnetwork") or None,
        )
        if ni.get("external_ip", True):
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT")]
        inst = compute_v1.Instance(
            name=req.name,
            machine_type=f"zones/{zone}/machineTypes/{it.machine_type}",
            labels={
                cfg.label_key: self.tag_value,
                POOL_TAG: self.pool_label,
                LAUNCH_TAG: req.launch_id,
            },
            metadata=compute_v1.Metadata(
                items=[compute_v1.Items(key="startup-script", value=req.user_data)]
            ),
            disks=[
                compute_v1.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute_v1.AttachedDiskInitializeParams(
                        source_image=cfg.boot_disk_source_image or None,
                        disk_size_gb=cfg.boot_disk_size,
                    ),
                )
            ],
            network_interfaces=[nic],
            scheduling=compute_v1.Scheduling(
                preemptible=it.preemptible,
                on_host_maintenance="TERMINATE" if it.gpu_num else "MIGRATE",
                automatic_restart=not it.preemptible,
            ),
            tags=compute_v1.Tags(items=list(cfg.network_tags)) if cfg.network_tags else None,
        )
        if it.gpu_num:
            inst.guest_accelerators = [
                compute_v1.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{it.gpu_type}",
                    accelerator_count=it.gpu_num,
                )
            ]
        sa = cfg.service_account
        if sa.get("email"):
            inst.service_accounts = [
                compute_v1.ServiceAccount(email=sa["email"], scopes=list(sa.get("scopes") or []))
            ]
        return inst

    def launch(self, req: LaunchRequest) -> CloudInstance:
        try:
            op = self.client.insert(
                project=self.cfg.project, zone=self.cfg.zone, instance_resource=self._resource(req)
            )
            op.result(timeout=self.cfg.operation_timeout_period)
            if op.error_code:
                raise LaunchError(f"{op.error_code}: {op.error_message}")
        except gexc.GoogleAPICallError as e:
            raise LaunchError(f"{type(e).__name__}: {e.message}") from e
        except LaunchError:
            raise
        except Exception as e:  # the operation's own error (quota, capacity) or a timeout
            raise LaunchError(str(e) or type(e).__name__) from e
        return CloudInstance(
            cloud_id=req.name,
            launch_id=req.launch_id,
            pool=self.pool,
            state="pending",
            instance_type=self.cfg.gcp_instance_type.machine_type,
            spot=self.cfg.gcp_instance_type.preemptible,
        )

    def terminate(self, cloud_ids: list[str]) -> None:
        for name in cloud_ids:
            try:
                self.client.delete(project=self.cfg.project, zone=self.cfg.zone, instance=name)
            except gexc.NotFound:
                pass
