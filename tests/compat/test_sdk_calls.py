"""The Python SDK calls real Determined 0.38 code makes (`determined.experimental.client`), as
its docs show them, against a real cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster import ADMIN_PASSWORD, Cluster
from tests.compat._util import SCRIPTS
from tests.compat.test_alias import python

pytestmark = pytest.mark.integration


def test_client_is_the_same_module_whatever_the_import_order() -> None:
    r = python(
        "import determined.experimental.client\n"
        "from determined.experimental import client\n"
        "import harness.client\n"
        "assert client is determined.experimental.client is harness.client\n"
        "for name in ('get_model', 'list_models', 'whoami', 'get_workspace',"
        " 'iter_trials_metrics', 'stream_trials_validation_metrics'):\n"
        "    assert callable(getattr(client, name)), name\n"
        "print('ok')\n"
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_sdk_calls_of_determined_0_38(cluster: Cluster, tmp_path: Path) -> None:
    from harness.experimental import client

    client.login(master=cluster.url, user="admin", password=ADMIN_PASSWORD)
    (tmp_path / "extra.txt").write_text("x")
    config = {
        "name": "sdk-calls",
        "entrypoint": "python3 core_script.py",
        "hyperparameters": {"max_length": 6, "every": 3, "lr": 1.0},
        "searcher": {"name": "single", "metric": "loss"},
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": str(cluster.ckpt_dir),
            "save_trial_latest": 5,
        },
    }
    exp = client.create_experiment(
        config=config, model_dir=str(SCRIPTS), includes=[str(tmp_path / "extra.txt")]
    )
    assert exp.wait(interval=0.2) == client.ExperimentState.COMPLETED
    code = Path(exp.download_code(str(tmp_path / "code")))
    assert (code / "extra.txt").read_text() == "x" and (code / "core_script.py").is_file()

    # Experiment metadata.
    exp.set_description("a baseline")
    exp.add_label("baseline")
    exp.add_label("v2")
    exp.remove_label("baseline")
    exp.reload()
    assert (exp.description, exp.labels) == ("a baseline", ["v2"])
    exp.archive()
    assert client.get_experiment(exp.id).archived is True
    exp.unarchive()
    assert client.get_experiment(exp.id).archived is False

    # Checkpoints: sorted by a metric, metadata added and removed on the master.
    (trial,) = exp.list_trials()
    best = exp.list_checkpoints(sort_by="loss", order_by=client.OrderBy.ASC, max_results=1)
    assert [c.steps_completed for c in best] == [6]
    ckpt = best[0]
    ckpt.add_metadata({"framework": "torch", "nested": {"a": 1}})
    again = client.get_checkpoint(ckpt.uuid)
    assert again.metadata["framework"] == "torch" and again.metadata["nested"] == {"a": 1}
    assert again.metadata["steps_completed"] == 6  # what the trial stored stays
    ckpt.remove_metadata(["framework"])
    assert "framework" not in client.get_checkpoint(ckpt.uuid).metadata
    assert ckpt.metadata["nested"] == {"a": 1}

    # Metrics, per trial and across trials.
    train = list(trial.stream_training_metrics())
    assert [m.steps_completed for m in train] == [3, 6]
    assert all(isinstance(m, client.TrainingMetrics) for m in train)
    val = list(trial.stream_validation_metrics())
    assert [(m.steps_completed, m.metrics["loss"]) for m in val] == [(6, pytest.approx(1 / 7))]
    assert isinstance(val[0], client.ValidationMetrics) and val[0].end_time is not None
    across = list(client.iter_trials_metrics([trial.id], group="training"))
    assert [(m.trial_id, m.steps_completed) for m in across] == [(trial.id, 3), (trial.id, 6)]
    assert [m.steps_completed for m in client.stream_trials_validation_metrics([trial.id])] == [6]

    # The registry.
    model = client.create_model("sdk-model", description="for the SDK test")
    client.create_model("another")
    model.register_version(ckpt.uuid)
    model.register_version(ckpt.uuid)
    assert [v.version for v in model.list_versions()] == [2, 1]
    assert [m.name for m in client.list_models()] == ["another", "sdk-model"]
    assert [m.name for m in client.list_models(name="sdk")] == ["sdk-model"]
    assert client.get_model("sdk-model").description == "for the SDK test"

    # Who am I, and the one workspace.
    me = client.whoami()
    assert (me.username, me.admin, me.active) == ("admin", True, True)
    ws = client.get_workspace("Uncategorized")
    assert ws.name == "Uncategorized" and [p.name for p in ws.list_projects()] == ["Uncategorized"]
    with pytest.raises(LookupError, match="no workspaces or projects"):
        client.get_workspace("research")

    # Model edits, users and labels, as Determined 0.38's SDK spells them.
    model.set_labels(["vision", "prod"])
    model.add_metadata({"owner": "lab", "stage": "dev"})
    model.remove_metadata(["stage"])
    model.set_notes("trained on the toy set")
    model.reload()
    assert (model.labels, model.metadata, model.notes) == (
        ["vision", "prod"],
        {"owner": "lab"},
        "trained on the toy set",
    )
    model.move_to_workspace("Uncategorized")  # the one workspace: nothing moves
    with pytest.raises(LookupError, match="no workspaces or projects"):
        model.move_to_workspace("research")
    assert client.get_model_by_id(model.model_id).name == "sdk-model"
    client.get_model("another").set_labels(["prod"])
    assert client.get_model_labels() == ["prod", "vision"]  # most used first
    model.set_name("sdk-model-2")
    assert client.get_model("sdk-model-2").model_id == model.model_id
    made = client.create_user("carol", admin=False, password="carol-password-1")
    assert client.get_user_by_name("carol") == made and not made.admin
    assert client.get_user_by_id(made.user_id).username == "carol"
    assert "carol" in [u.username for u in client.list_users()]
    with pytest.raises(ValueError, match="password"):
        client.create_user("dave", admin=False)
    exp.move_to_project("Uncategorized", "Uncategorized")
    with pytest.raises(LookupError, match="project 'other'"):
        exp.move_to_project("Uncategorized", "other")
    exp.delete_tensorboard_files()

    # A checkpoint's metadata file and its deletion.
    meta = tmp_path / "metadata.json"
    ckpt.write_metadata_file(str(meta))
    assert json.loads(meta.read_text())["nested"] == {"a": 1}
    doomed = next(c for c in exp.list_checkpoints() if c.uuid != ckpt.uuid)
    doomed.delete()
    assert doomed.state in ("DELETING", "DELETED")
    session = client.Determined(master=cluster.url, user="admin", password=ADMIN_PASSWORD)
    assert session.whoami().username == "admin"
    session.logout()  # the token is revoked: this session's next call is refused
    with pytest.raises(Exception, match="401|log in|token"):
        session.whoami()
    client.logout()
