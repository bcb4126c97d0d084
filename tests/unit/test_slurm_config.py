"""`resource_manager: {type: slurm}` in Determined 0.38's form: parsed alone, errors name keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.config import MasterConfigError, load_master_config


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "master.yaml"
    p.write_text(text)
    return load_master_config(p)


def test_a_slurm_rm_with_its_partitions_as_pools(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        """
resource_manager:
  type: slurm
  job_storage_root: /shared/detlab-jobs
  gres_supported: false
  slot_type: cuda
  default_compute_resource_pool: gpu
  default_aux_resource_pool: cpu
  partition_overrides: {cpu: {slot_type: cpu}}
  host: launcher.example   # Determined's launcher keys load and are ignored
  port: 8181
""",
    )
    (rm,) = cfg.resource_managers
    assert rm.type == "slurm" and rm.slurm is not None
    assert rm.slurm.job_storage_root == "/shared/detlab-jobs"
    assert rm.slurm.gres_supported is False and rm.slurm.tres_supported is True
    assert rm.slurm.slot_type_of("cpu") == "cpu" and rm.slurm.slot_type_of("gpu") == "cuda"
    assert [(p.name, p.resource_manager) for p in cfg.resource_pools] == [
        ("cpu", "default"),
        ("gpu", "default"),
    ]


def test_listed_pools_are_partitions_and_agents_can_sit_beside(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        """
resource_pools: [{name: default}]
additional_resource_managers:
  - resource_manager: {type: slurm, name: hpc, job_storage_root: /j, user_name: det,
                       sudo_authorized: true}
    resource_pools: [{pool_name: low}, {pool_name: high}]
""",
    )
    hpc = cfg.resource_managers[1]
    assert hpc.slurm is not None and hpc.slurm.user_name == "det" and hpc.slurm.sudo_authorized
    assert {p.name: p.resource_manager for p in cfg.resource_pools} == {
        "default": "default",
        "low": "hpc",
        "high": "hpc",
    }


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{type: slurm}", "resource_manager.job_storage_root"),
        ("{type: slurm, job_storage_root: rel/dir}", "absolute path"),
        ("{type: slurm, job_storage_root: /j, colour: red}", "unknown key 'colour'"),
        ("{type: slurm, job_storage_root: /j, slot_type: tpu}", "resource_manager.slot_type"),
        ("{type: slurm, job_storage_root: /j, gres_supported: 'yes'}", "gres_supported"),
        (
            "{type: slurm, job_storage_root: /j, gres_supported: false, tres_supported: false}",
            "no way to give a job GPUs",
        ),
        ("{type: slurm, job_storage_root: /j, container_run_type: docker}", "container_run_type"),
        ("{type: slurm, job_storage_root: /j, container_run_type: enroot}", "not supported yet"),
        (
            "{type: slurm, job_storage_root: /j, partition_overrides: {a: {slot_type: x}}}",
            "partition_overrides.a.slot_type",
        ),
        (
            "{type: slurm, job_storage_root: /j, partition_overrides: {a: {gpus: 1}}}",
            "partition_overrides.a: unknown key 'gpus'",
        ),
        ("{type: slurm, job_storage_root: /j, user_name: ''}", "resource_manager.user_name"),
        ("{type: slurm, job_storage_root: /j}", "name its partitions"),
    ],
)
def test_mistakes_name_their_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(MasterConfigError, match=None) as e:
        load(tmp_path, f"resource_manager: {text}\n")
    assert named in str(e.value)
