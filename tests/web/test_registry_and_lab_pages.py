"""The model registry's pages (list, versions, aliases, lineage links) and the users and
templates pages, through Flask's test client on real PostgreSQL."""

from __future__ import annotations

import uuid

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import login, start_one, submit, trial_auth
from tests.web.conftest import make_user, signed_in


def _registered_version(app: Flask, client: FlaskClient, auth: dict) -> tuple[dict, str]:
    exp_id = submit(client, auth)["experiment"]["id"]
    spec = start_one(app, client)
    ckpt = str(uuid.uuid4())
    r = client.post(
        "/api/v1/checkpoints",
        json={
            "uuid": ckpt,
            "trial_id": spec["trial_id"],
            "steps_completed": 40,
            "metadata": {},
            "resources": {"model.pt": 1},
        },
        headers=trial_auth(spec),
    )
    assert r.status_code == 201, r.json
    r = client.post(
        f"/api/v1/trials/{spec['trial_id']}/metrics",
        json={
            "reports": [{"group": "validation", "steps_completed": 40, "metrics": {"loss": 0.125}}]
        },
        headers=trial_auth(spec),
    )
    assert r.status_code == 200, r.json
    r = client.post(
        "/api/v1/models",
        json={"name": "digits mlp", "labels": ["cv"], "description": "<b>v</b>"},
        headers=auth,
    )
    assert r.status_code == 201, r.json
    r = client.post(
        "/api/v1/models/digits mlp/versions",
        json={"checkpoint_uuid": ckpt, "comment": "first"},
        headers=auth,
    )
    assert r.status_code == 201, r.json
    r = client.put(
        "/api/v1/models/digits mlp/aliases/production", json={"version": 1}, headers=auth
    )
    assert r.status_code == 200, r.json
    return {"exp_id": exp_id, **spec}, ckpt


def test_models_page_lists_versions_aliases_and_lineage(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    spec, ckpt = _registered_version(app, client, auth)
    assert (
        client.post("/api/v1/models", json={"name": "old-model"}, headers=auth).status_code == 201
    )
    assert client.post("/api/v1/models/old-model/archive", headers=auth).status_code == 200
    web = signed_in(app)

    page = web.get("/models")
    assert page.status_code == 200
    assert 'href="/models/digits%20mlp"' in page.text
    assert "&lt;b&gt;v&lt;/b&gt;" in page.text and "production → v1" in page.text  # escaped
    assert "old-model" not in page.text  # archived: only on request
    assert "old-model" in web.get("/models?archived=1").text

    model = web.get("/models/digits mlp")
    assert model.status_code == 200
    row = model.text.split('data-version="1"', 1)[1].split("</tr>", 1)[0]
    # lineage back to the experiment, the trial (its checkpoints) and the checkpoint itself
    assert f'href="/experiments/{spec["exp_id"]}"' in row
    assert f'href="/trials/{spec["trial_id"]}#checkpoints"' in row
    assert ckpt in row and "production" in row and "first" in row
    assert "loss 0.125" in row and "lr=0.1" in row
    assert "Alias history" in model.text
    assert web.get("/models/nope").status_code == 404
    assert 'href="/models"' in web.get("/experiments").text  # in the navigation


def test_users_page_is_for_admins_and_templates_are_readable(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    make_user(client, auth, "ana")
    r = client.put(
        "/api/v1/templates/gpu-small",
        json={"config": "resources: {slots_per_trial: 1, priority: 40}\n"},
        headers=auth,
    )
    assert r.status_code in (200, 201), r.json
    admin = signed_in(app)
    users = admin.get("/users")
    assert users.status_code == 200
    assert 'data-user="ana"' in users.text and 'data-user="admin"' in users.text
    assert 'href="/users"' in admin.get("/experiments").text

    ana = signed_in(app, "ana", "ana-password")
    assert ana.get("/users").status_code == 403
    assert 'href="/users"' not in ana.get("/experiments").text
    templates = ana.get("/templates")
    assert templates.status_code == 200
    assert 'data-template="gpu-small"' in templates.text and "priority: 40" in templates.text
