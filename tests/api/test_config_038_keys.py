"""Determined 0.38 configs with keys detlab once refused are submitted, stored without them and
warned about; a template like Determined's own fixture (`resources.slots`) applies at submit."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.api.conftest import login, submit

LEGACY = """
name: legacy-keys
entrypoint: python3 train.py
searcher: {name: async_halving, metric: loss, num_rungs: 2, max_trials: 4,
           max_length: {batches: 8}}
hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1.0}}
preemption_timeout: 30
security: {kerberos: {config_file: /etc/krb5.conf}}
resources: {agent_label: gpus}
data_layer: {type: shared_fs}
internal: null
"""


def test_a_038_config_with_legacy_keys_is_created(client: FlaskClient) -> None:
    auth = login(client)
    r = submit(client, auth, LEGACY)
    assert r["status"] == 201, r
    stored = client.get(f"/api/v1/experiments/{r['experiment']['id']}/config", headers=auth).json
    config = stored["config"]
    assert config["searcher"]["name"] == "adaptive_asha"
    assert config["searcher"]["bracket_rungs"] == [2]
    assert "preemption_timeout" not in config and "security" not in config
    assert "agent_label" not in config["resources"]
    named = {w.split(" ", 1)[0] for w in r["warnings"]}
    assert {"preemption_timeout", "security.kerberos", "resources.agent_label"} <= named
    assert {"data_layer", "searcher.name"} <= named
    # What the user wrote is still what the experiment shows as written.
    assert stored["original"] == LEGACY


def test_a_template_with_resources_slots_applies_at_submit(client: FlaskClient) -> None:
    auth = login(client)
    template = "description: test-template\nresources:\n  slots: 1\nmax_restarts: 1\n"
    r = client.put("/api/v1/templates/fixture", json={"config": template}, headers=auth)
    assert r.status_code == 201, r.json
    config = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
    r = client.post(
        "/api/v1/experiments?template=fixture",
        data={"config": config},
        headers=auth,
        content_type="multipart/form-data",
    )
    assert r.status_code == 201, r.json
    assert r.json["experiment"]["config"]["max_restarts"] == 1
    assert any(w.startswith("resources.slots ") for w in r.json["warnings"]), r.json
