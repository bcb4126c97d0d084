"""The `det` forms Determined 0.38 users type every day, run as Determined's docs show them
against a real cluster, with output checked in the shape Determined's scripts parse."""

from __future__ import annotations

import csv
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.cluster import Cluster
from tests.compat._util import SCRIPTS, TERMINAL
from tests.compat.test_cli_forms import created, write

pytestmark = pytest.mark.integration


def rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def grid(cluster: Cluster, **extra: object) -> dict:
    """Two trials (lr 1 and 3), checkpoints at 3 and 6, a validation at 6 (loss 1/(1+6 lr))."""
    return {
        "name": "daily",
        "entrypoint": "python3 core_script.py",
        "hyperparameters": {
            "max_length": 6,
            "every": 3,
            "lr": {"type": "categorical", "vals": [1.0, 3.0]},
        },
        "searcher": {"name": "grid", "metric": "loss", "smaller_is_better": True},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
        **extra,
    }


def test_daily_experiment_forms_on_a_finished_search(cluster: Cluster) -> None:
    tmp = cluster.tmp
    (tmp / "extra").mkdir()
    (tmp / "extra" / "data.txt").write_text("included dir\n")
    (tmp / "notes.md").write_text("included file\n")
    cfg = write(cluster, "grid.yaml", grid(cluster))
    out = cluster.det(
        "e",
        "create",
        cfg,
        str(SCRIPTS),
        "-i",
        str(tmp / "extra"),
        "--include",
        str(tmp / "notes.md"),
    )
    exp_id = created(out.stdout)
    e = str(exp_id)
    # `det e wait` exits 0 once it is COMPLETED.
    waited = cluster.det("e", "wait", e, "--polling-interval", "1", timeout=400)
    assert "COMPLETED" in waited.stdout, cluster.diagnose(exp_id)

    # The included files travel with the model definition (download-model-def: Determined's .tgz).
    cluster.det("e", "download-model-def", e, "--output-dir", str(tmp))
    with tarfile.open(tmp / f"experiment_{e}_model_def.tgz") as tar:
        names = set(tar.getnames())
        assert {"core_script.py", "extra/data.txt", "notes.md"} <= names, names

    # list-trials / lt --csv: Determined's header and one row per trial.
    lt = rows(cluster.det("e", "lt", e, "--csv").stdout)
    assert lt[0] == ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    assert len(lt) == 3 and {r[1] for r in lt[1:]} == {"COMPLETED"}
    assert {json.loads(r[2])["lr"] for r in lt[1:]} == {1.0, 3.0}
    assert {r[5] for r in lt[1:]} == {"6"}
    assert lt[1][3].endswith("+0000")
    trials = cluster.det_json("e", "list-trials", e)
    by_lr = {t["hparams"]["lr"]: t for t in trials}

    # config: the experiment's config as YAML.
    assert yaml.safe_load(cluster.det("e", "config", e).stdout)["searcher"]["name"] == "grid"

    # list-checkpoints --best 1: the checkpoint with the best validation (lr 3 at batch 6).
    best = rows(cluster.det("e", "lc", e, "--best", "1", "--csv").stdout)
    assert best[0][:5] == ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID"]
    assert len(best) == 2
    assert int(best[1][0]) == by_lr[3.0]["id"] and best[1][1] == "6"
    assert float(best[1][3]) == pytest.approx(1 / 19)
    every = rows(cluster.det("e", "list-checkpoints", e, "--csv").stdout)
    assert sorted(int(r[1]) for r in every[1:]) == [3, 3, 6, 6]

    # download: the experiment's best checkpoint(s) into OUTPUT/UUID (not the model definition).
    q = cluster.det("e", "download", e, "-o", str(tmp / "ckpts"), "-q")
    assert q.stdout.strip() == str(tmp / "ckpts" / best[1][4])
    assert json.loads((tmp / "ckpts" / best[1][4] / "state.json").read_text())["steps"] == 6
    two = cluster.det("e", "download", e, "--top-n", "2", "-o", str(tmp / "two"), "-q").stdout
    assert len(two.split()) == 2
    worst_first = cluster.det(
        "e",
        "download",
        e,
        "--sort-by",
        "loss",
        "--smaller-is-better",
        "false",
        "-o",
        str(tmp / "worst"),
        "-q",
    )
    worst = Path(worst_first.stdout.strip()).name  # lr 1's checkpoint at 6: the larger loss
    assert [r[4] for r in every[1:] if r[0] == str(by_lr[1.0]["id"]) and r[1] == "6"] == [worst]
    assert {Path(p).name for p in two.split()} == {worst, best[1][4]}
    bad = cluster.det("e", "download", e, "--sort-by", "loss", check=False)
    assert bad.returncode == 1 and "--smaller-is-better" in bad.stderr

    # list --csv (Determined's columns); archive hides it from the default list.
    listed = rows(cluster.det("e", "list", "--csv").stdout)
    assert listed[0] == [
        "ID",
        "Owner",
        "Name",
        "Parent ID",
        "State",
        "Progress",
        "Started",
        "Ended",
        "Resource Pool",
    ]
    assert [r[0] for r in listed[1:]] == [e] and listed[1][4] == "COMPLETED"
    assert listed[1][5] == "100.0%"
    assert "Archived experiment" in cluster.det("e", "archive", e).stdout
    assert cluster.det_json("e", "list") == []
    all_rows = rows(cluster.det("e", "list", "--all", "--csv").stdout)
    assert all_rows[0][-1] == "Archived" and all_rows[1][-1] == "True"
    cluster.det("e", "unarchive", e)
    assert [x["id"] for x in cluster.det_json("e", "list")] == [exp_id]

    # move: only the default workspace/project exists.
    cluster.det("e", "move", e, "Uncategorized", "Uncategorized")
    moved = cluster.det("e", "move", e, "research", "vision", check=False)
    assert moved.returncode == 1 and "no workspaces or projects" in moved.stderr
    # Its trials' reports became TensorBoard events in checkpoint storage (core AUTO mode).
    deleted = cluster.det("e", "delete-tb-files", e).stdout
    assert re.match(rf"Deleted [1-9]\d* TensorBoard file\(s\) of experiment {e}$", deleted)
    again = cluster.det("e", "delete-tb-files", e).stdout
    assert again.startswith("Deleted 0 TensorBoard file(s)")

    # det trial logs --head N / --tail N.
    tid = str(by_lr[1.0]["id"])
    lines = cluster.det("t", "logs", tid).stdout.splitlines()
    assert len(lines) > 3
    assert cluster.det("t", "logs", tid, "--head", "2").stdout.splitlines() == lines[:2]
    assert cluster.det("t", "logs", tid, "--tail", "2").stdout.splitlines() == lines[-2:]

    # det model list-versions: newest first.
    cluster.det("model", "create", "daily")
    for uuid in (worst, best[1][4]):  # the ones GC keeps (the latest of each trial)
        cluster.det("model", "register-version", "daily", uuid)
    versions = cluster.det_json("model", "list-versions", "daily")
    assert versions["model"]["name"] == "daily"
    assert [v["version"] for v in versions["modelVersions"]] == [2, 1]
    assert "daily" in cluster.det("model", "list-versions", "daily").stdout


