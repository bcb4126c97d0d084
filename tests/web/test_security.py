"""Permissions, CSRF and escaping on the web pages (the server refuses, not just the buttons)."""

from __future__ import annotations

import html

from flask import Flask
from flask.testing import FlaskClient

from tests.web.conftest import CONFIG, make_user, signed_in, submit

XSS = "<script>alert(1)</script>"


def _state(client: FlaskClient, auth: dict, exp_id: int) -> str:
    return client.get(f"/api/v1/experiments/{exp_id}", headers=auth).json["experiment"]["state"]


def test_another_users_experiment_offers_no_actions_and_refuses_forged_posts(
    app: Flask, client: FlaskClient, admin_auth: dict
) -> None:
    make_user(client, admin_auth, "carol")
    theirs = submit(client, admin_auth)["experiment"]["id"]  # owned by admin
    carol = signed_in(app, "carol", "carol-password")
    mine = submit(client, make_user_token(client, "carol"))["experiment"]["id"]

    page = carol.get(f"/experiments/{theirs}")
    assert page.status_code == 200
    assert 'data-action="kill"' not in page.text and 'data-action="pause"' not in page.text
    own = carol.get(f"/experiments/{mine}")
    assert 'data-action="kill"' in own.text
    listing = carol.get("/experiments")
    assert f'name="ids" value="{mine}"' in listing.text
    assert f'name="ids" value="{theirs}"' not in listing.text

    for action in ("kill", "pause"):
        r = carol.post(f"/experiments/{theirs}/{action}", data={"csrf_token": carol.csrf})
        assert r.status_code == 403, action
        assert "only its owner or an admin" in r.text
    r = carol.post(
        "/experiments/bulk",
        data={"csrf_token": carol.csrf, "action": "kill", "ids": [mine, theirs]},
    )
    assert r.status_code == 403
    assert _state(client, admin_auth, theirs) == "ACTIVE"
    assert _state(client, admin_auth, mine) == "ACTIVE"  # all or nothing
    r = carol.post(f"/jobs/{theirs}", data={"csrf_token": carol.csrf, "priority": "1"})
    assert r.status_code == 403
    cluster = carol.get("/cluster")
    assert f'action="/jobs/{theirs}"' not in cluster.text
    assert f'action="/jobs/{mine}"' in cluster.text

    # An admin may steer anyone's experiment.
    admin = signed_in(app)
    assert 'data-action="kill"' in admin.get(f"/experiments/{mine}").text
    assert (
        admin.post(f"/experiments/{mine}/pause", data={"csrf_token": admin.csrf}).status_code == 302
    )
    assert _state(client, admin_auth, mine) == "PAUSED"


def make_user_token(client: FlaskClient, name: str) -> dict:
    r = client.post("/api/v1/auth/login", json={"username": name, "password": f"{name}-password"})
    return {"Authorization": f"Bearer {r.json['token']}"}


def test_posts_without_the_csrf_token_are_refused(
    app: Flask, client: FlaskClient, admin_auth: dict
) -> None:
    exp_id = submit(client, admin_auth)["experiment"]["id"]
    web = signed_in(app)
    for data in ({}, {"csrf_token": "forged"}, {"csrf_token": ""}):
        for url in (
            f"/experiments/{exp_id}/kill",
            "/experiments/bulk",
            f"/jobs/{exp_id}",
            "/logout",
        ):
            r = web.post(url, data={**data, "action": "kill", "ids": [exp_id], "priority": "1"})
            assert r.status_code == 400, (url, data)
            assert "security token" in r.text
    assert _state(client, admin_auth, exp_id) == "ACTIVE"
    # Another session's token does not work either.
    other = signed_in(app)
    r = web.post(f"/experiments/{exp_id}/kill", data={"csrf_token": other.csrf})
    assert r.status_code == 400
    # The header form (for scripts) is accepted like the form field.
    r = web.post(f"/experiments/{exp_id}/pause", headers={"X-CSRF-Token": web.csrf})
    assert r.status_code == 302 and _state(client, admin_auth, exp_id) == "PAUSED"
    # Signing in needs the token too (no login CSRF).
    fresh = app.test_client()
    r = fresh.post("/login", data={"username": "admin", "password": "admin-password"})
    assert r.status_code == 400


def test_names_and_text_render_as_text(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    config = CONFIG.replace("name: api-test", f"name: '{XSS}'\ndescription: '{XSS}'").replace(
        "lr: 0.1", f"lr: 0.1, note: '{XSS}'"
    )
    exp_id = submit(client, admin_auth, config)["experiment"]["id"]
    other = submit(client, admin_auth)["experiment"]["id"]
    trials = [
        t["id"]
        for e in (exp_id, other)
        for t in client.get(f"/api/v1/experiments/{e}", headers=admin_auth).json["trials"]
    ]
    web = signed_in(app)
    escaped = html.escape(XSS)
    for url in (
        "/experiments",
        "/experiments/rows",
        f"/experiments/{exp_id}",
        f"/experiments/{exp_id}/live",
        f"/trials/{trials[0]}",
        f"/compare?trials={trials[0]},{trials[1]}",
        "/cluster",
        f"/experiments?q={XSS}",
    ):
        page = web.get(url)
        assert page.status_code == 200, url
        assert XSS not in page.text, url
        assert escaped in page.text or html.escape(XSS, quote=False) in page.text, url
    # The JSON embedded for the scatter plots cannot close its script tag either.
    detail = web.get(f"/experiments/{exp_id}").text
    data = detail.split('id="scatter-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and "\\u003cscript\\u003e" in data
