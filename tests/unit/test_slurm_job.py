"""The in-job launcher's pure parts: the GPUs Slurm gave become the task's slots."""

from __future__ import annotations

from agent.slurm_job import local_spec, slurm_gpus
from detlab.protocol import StartSpec


def test_the_jobs_gpus_are_the_tasks_slots() -> None:
    spec = StartSpec("a", 1, 1, "python3 x.py", (), {"DET_SLOT_IDS": "[]"})
    gpus = slurm_gpus({"CUDA_VISIBLE_DEVICES": "0,1"})
    assert gpus == [0, 1]
    local, slots = local_spec(spec, gpus)
    assert local.slot_indexes == (0, 1) and local.env["DET_SLOT_IDS"] == "[0, 1]"
    assert slots == [{"index": 0, "type": "gpu"}, {"index": 1, "type": "gpu"}]
    assert slurm_gpus({}) == [] and local_spec(spec, [])[1] == []
