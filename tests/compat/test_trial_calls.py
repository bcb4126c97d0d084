"""The trial-level calls of Determined 0.38.1, as its docs show them, on a real cluster:
`det trial kill ID` and `Trial.kill()` end one trial (the search goes on), `det trial download
ID --best|--latest|--uuid`, and the SDK's `Trial.list_checkpoints(sort_by=, order_by=,
max_results=)`, `top_checkpoint()` and `select_checkpoint()`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster import ADMIN_PASSWORD, Cluster
from tests.compat._util import SCRIPTS, TERMINAL, config
from tests.integration.test_foundation import submit

pytestmark = pytest.mark.integration


def test_kill_one_trial_and_download_a_trials_checkpoints(cluster: Cluster, tmp_path: Path) -> None:
    from harness.experimental import client

    # Long enough that the kill lands while the first trial trains (its first checkpoint is
    # at 2 of 12 batches), and every checkpoint kept (no GC between the checks).
    storage = {"type": "shared_fs", "host_path": str(cluster.ckpt_dir), "save_trial_latest": 10}
    text = config(
        cluster,
        {"name": "random", "max_trials": 2, "max_concurrent_trials": 1},
        {
            "max_length": 12,
            "every": 2,
            "sleep": 0.4,
            "lr": {"type": "double", "minval": 0.1, "maxval": 1.0},
        },
        checkpoint_storage=storage,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    first = cluster.experiment(exp_id)["trials"][0]["id"]
    cluster.wait_trial(first, lambda t: t["latest_checkpoint"] is not None, timeout=240)
    out = cluster.det("trial", "kill", str(first)).stdout
    assert out.strip() == f"Killed trial {first}"
    killed = cluster.wait_trial(first, lambda t: t["state"] in TERMINAL, timeout=120)
    assert killed["state"] == "CANCELED", cluster.diagnose(exp_id)
    # Only the trial: the search goes on with its second trial and completes.
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    second = next(t for t in d["trials"] if t["id"] != first)
    assert second["state"] == "COMPLETED" and second["steps_completed"] == 12
    assert "killed by the user" in "\n".join(cluster.logs(first))
    again = cluster.det("t", "kill", str(first)).stdout  # an ended trial: nothing changes
    assert again.strip() == f"Killed trial {first}"
    assert cluster.get(f"/trials/{first}")["trial"]["state"] == "CANCELED"

    # det trial download: the latest, the best (by the searcher metric), one by uuid.
    latest = tmp_path / "latest"
    out = cluster.det(
        "trial", "download", str(second["id"]), "--latest", "-o", str(latest), "-q"
    ).stdout
    assert out.strip() == str(latest)
    assert json.loads((latest / "state.json").read_text())["steps"] == 12
    best = cluster.det("t", "download", str(first), "--best", "-o", str(tmp_path / "b")).stdout
    assert best.startswith(f"Local checkpoint path:\n{tmp_path / 'b'}\n"), best
    # The killed trial never validated: its newest checkpoint comes first.
    steps_best = json.loads((tmp_path / "b" / "state.json").read_text())["steps"]
    newest = cluster.get(f"/checkpoints/{killed['latest_checkpoint']}")["checkpoint"]
    assert steps_best == newest["steps_completed"] and 2 <= steps_best < 12
    by_uuid = cluster.det(
        "t",
        "download",
        str(first),
        "--uuid",
        second["latest_checkpoint"],
        "-o",
        str(tmp_path / "u"),
        "-q",
    ).stdout
    assert by_uuid.strip() == str(tmp_path / "u")
    both = cluster.det("t", "download", str(first), "--latest", "--best", check=False)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    half = cluster.det("t", "download", str(first), "--best", "--sort-by", "loss", check=False)
    assert half.returncode == 1
    assert "--sort-by and --smaller-is-better must be set together" in half.stderr
    latest_sorted = cluster.det(
        "t",
        "download",
        str(first),
        "--latest",
        "--sort-by",
        "loss",
        "--smaller-is-better",
        "true",
        check=False,
    )
    assert latest_sorted.returncode == 1 and "can only be used with --best" in latest_sorted.stderr

    # The SDK's trial checkpoints, as Determined sorts them.
    client.login(master=cluster.url, user="admin", password=ADMIN_PASSWORD)
    trial = client.get_trial(second["id"])
    ranked = trial.list_checkpoints()  # best first by the searcher metric, then newest first
    assert [c.steps_completed for c in ranked] == [12, 10, 8, 6, 4, 2]
    by_steps = trial.list_checkpoints(
        sort_by=client.CheckpointSortBy.BATCH_NUMBER, order_by=client.OrderBy.ASC
    )
    assert [c.steps_completed for c in by_steps] == [2, 4, 6, 8, 10, 12]
    assert [c.steps_completed for c in trial.list_checkpoints("loss", client.OrderBy.ASC, 1)] == [
        12
    ]
    with pytest.raises(AssertionError, match="both set, or neither"):
        trial.list_checkpoints(sort_by="loss")
    with pytest.warns(FutureWarning):
        assert trial.top_checkpoint().steps_completed == 12
    with pytest.warns(FutureWarning):
        assert trial.select_checkpoint(latest=True).steps_completed == 12
    with pytest.warns(FutureWarning):
        pick = trial.select_checkpoint(uuid=second["latest_checkpoint"])
        assert pick.uuid == second["latest_checkpoint"]
    with pytest.warns(FutureWarning), pytest.raises(AssertionError, match="Exactly one"):
        trial.select_checkpoint(latest=True, best=True)

    # The registry commands scripts parse (`--json`), and `det model move`.
    made = json.loads(cluster.det("model", "create", "trial-calls", "--json").stdout)
    assert made["name"] == "trial-calls"
    version = json.loads(
        cluster.det(
            "m", "register-version", "trial-calls", second["latest_checkpoint"], "--json"
        ).stdout
    )
    assert version["version"] == 1
    moved = cluster.det("model", "move", "trial-calls", "Uncategorized").stdout
    assert "nothing to move" in moved
    away = cluster.det("model", "move", "trial-calls", "research", check=False)
    assert away.returncode == 1 and "detlab has one workspace" in away.stderr


def test_sdk_trial_kill_ends_only_that_trial(cluster: Cluster) -> None:
    from harness.experimental import client

    text = config(
        cluster,
        {"name": "random", "max_trials": 2, "max_concurrent_trials": 1},
        {"max_length": 10, "every": 2, "sleep": 0.3, "lr": 1.0},
    )
    exp_id = submit(cluster, text, SCRIPTS)
    client.login(master=cluster.url, user="admin", password=ADMIN_PASSWORD)
    trial = client.get_experiment(exp_id).await_first_trial(interval=0.1)
    trial.kill()  # before or while it runs: either way it ends CANCELED
    ended = cluster.wait_trial(trial.id, lambda t: t["state"] in TERMINAL, timeout=120)
    assert ended["state"] == "CANCELED", cluster.diagnose(exp_id)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert sorted(t["state"] for t in d["trials"]) == ["CANCELED", "COMPLETED"]
    # Someone else's trial: 403, naming whose experiment it is.
    cluster.det("user", "create", "mallory", "--password", "mallory-pass-1")
    other = client.Determined(master=cluster.url, user="mallory", password="mallory-pass-1")
    with pytest.raises(Exception, match="only its owner or an admin"):
        other.get_trial(trial.id).kill()

    # `det user deactivate|activate NAME` (admins), as Determined's.
    out = cluster.det("u", "deactivate", "mallory").stdout
    assert out.strip() == "Deactivated user mallory"
    assert client.get_user_by_name("mallory").active is False
    with pytest.raises(Exception):  # noqa: B017 - a deactivated user cannot log in
        client.Determined(master=cluster.url, user="mallory", password="mallory-pass-1")
    cluster.det("user", "activate", "mallory")
    back = client.Determined(master=cluster.url, user="mallory", password="mallory-pass-1")
    assert back.whoami().active is True


def test_checkpoint_cli_as_determined_spells_it(cluster: Cluster, tmp_path: Path) -> None:
    # `det c` (Determined's short form), `--output-dir`, `-q`, `--mode master`, and `delete`
    # with Determined's comma-separated UUIDs.
    storage = {"type": "shared_fs", "host_path": str(cluster.ckpt_dir), "save_trial_latest": 5}
    text = config(
        cluster,
        {"name": "single"},
        {"max_length": 4, "every": 2, "lr": 1.0},
        checkpoint_storage=storage,
    )
    exp_id = submit(cluster, text, SCRIPTS)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    (trial,) = d["trials"]
    # `det e` alone lists the experiments, as Determined's does.
    assert cluster.det("e").stdout == cluster.det("e", "list").stdout
    assert f"{exp_id}" in cluster.det("e").stdout
    # `det e create` flags Determined has and detlab cannot honour fail naming why.
    cfg = cluster.tmp / "one.yaml"
    cfg.write_text(text)
    for flags, why in (
        (["--project_id", "7"], "detlab has one project, 'Uncategorized' (id 1)"),
        (["--local"], "--local is not supported"),
        (["-p", "8080"], "-p/--publish is not supported"),
    ):
        r = cluster.det("e", "create", str(cfg), str(SCRIPTS), *flags, check=False)
        assert r.returncode == 1 and why in r.stderr, (flags, r.stderr)
    # `det e logs ID --tail/--head N`: the first trial's, as `det t logs`.
    for flag in ("--tail", "--head"):
        exp_lines = cluster.det("e", "logs", str(exp_id), flag, "2").stdout
        trial_lines = cluster.det("t", "logs", str(trial["id"]), flag, "2").stdout
        assert exp_lines == trial_lines and len(exp_lines.splitlines()) == 2, exp_lines
    as_json = cluster.det("t", "logs", str(trial["id"]), "--tail", "2", "--json").stdout
    records = [json.loads(line) for line in as_json.splitlines()]
    tail_text = cluster.det("t", "logs", str(trial["id"]), "--tail", "2").stdout.splitlines()
    assert len(records) == 2 and all(
        text.endswith(r["line"]) for r, text in zip(records, tail_text, strict=True)
    ), (records, tail_text)
    assert all(r["trial_id"] == trial["id"] and "timestamp" in r for r in records)
    uuids = [c["uuid"] for c in cluster.get(f"/trials/{trial['id']}/checkpoints")["checkpoints"]]
    assert len(uuids) == 2
    out = cluster.det("c", "download", uuids[0], "--output-dir", str(tmp_path / "a"), "-q")
    assert out.stdout.strip() == str(tmp_path / "a")
    assert (tmp_path / "a" / "state.json").is_file()
    via = cluster.det(
        "checkpoint", "download", uuids[1], "--mode", "master", "-o", str(tmp_path / "m")
    ).stdout
    assert via.strip().endswith("(through the master)"), via
    assert (tmp_path / "m" / "state.json").is_file()
    bad = cluster.det("c", "download", uuids[0], "--mode", "sideways", check=False)
    assert bad.returncode == 2 and "invalid choice: 'sideways'" in bad.stderr
    out = cluster.det("c", "delete", ",".join(uuids), "--yes").stdout
    assert out.startswith("Deleting 2 checkpoint(s)"), out
    for uuid in uuids:
        state = cluster.get(f"/checkpoints/{uuid}")["checkpoint"]["state"]
        assert state in ("DELETING", "DELETED"), state
