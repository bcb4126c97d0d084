"""Requests are bounded before they are parsed, and every free-text field has a limit (issue 37):
each refusal is a 4xx naming the field or the limit, and nothing is stored."""

from __future__ import annotations

import io

from flask import Flask
from flask.testing import FlaskClient

from master.field_limits import MAX_DESCRIPTION, MAX_LABEL, MAX_LABELS, MAX_NOTES, MAX_PASSWORD
from master.request_limits import CONFIG_BYTES, LOGIN_BYTES
from tests.api.conftest import CONFIG, login, start_one, submit

DEEP_YAML = "data: " + "{a: " * 1000 + "1" + "}" * 1000
DEEP_PATH = "data" + ".a" * 31


def _error(r, status: int = 400) -> dict:  # type: ignore[no-untyped-def]
    assert r.status_code == status, (r.status_code, r.get_data(as_text=True)[:300])
    return r.json["error"]


def test_deep_yaml_is_a_400_naming_the_limit_on_every_config_route(client: FlaskClient) -> None:
    auth = login(client)
    assert client.put("/api/v1/templates/t", json={"config": {}}, headers=auth).status_code == 201
    for method, url, body in [
        ("POST", "/api/v1/experiments", {"config": DEEP_YAML}),
        ("POST", "/api/v1/experiments?validate_only=true", {"config": DEEP_YAML}),
        ("POST", "/api/v1/experiments?template=t", {"config": DEEP_YAML}),
        ("POST", "/api/v1/experiments/preview", {"config": DEEP_YAML}),
        ("PUT", "/api/v1/templates/deep", {"config": DEEP_YAML}),
        ("POST", "/api/v1/templates/t/render", {"config": DEEP_YAML}),
    ]:
        err = _error(client.open(url, method=method, json=body, headers=auth))
        assert "nested deeper than 32 levels" in err["message"], (url, err)
        assert err.get("path", "").endswith(DEEP_PATH), (url, err)
    # The form a CLI sends too, and a JSON body nested past the JSON limit.
    r = client.post(
        "/api/v1/experiments",
        data={"config": DEEP_YAML},
        headers=auth,
        content_type="multipart/form-data",
    )
    assert "nested deeper than 32 levels" in _error(r)["message"]
    deep_json = '{"config": ' + '{"a": ' * 1000 + "1" + "}" * 1001
    r = client.put(
        "/api/v1/templates/t", data=deep_json, headers=auth, content_type="application/json"
    )
    assert "nested deeper than" in _error(r)["message"]
    assert client.get("/api/v1/templates/deep", headers=auth).status_code == 404
    assert client.get("/api/v1/experiments", headers=auth).json["total"] == 0


def _values(n: int, prefix: str) -> str:
    return f"data:\n  {prefix}: [" + ", ".join(["1"] * n) + "]\n"


def test_the_value_cap_holds_after_a_template_merge(client: FlaskClient) -> None:
    auth = login(client)
    r = client.put("/api/v1/templates/big", json={"config": _values(60_000, "t")}, headers=auth)
    assert r.status_code == 201, r.json
    config = CONFIG + _values(60_000, "c")
    for url, body in [
        ("/api/v1/templates/big/render", {"config": config}),
        ("/api/v1/experiments?template=big", {"config": config}),
        ("/api/v1/experiments?template=big&validate_only=true", {"config": config}),
    ]:
        err = _error(client.post(url, json=body, headers=auth))
        assert "more than 100,000 values" in err["message"], (url, err)
    # Each side alone is within the cap.
    r = client.post("/api/v1/templates/big/render", json={"config": CONFIG}, headers=auth)
    assert r.status_code == 200


def test_bodies_over_their_routes_limit_are_413_before_they_are_read(client: FlaskClient) -> None:
    big_login = {"username": "admin", "password": "x" * LOGIN_BYTES}
    err = _error(client.post("/api/v1/auth/login", json=big_login), 413)
    assert f"at most {LOGIN_BYTES:,} bytes for logins" in err["message"]
    # Without credentials every route takes a few KB (its answer would be a 401 anyway).
    err = _error(
        client.post("/api/v1/users", data="x" * 20_000, content_type="application/json"), 413
    )
    assert "requests without credentials" in err["message"]
    auth = login(client)
    huge = {"config": "a: " + "x" * CONFIG_BYTES}
    err = _error(client.post("/api/v1/experiments/preview", json=huge, headers=auth), 413)
    assert f"at most {CONFIG_BYTES:,} bytes" in err["message"]
    err = _error(
        client.post("/api/v1/users", json={"username": "u" * (2 << 20)}, headers=auth), 413
    )
    assert "POST /api/v1/users" in err["message"]
    # A config sent as a file beside a model definition keeps the config's limit.
    r = client.post(
        "/api/v1/experiments",
        data={"config": (io.BytesIO(b"a: " + b"x" * CONFIG_BYTES), "config.yaml")},
        headers=auth,
        content_type="multipart/form-data",
    )
    assert _error(r, 413)["path"] == "config"
    # The web sign-in form is small too.
    r = client.post("/login", data={"username": "admin", "password": "p" * 20_000})
    assert r.status_code == 413


