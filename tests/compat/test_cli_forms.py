"""The `det` forms Determined users type, and configuration templates, on a real cluster."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.cluster import Cluster
from tests.compat._util import SCRIPTS, TERMINAL

pytestmark = pytest.mark.integration


def write(cluster: Cluster, name: str, obj: object) -> str:
    path = cluster.tmp / name
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return str(path)


def created(out: str) -> int:
    m = re.search(r"Created experiment (\d+)", out)
    assert m, out
    return int(m.group(1))


def test_templates_merge_at_submit_and_render_their_sources(cluster: Cluster) -> None:
    template = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
        "hyperparameters": {"max_length": 6, "every": 3},
        "environment": {"environment_variables": ["FROM_TEMPLATE=1"]},
        "max_restarts": 2,
    }
    cluster.det("template", "set", "base", write(cluster, "tpl.yaml", template))
    assert [t["name"] for t in cluster.det_json("template", "list")] == ["base"]
    details = cluster.det("tpl", "list", "-d").stdout  # Determined's --details: the configs
    assert "\nbase:\n" in details and "  max_restarts: 2\n" in details, details
    assert cluster.det_json("template", "describe", "base")["config"]["max_restarts"] == 2
    config = {
        "name": "templated",
        "entrypoint": "python3 core_script.py",
        "searcher": {"name": "single", "metric": "loss"},
        "hyperparameters": {"lr": 2.0},
        "max_restarts": 0,
    }
    cfg = write(cluster, "exp.yaml", config)
    rendered = cluster.det("template", "render", "base", cfg).stdout
    assert "max_restarts: 0" in rendered
    assert "#   checkpoint_storage.host_path: template base" in rendered
    assert "#   hyperparameters.lr: exp.yaml" in rendered
    assert "#   max_restarts: exp.yaml" in rendered
    # Without the template the config lacks storage: refused; with it, it runs.
    exp_id = created(
        cluster.det("experiment", "create", "--template", "base", cfg, str(SCRIPTS)).stdout
    )
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    stored = d["experiment"]["config"]
    assert stored["hyperparameters"]["lr"] == {"type": "const", "val": 2.0}
    assert stored["hyperparameters"]["max_length"] == {"type": "const", "val": 6}
    assert stored["checkpoint_storage"]["host_path"] == str(cluster.ckpt_dir)
    assert stored["max_restarts"] == 0
    assert d["trials"][0]["steps_completed"] == 6
    missing = cluster.det(
        "experiment", "create", "--template", "nope", cfg, str(SCRIPTS), check=False
    )
    assert missing.returncode == 1 and "template 'nope' not found" in missing.stderr
    cluster.det("template", "remove", "base")
    assert cluster.det_json("template", "list") == []


def test_create_overrides_test_mode_and_warnings(cluster: Cluster) -> None:
    config = {
        "name": "forms",
        "entrypoint": "python3 core_script.py",
        "searcher": {"name": "single", "metric": "loss"},
        "hyperparameters": {"max_length": 20, "every": 2},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
        "slurm": {"slots_per_node": 4},
        "profiling": {"enabled": True},
        "environment": {"proxy_ports": [{"proxy_port": 8080}]},
    }
    cfg = write(cluster, "forms.yaml", config)
    test = cluster.det("experiment", "create", "--validate-only", cfg, str(SCRIPTS))
    assert "valid (nothing was created)" in test.stdout
    for key in ("profiling", "environment.proxy_ports"):
        assert f"warning: {key} is accepted but not honoured" in test.stderr
    # The slurm: section is honoured on Slurm pools only; this master's pool is its agents'.
    assert "warning: slurm is accepted but ignored: resource pool 'default'" in test.stderr
    assert cluster.det_json("experiment", "list", "--all") == []
    bad = write(cluster, "bad.yaml", {**config, "max_restarts": -1})
    r = cluster.det("experiment", "create", "--validate-only", bad, str(SCRIPTS), check=False)
    assert r.returncode == 1 and "max_restarts" in r.stderr

    out = cluster.det(
        "experiment",
        "create",
        "--config",
        "hyperparameters.max_length=4",
        "--config",
        "name=overridden",
        cfg,
        str(SCRIPTS),
    )
    exp_id = created(out.stdout)
    d = cluster.wait_experiment(exp_id, TERMINAL, timeout=240)
    assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    assert d["experiment"]["name"] == "overridden"
    assert d["trials"][0]["steps_completed"] == 4

    # Checkpoint forms.
    by_exp = cluster.det_json("checkpoint", "list", str(exp_id))
    assert [c["steps_completed"] for c in by_exp] == [2, 4]
    # The same checkpoints by both forms (GC may move one's state between the two calls).
    uuids = [c["uuid"] for c in cluster.det_json("experiment", "list-checkpoints", str(exp_id))]
    assert uuids == [c["uuid"] for c in by_exp]
    text = cluster.det("checkpoint", "list", str(exp_id)).stdout
    assert by_exp[0]["uuid"] in text
    one = cluster.det_json("checkpoint", "describe", by_exp[-1]["uuid"])
    assert one["uuid"] == by_exp[-1]["uuid"] and one["metadata"]["steps_completed"] == 4
    described = cluster.det("checkpoint", "describe", one["uuid"]).stdout
    assert re.search(r"^Steps:\s+4$", described, re.M), described

    # The model definition comes back (Determined's download-model-def: a .tgz).
    cluster.det("experiment", "download-model-def", str(exp_id), "--output-dir", str(cluster.tmp))
    with tarfile.open(cluster.tmp / f"experiment_{exp_id}_model_def.tgz") as tar:
        member = tar.extractfile("core_script.py")
        assert member is not None
        assert member.read().decode() == (SCRIPTS / "core_script.py").read_text()


def test_set_label_and_master_after_the_noun(cluster: Cluster) -> None:
    config = {
        "name": "paused-one",
        "entrypoint": "python3 core_script.py",
        "searcher": {"name": "single", "metric": "loss"},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.ckpt_dir)},
    }
    cfg = write(cluster, "p.yaml", config)
    exp_id = created(cluster.det("experiment", "create", "--paused", cfg, str(SCRIPTS)).stdout)
    e = str(exp_id)
    cluster.det("experiment", "set", "name", e, "renamed")
    cluster.det("experiment", "set", "description", e, "a longer story")
    cluster.det("experiment", "set", "priority", e, "7")
    cluster.det("experiment", "set", "weight", e, "2.5")
    cluster.det("experiment", "set", "max-slots", e, "3")
    cluster.det("experiment", "label", "add", e, "baseline")
    cluster.det("experiment", "label", "add", e, "v2")
    cluster.det("experiment", "label", "remove", e, "baseline")
    bad = cluster.det("experiment", "label", "remove", e, "absent", check=False)
    assert bad.returncode == 1 and "no label 'absent'" in bad.stderr
    # `-m URL` after the noun, as Determined allows.
    described = json.loads(
        cluster.det("experiment", "-m", cluster.url, "describe", e, "--json").stdout
    )
    exp = described["experiment"]
    assert (exp["name"], exp["description"], exp["priority"], exp["weight"]) == (
        "renamed",
        "a longer story",
        7,
        2.5,
    )
    assert exp["labels"] == ["v2"]
    assert exp["config"]["resources"]["max_slots"] == 3
    bad = cluster.det("experiment", "set", "priority", e, "high", check=False)
    assert bad.returncode == 1 and "priority must be a number" in bad.stderr
    cluster.det("experiment", "kill", e)


def test_download_of_an_experiment_without_files_is_refused(
    cluster: Cluster, tmp_path: Path
) -> None:
    r = cluster.det("e", "download-model-def", "999", "--output-dir", str(tmp_path), check=False)
    assert r.returncode == 1 and "999" in r.stderr