def test_test_mode_validate_only_and_unpause(cluster: Cluster) -> None:
    cfg = {
        "name": "test-mode",
        "entrypoint": "python3 core_script.py",
        "hyperparameters": {"max_length": 50, "every": 10, "use_ops": True},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 50}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
        "max_restarts": 3,
    }
    path = write(cluster, "t.yaml", cfg)
    # --validate-only: validation alone, nothing created.
    v = cluster.det("e", "create", "--validate-only", path, str(SCRIPTS))
    assert "valid (nothing was created)" in v.stdout
    assert cluster.det_json("e", "list", "--all") == []
    # --test (Determined's meaning): a one-batch test experiment that trains, validates and
    # checkpoints, then is archived.
    t = cluster.det("e", "create", "--test", path, str(SCRIPTS), timeout=400)
    assert "Model definition test succeeded" in t.stdout, t.stdout + t.stderr
    assert t.stdout.count("[✔]") == 4, t.stdout
    test_id = created(t.stdout.replace("Created test experiment", "Created experiment"))
    d = cluster.experiment(test_id)
    assert d["experiment"]["archived"] is True
    assert d["experiment"]["description"].startswith("[test-mode]")
    assert d["experiment"]["config"]["max_restarts"] == 0
    assert d["trials"][0]["steps_completed"] == 1
    assert cluster.det_json("e", "list") == []  # archived: only --all shows it
    # A failing model definition: exit 1, and the stages say how far it got.
    broken = write(cluster, "b.yaml", {**cfg, "entrypoint": "python3 -c 'raise SystemExit(3)'"})
    f = cluster.det("e", "create", "-t", broken, str(SCRIPTS), check=False, timeout=400)
    assert f.returncode == 1 and "ended ERROR" in f.stderr, f.stdout + f.stderr
    assert "Testing training......... [✗]" in f.stdout

    # --paused, then `det e unpause` (Determined's alias of activate).
    exp_id = created(cluster.det("e", "create", "--paused", path, str(SCRIPTS)).stdout)
    assert cluster.experiment(exp_id)["experiment"]["state"] == "PAUSED"
    bad = cluster.det("e", "archive", str(exp_id), check=False)
    assert bad.returncode == 1 and "only an ended experiment" in bad.stderr
    cluster.det("e", "unpause", str(exp_id))
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=300)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)


