"""Pure parts of the Determined-compatibility forms: checkpoint ranking, the --test config,
the master config's masking, Determined's output formats."""

from __future__ import annotations

from harness._ckpt_rank import by_trial_and_step, rank
from harness.cli._render import det_percent, det_time
from harness.cli._testmode import make_test_config, stage_marks
from master.api.master_info import redacted


def ck(uuid: str, trial: int, steps: int) -> dict:
    return {"uuid": uuid, "trial_id": trial, "steps_completed": steps}


def test_rank_by_the_validation_at_each_checkpoints_step() -> None:
    ckpts = [ck("a", 1, 3), ck("b", 1, 6), ck("c", 2, 6), ck("d", 2, 3)]
    vals = {
        **by_trial_and_step([{"steps_completed": 6, "metrics": {"loss": 0.5}}], 1),
        **by_trial_and_step([{"steps_completed": 6, "metrics": {"loss": 0.2, "acc": 0.9}}], 2),
    }
    assert [c["uuid"] for c in rank(ckpts, vals, "loss", True)] == ["c", "b", "d", "a"]
    assert [c["uuid"] for c in rank(ckpts, vals, "loss", False)] == ["b", "c", "d", "a"]
    assert [c["uuid"] for c in rank(ckpts, vals, "loss", True, validated_only=True)] == ["c", "b"]
    assert [c["uuid"] for c in rank(ckpts, vals, "acc", False, limit=1)] == ["c"]
    # NaN and non-numbers are "no value", never best.
    nan = {(1, 3): {"loss": float("nan")}, (1, 6): {"loss": "x"}}
    assert rank(ckpts[:2], nan, "loss", True, validated_only=True) == []


def test_make_test_config_is_one_batch_never_restarted_and_gc_everything() -> None:
    cfg = {
        "name": "x",
        "searcher": {"name": "adaptive_asha", "metric": "acc", "smaller_is_better": False},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
        "max_restarts": 5,
        "resources": {"slots_per_trial": 2},
    }
    t = make_test_config(cfg)
    assert t["searcher"] == {
        "name": "single",
        "metric": "acc",
        "smaller_is_better": False,
        "max_length": {"batches": 1},
    }
    assert t["max_restarts"] == 0 and t["min_validation_period"] == {"batches": 1}
    assert t["checkpoint_storage"]["save_trial_latest"] == 0
    assert t["checkpoint_storage"]["host_path"] == "/ckpt"
    assert t["resources"] == {"slots_per_trial": 2}
    assert t["description"] == "[test-mode] x"
    assert cfg["max_restarts"] == 5  # the input is not changed
    marks = stage_marks(True, True, False, False)
    assert marks.count("[✔]") == 2 and "Testing validation....... [✗]" in marks


def test_master_config_masks_credentials_not_numbers() -> None:
    out = redacted(
        {
            "db": "postgresql://det:hunter2@db/detlab",
            "checkpoint_storage": {"type": "s3", "secret_key": "s", "access_key": "a"},
            "token_ttl_hours": 168.0,
            "resource_pools": [{"provider": {"credentials_file": "/k.json"}}],
        }
    )
    assert "hunter2" not in out["db"] and out["db"].startswith("postgresql://det:")
    assert out["checkpoint_storage"] == {
        "type": "s3",
        "secret_key": "********",
        "access_key": "********",
    }
    assert out["token_ttl_hours"] == 168.0
    assert out["resource_pools"][0]["provider"]["credentials_file"] == "********"


def test_determined_time_and_percent_formats() -> None:
    assert det_time("2024-05-01T12:00:00+00:00") == "2024-05-01 12:00:00+0000"
    assert det_time("2024-05-01T14:00:00+02:00") == "2024-05-01 12:00:00+0000"
    assert det_time(None) is None
    assert det_percent(1.0) == "100.0%" and det_percent(None) is None
