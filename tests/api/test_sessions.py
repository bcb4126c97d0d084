"""Passwords and sessions like a bank's (issue 37): a password change needs the current one and
revokes every other session of the user (the caller's is reissued); a deactivation revokes
them all and a re-activation revives none; the web cookie holds a session id that is no API
token; templates belong to their owner."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import login
from tests.web.conftest import make_user, signed_in


def _works(client: FlaskClient, auth: dict) -> bool:
    r = client.get("/api/v1/me", headers=auth)
    assert r.status_code in (200, 401), r.json
    return r.status_code == 200


def _web_works(browser: FlaskClient) -> bool:
    r = browser.get("/experiments")
    return r.status_code == 200


def test_changing_your_own_password_needs_it_and_revokes_every_other_session(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    first = make_user(client, admin, "bob")
    second = login(client, "bob", "bob-password")
    web = signed_in(app, "bob", "bob-password")
    url = "/api/v1/users/bob"
    r = client.patch(url, json={"password": "new-bob-password"}, headers=first)
    assert r.status_code == 400 and r.json["error"]["path"] == "current_password", r.json
    r = client.patch(
        url, json={"password": "new-bob-password", "current_password": "wrong!!!"}, headers=first
    )
    assert r.status_code == 403 and r.json["error"]["path"] == "current_password", r.json
    assert _works(client, first) and _works(client, second) and _web_works(web)
    r = client.patch(
        url,
        json={"password": "new-bob-password", "current_password": "bob-password"},
        headers=first,
    )
    assert r.status_code == 200, r.json
    reissued = {"Authorization": f"Bearer {r.json['token']}"}
    assert _works(client, reissued), "the caller's session is reissued"
    assert not _works(client, first), "the token that made the change was replaced"
    assert not _works(client, second), "another API session of the user is revoked"
    assert not _web_works(web), "the user's web session is revoked"
    assert _works(client, admin), "nobody else's"
    bad = client.post("/api/v1/auth/login", json={"username": "bob", "password": "bob-password"})
    assert bad.status_code == 401
    assert _works(client, login(client, "bob", "new-bob-password"))


def test_an_admin_resets_a_password_without_it_and_the_users_sessions_end(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    bob = make_user(client, admin, "bob")
    web = signed_in(app, "bob", "bob-password")
    r = client.patch("/api/v1/users/bob", json={"password": "reset-password"}, headers=admin)
    assert r.status_code == 200 and "token" not in r.json, r.json
    assert not _works(client, bob) and not _web_works(web)
    assert _works(client, admin)
    # A user may not reset another's password, current one or not.
    carol = make_user(client, admin, "carol")
    r = client.patch(
        "/api/v1/users/bob",
        json={"password": "carols-choice", "current_password": "reset-password"},
        headers=carol,
    )
    assert r.status_code == 403


def test_deactivation_revokes_and_reactivation_revives_nothing(
    app: Flask, client: FlaskClient
) -> None:
    admin = login(client)
    bob = make_user(client, admin, "bob")
    web = signed_in(app, "bob", "bob-password")
    assert _works(client, bob) and _web_works(web)
    r = client.patch("/api/v1/users/bob", json={"active": False}, headers=admin)
    assert r.status_code == 200
    assert not _works(client, bob) and not _web_works(web)
    r = client.patch("/api/v1/users/bob", json={"active": True}, headers=admin)
    assert r.status_code == 200
    assert not _works(client, bob), "re-activation revives no old token"
    assert not _web_works(web), "nor an old web session"
    assert _works(client, login(client, "bob", "bob-password"))
    assert signed_in(app, "bob", "bob-password")


def test_the_web_cookie_holds_a_session_id_that_is_no_api_token(app: Flask) -> None:
    web = signed_in(app)
    cookie = web.get_cookie("detlab_session")
    assert cookie is not None
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    values = serializer.loads(cookie.value)
    assert "token" not in values and set(values) >= {"sid", "csrf_token"}, sorted(values)
    api = app.test_client()
    for value in values.values():
        if isinstance(value, str):
            r = api.get("/api/v1/me", headers={"Authorization": f"Bearer {value}"})
            assert r.status_code == 401, (value, r.json)
    r = api.get("/api/v1/me", headers={"Authorization": f"Bearer {values['sid']}"})
    assert "web session id is not an API token" in r.json["error"]["message"]
    assert _web_works(web), "the session itself still works in the browser"


def test_templates_belong_to_their_owner(client: FlaskClient) -> None:
    admin = login(client)
    alice = make_user(client, admin, "alice")
    bob = make_user(client, admin, "bob")
    url = "/api/v1/templates/alices"
    r = client.put(url, json={"config": {"max_restarts": 1}}, headers=alice)
    assert r.status_code == 201 and r.json["template"]["owner"] == "alice"
    # Others read and use it ...
    assert client.get(url, headers=bob).status_code == 200
    r = client.post(url + "/render", json={"config": "name: x"}, headers=bob)
    assert r.status_code == 200 and r.json["config"]["max_restarts"] == 1
    # ... but may neither change nor remove it; the owner and admins may.
    for method, body in (("PUT", {"config": {"max_restarts": 9}}), ("DELETE", None)):
        r = client.open(url, method=method, json=body, headers=bob)
        assert r.status_code == 403, r.json
        assert "belongs to alice" in r.json["error"]["message"]
    assert client.get(url, headers=bob).json["template"]["config"] == {"max_restarts": 1}
    assert client.put(url, json={"config": {"max_restarts": 2}}, headers=alice).status_code == 200
    assert client.put(url, json={"config": {"max_restarts": 3}}, headers=admin).status_code == 200
    assert client.delete(url, headers=alice).status_code == 200