def test_cluster_nouns_and_templates(cluster: Cluster) -> None:
    version = yaml.safe_load(cluster.det("version").stdout)
    assert version["master"]["version"] and version["client"]["version"]
    assert version["master_address"] == cluster.url
    info = yaml.safe_load(cluster.det("master", "info").stdout)
    assert info["database"] == "postgresql" and info["resource_pools"] == ["default"]
    config = cluster.det_json("master", "config")
    assert config["port"] == cluster.port
    assert config["db"].startswith("postgresql://")  # masking: tests/unit/test_compat_pure.py
    # Determined's line shape, `TIME [LEVEL]: message`; one record may span lines.
    logs = cluster.det("master", "logs", "--tail", "3").stdout
    assert len(re.findall(r"^\d{4}-\d\d-\d\dT\S+ \[[A-Z]+\]: ", logs, re.M)) == 3, logs
    assert "agent agent-1 registered" in cluster.det("master", "logs").stdout

    slots = rows(cluster.det("slot", "list", "--csv").stdout)
    assert slots[0] == [
        "Agent ID",
        "Resource Pool",
        "Slot ID",
        "Enabled",
        "Draining",
        "Allocation ID",
        "Task Name",
        "Type",
        "Device",
    ]
    assert [r[0] for r in slots[1:]] == ["agent-1"] and slots[1][5] == "FREE"
    pools = rows(cluster.det("rp", "list", "--csv").stdout)
    assert pools[1][0] == "default" and pools[1][5] == "1"

    tpl = write(cluster, "tpl.yaml", {"max_restarts": 2})
    assert "Created template base" in cluster.det("template", "create", "base", tpl).stdout
    again = cluster.det("template", "create", "base", tpl, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    cluster.det(
        "template", "set-value", "config", "base", write(cluster, "t2.yaml", {"max_restarts": 5})
    )
    assert cluster.det_json("template", "describe", "base")["config"]["max_restarts"] == 5
    missing = cluster.det("template", "set-value", "config", "nope", tpl, check=False)
    assert missing.returncode == 1 and "nope" in missing.stderr