def test_free_text_fields_are_bounded_and_named(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    too_many = [f"l{i}" for i in range(MAX_LABELS + 1)]
    cases = [
        (
            "POST",
            "/api/v1/models",
            {"name": "m", "description": "d" * (MAX_DESCRIPTION + 1)},
            "description",
        ),
        ("POST", "/api/v1/models", {"name": "m", "notes": "n" * (MAX_NOTES + 1)}, "notes"),
        ("POST", "/api/v1/models", {"name": "m", "labels": too_many}, "labels"),
        ("POST", "/api/v1/models", {"name": "m", "labels": ["x" * (MAX_LABEL + 1)]}, "labels[0]"),
        (
            "POST",
            "/api/v1/users",
            {"username": "bob", "password": "p" * (MAX_PASSWORD + 1)},
            "password",
        ),
    ]
    for method, url, body, path in cases:
        err = _error(client.open(url, method=method, json=body, headers=auth))
        assert err.get("path") == path, (body.keys(), err)
    assert client.get("/api/v1/models", headers=auth).json["models"] == []
    assert [u["username"] for u in client.get("/api/v1/users", headers=auth).json["users"]] == [
        "admin"
    ]
    # Model updates and versions, experiment edits and configs.
    assert client.post("/api/v1/models", json={"name": "m"}, headers=auth).status_code == 201
    err = _error(client.patch("/api/v1/models/m", json={"labels": too_many}, headers=auth))
    assert err["path"] == "labels" and f"at most {MAX_LABELS}" in err["message"]
    err = _error(
        client.patch(
            "/api/v1/models/m", json={"description": "d" * (MAX_DESCRIPTION + 1)}, headers=auth
        )
    )
    assert err["path"] == "description"
    assert submit(client, auth)["status"] == 201
    spec = start_one(app, client)
    exp = f"/api/v1/experiments/{spec['experiment_id']}"
    err = _error(client.patch(exp, json={"labels": too_many}, headers=auth))
    assert err["path"] == "labels"
    err = _error(client.patch(exp, json={"description": "d" * (MAX_DESCRIPTION + 1)}, headers=auth))
    assert err["path"] == "description"
    labels = "labels: [" + ", ".join(too_many) + "]\n"
    r = client.post(
        "/api/v1/experiments?validate_only=true", json={"config": CONFIG + labels}, headers=auth
    )
    assert _error(r)["path"] == "labels"
    desc = f"description: {'d' * (MAX_DESCRIPTION + 1)}\n"
    r = client.post(
        "/api/v1/experiments?validate_only=true", json={"config": CONFIG + desc}, headers=auth
    )
    assert _error(r)["path"] == "description"
    # The bounds themselves are accepted.
    ok = {"labels": [f"l{i}" for i in range(MAX_LABELS)], "description": "d" * MAX_DESCRIPTION}
    assert client.patch(exp, json=ok, headers=auth).status_code == 200
    r = client.post(
        "/api/v1/models/m/versions",
        json={"checkpoint_uuid": "x", "comment": "c" * (MAX_DESCRIPTION + 1)},
        headers=auth,
    )
    assert r.status_code in (400, 404)


def test_metrics_400s_name_the_path_and_never_the_databases_words(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    assert submit(client, auth)["status"] == 201
    spec = start_one(app, client)
    trial = {"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"}
    url = f"/api/v1/trials/{spec['trial_id']}/metrics"
    head = '{"reports": [{"group": "training", "steps_completed": 1, "metrics": '

    def post(metrics_json: str, extra: str = "") -> dict:
        r = client.post(
            url,
            data=head + metrics_json + extra + "}]}",
            headers=trial,
            content_type="application/json",
        )
        return _error(r)

    err = post('{"loss": NaN}')
    assert err["path"] == "reports[0].metrics.loss", err
    err = post('{"loss": "\\ud800"}')
    assert err["path"] == "reports[0].metrics.loss", err
    for levels in (300, 2000):
        err = post('{"a": ' + "[" * levels + "]" * levels + "}")
        assert "nested deeper than 64 levels" in err["message"], err
        assert err["path"].startswith("reports[0].metrics.a[0][0]"), err
    # A tab (any separator Python accepts) is re-written, never passed to COPY as sent.
    r = client.post(
        url,
        json={
            "reports": [
                {
                    "group": "training",
                    "steps_completed": 2,
                    "metrics": {"loss": 1.0},
                    "reported_at": "2026-01-02\t03:04:05+00:00",
                }
            ]
        },
        headers=trial,
    )
    assert r.status_code == 200, r.json
    rows = client.get(url, headers=auth).json["metrics"]
    assert [m["reported_at"][:19] for m in rows] == ["2026-01-02T03:04:05"], rows
    for bad in ("2026-01-02\t03:04:05\tx", "2026-13-01", "\\u0000"):
        r = client.post(
            url,
            json={
                "reports": [
                    {"group": "training", "steps_completed": 3, "metrics": {}, "reported_at": bad}
                ]
            },
            headers=trial,
        )
        err = _error(r)
        assert err.get("path", "").startswith("reports[0]"), err
        for word in ("COPY", "CONTEXT", "psycopg", "line 1", "column"):
            assert word not in err["message"], err
