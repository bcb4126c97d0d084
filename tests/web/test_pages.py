"""Every page through Flask's test client on real PostgreSQL: content, filters, live fragments."""

from __future__ import annotations

import json
import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from detlab.protocol import PROTOCOL_VERSION
from tests.api.conftest import AGENT, poll, schedule, start_one, trial_auth
from tests.web.conftest import CONFIG, signed_in, submit

ASHA = """
name: asha-web
entrypoint: python3 train.py
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, base: 10}
  layers: {type: categorical, vals: [1, 2]}
searcher: {name: adaptive_asha, metric: loss, max_length: {batches: 64}, max_trials: 8,
  divisor: 4, max_rungs: 3, mode: aggressive}
"""


def ids_in_table(html: str) -> list[int]:
    body = html.split('id="exp-rows"', 1)[1]
    return [int(x) for x in re.findall(r'<tr data-id="(\d+)"', body)]


def named(config: str, name: str) -> str:
    return config.replace("name: api-test", f"name: {name}")


def test_signed_out_visitors_go_to_sign_in(app: Flask) -> None:
    c = app.test_client()
    r = c.get("/experiments?state=ACTIVE")
    assert r.status_code == 302
    assert r.headers["Location"].startswith("/login?next=")
    assert "state%3DACTIVE" in r.headers["Location"]
    assert c.get("/").status_code == 302
    r = c.get("/trials/1/logs.json")
    assert r.status_code == 401 and r.json["error"]["code"] == "unauthenticated"
    # A live refresh after the session ended gets 401 (htmx swaps nothing), not the sign-in page.
    r = c.get("/experiments/rows", headers={"HX-Request": "true"})
    assert r.status_code == 401
    login = c.get("/login")
    assert login.status_code == 200 and 'name="password"' in login.text


def test_sign_in_sets_a_safe_cookie_and_sign_out_ends_it(app: Flask) -> None:
    c = app.test_client()
    page = c.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    bad = c.post("/login", data={"username": "admin", "password": "nope", "csrf_token": token})
    assert bad.status_code == 401 and "Wrong username or password" in bad.text
    r = c.post(
        "/login",
        data={
            "username": "admin",
            "password": "admin-password",
            "csrf_token": token,
            "next": "/cluster",
        },
    )
    assert r.status_code == 302 and r.headers["Location"] == "/cluster"
    cookie = r.headers["Set-Cookie"]
    assert "detlab_session=" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    page = c.get("/experiments")
    assert page.status_code == 200 and "admin (admin)" in page.text
    # The pages send a restrictive CSP: no inline script can run even if one slipped through.
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    stolen = c.get_cookie("detlab_session").value
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)
    out = c.post("/logout", data={"csrf_token": csrf})
    assert out.status_code == 302 and out.headers["Location"] == "/login"
    # The old cookie's token was revoked: replaying it does not sign anyone in.
    other = app.test_client()
    other.set_cookie("detlab_session", stolen)
    assert other.get("/experiments").status_code == 302


def test_sign_in_never_redirects_off_site(app: Flask) -> None:
    for target in ("https://evil.example/x", "//evil.example/x", "javascript:alert(1)"):
        c = app.test_client()  # signing in starts a new session (and CSRF token)
        token = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/login").text).group(1)
        r = c.post(
            "/login",
            data={
                "username": "admin",
                "password": "admin-password",
                "csrf_token": token,
                "next": target,
            },
        )
        assert r.status_code == 302 and r.headers["Location"] == "/experiments", target


def test_experiments_filters_sort_and_pages(app: Flask, client: FlaskClient) -> None:
    from tests.web.conftest import make_user

    admin = client.post(
        "/api/v1/auth/login", json={"username": "admin", "password": "admin-password"}
    ).json["token"]
    admin_auth = {"Authorization": f"Bearer {admin}"}
    bob = make_user(client, admin_auth, "bob")
    a = submit(client, admin_auth, named(CONFIG, "alpha-run"))["experiment"]["id"]
    b = submit(client, admin_auth, named(CONFIG, "beta-run"))["experiment"]["id"]
    c_ = submit(client, bob, named(CONFIG, "gamma-100%"))["experiment"]["id"]
    assert client.post(f"/api/v1/experiments/{b}/pause", headers=admin_auth).status_code == 200
    web = signed_in(app)

    page = web.get("/experiments")
    assert ids_in_table(page.text) == [c_, b, a]  # newest first
    assert "3 found" in page.text
    assert ids_in_table(web.get("/experiments?state=PAUSED").text) == [b]
    assert ids_in_table(web.get("/experiments?state=ACTIVE&state=PAUSED").text) == [c_, b, a]
    assert ids_in_table(web.get("/experiments?state=active,paused").text) == [c_, b, a]
    assert ids_in_table(web.get("/experiments?owner=bob").text) == [c_]
    assert ids_in_table(web.get("/experiments?q=RUN").text) == [b, a]
    assert ids_in_table(web.get("/experiments?q=100%25").text) == [c_]  # % is literal
    assert ids_in_table(web.get("/experiments?q=1_0").text) == []  # _ is literal
    assert ids_in_table(web.get("/experiments?sort=name&order=asc").text) == [a, b, c_]
    assert ids_in_table(web.get("/experiments?sort=owner&order=desc").text)[0] == c_
    assert ids_in_table(web.get("/experiments?sort=state&order=asc").text)[-1] == b
    first = web.get("/experiments?per_page=2")
    assert ids_in_table(first.text) == [c_, b]
    assert "Page 1 of 2" in first.text and "page=2" in first.text
    second = web.get("/experiments?per_page=2&page=2")
    assert ids_in_table(second.text) == [a]
    # The filters stay in the links (a filtered view is a shareable URL).
    assert "owner=bob" in web.get("/experiments?owner=bob").text.split("sort=name")[0][-200:]
    # The live fragment applies the same filters.
    rows = web.get("/experiments/rows?state=PAUSED")
    assert rows.status_code == 200 and rows.text.lstrip().startswith("{") is False
    assert ids_in_table(rows.text) == [b]
    assert 'hx-trigger="every 5s"' in rows.text and "state=PAUSED" in rows.text
    # Bad filters are refused with a message naming the problem.
    bad = web.get("/experiments?state=SLEEPING")
    assert bad.status_code == 400 and "unknown state &#39;SLEEPING&#39;" in bad.text
    assert web.get("/experiments?sort=colour").status_code == 400
    assert web.get("/experiments?page=0").status_code == 400


def test_experiment_page_and_actions(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    exp_id = submit(client, admin_auth)["experiment"]["id"]
    web = signed_in(app)
    page = web.get(f"/experiments/{exp_id}")
    assert page.status_code == 200
    assert "api-test" in page.text and "searcher:" in page.text  # header + config YAML
    assert "max_restarts: 2" in page.text
    trial_id = client.get(f"/api/v1/experiments/{exp_id}", headers=admin_auth).json["trials"][0][
        "id"
    ]
    assert f'href="/trials/{trial_id}#logs"' in page.text  # one click to a trial's logs
    assert 'data-action="pause"' in page.text and 'data-action="kill"' in page.text
    assert 'data-action="activate"' not in page.text  # only what the state allows

    r = web.post(
        f"/experiments/{exp_id}/pause",
        data={"csrf_token": web.csrf, "next": f"/experiments/{exp_id}"},
    )
    assert r.status_code == 302 and r.headers["Location"] == f"/experiments/{exp_id}"
    state = client.get(f"/api/v1/experiments/{exp_id}", headers=admin_auth).json["experiment"]
    assert state["state"] == "PAUSED"
    page = web.get(f"/experiments/{exp_id}")
    assert "pause requested" in page.text and 'data-action="activate"' in page.text
    # An action the state does not allow is explained, not an error page.
    r = web.post(f"/experiments/{exp_id}/pause", data={"csrf_token": web.csrf})
    assert r.status_code == 302
    assert "only ACTIVE experiments can be paused" in web.get(f"/experiments/{exp_id}").text
    web.post(f"/experiments/{exp_id}/activate", data={"csrf_token": web.csrf})
    web.post(f"/experiments/{exp_id}/kill", data={"csrf_token": web.csrf})
    final = client.get(f"/api/v1/experiments/{exp_id}", headers=admin_auth).json["experiment"]
    assert final["state"] == "CANCELED"
    live = web.get(f"/experiments/{exp_id}/live")
    assert live.status_code == 200 and 'data-ended="yes"' in live.text
    assert "<html" not in live.text  # a fragment
    assert web.get("/experiments/999999").status_code == 404


def test_bulk_actions(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    ids = [submit(client, admin_auth)["experiment"]["id"] for _ in range(3)]
    web = signed_in(app)
    r = web.post(
        "/experiments/bulk",
        data={"csrf_token": web.csrf, "action": "pause", "ids": ids[:2], "next": "/experiments"},
    )
    assert r.status_code == 302
    states = {
        e["id"]: e["state"]
        for e in client.get("/api/v1/experiments", headers=admin_auth).json["experiments"]
    }
    assert [states[i] for i in ids] == ["PAUSED", "PAUSED", "ACTIVE"]
    # Pausing a paused one is skipped with the reason; the others still happen.
    web.post("/experiments/bulk", data={"csrf_token": web.csrf, "action": "pause", "ids": ids[1:]})
    page = web.get("/experiments")
    assert f"Pause: experiment(s) {ids[2]}" in page.text and "Skipped: experiment" in page.text
    web.post("/experiments/bulk", data={"csrf_token": web.csrf, "action": "kill", "ids": ids})
    states = {
        e["id"]: e["state"]
        for e in client.get("/api/v1/experiments", headers=admin_auth).json["experiments"]
    }
    assert {states[i] for i in ids} == {"CANCELED"}
    r = web.post("/experiments/bulk", data={"csrf_token": web.csrf, "action": "explode"})
    assert r.status_code == 400


def _running_trial(app: Flask, client: FlaskClient, admin_auth: dict) -> tuple[int, int, dict]:
    exp_id = submit(client, admin_auth)["experiment"]["id"]
    spec = start_one(app, client)
    return exp_id, spec["trial_id"], spec


def test_trial_page_metrics_and_logs(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    exp_id, trial_id, spec = _running_trial(app, client, admin_auth)
    auth = trial_auth(spec)
    reports = [
        {"group": "training", "steps_completed": i, "metrics": {"loss": 1.0 / i, "acc": i / 100}}
        for i in range(1, 2001)
    ] + [{"group": "validation", "steps_completed": 2000, "metrics": {"loss": 0.25}}]
    assert (
        client.post(
            f"/api/v1/trials/{trial_id}/metrics", json={"reports": reports}, headers=auth
        ).status_code
        == 200
    )
    lines = [f"epoch {i} loss={1 / (i + 1):.3f}" for i in range(400)] + ["ERROR: <b>boom</b>"]
    entries = [{"allocation_id": spec["allocation_id"], "line": x} for x in lines]
    r = client.post("/api/v1/agents/a1/logs", json={"logs": entries}, headers=AGENT)
    assert r.status_code == 200
    web = signed_in(app)

    page = web.get(f"/trials/{trial_id}")
    assert page.status_code == 200
    assert f'href="/experiments/{exp_id}"' in page.text
    assert 'value="training:acc"' in page.text and 'value="validation:loss"' in page.text
    assert "lr" in page.text and "0.1" in page.text  # hparams
    assert "ERROR: &lt;b&gt;boom&lt;/b&gt;" in page.text  # log text is escaped
    assert page.text.count('class="line stream-') == 300  # the newest 300 lines
    assert "epoch 399" in page.text and "epoch 100 " not in page.text
    assert "older lines" in page.text
    older = web.get(f"/trials/{trial_id}?before={_first_seq(page.text)}")
    assert "epoch 100 " in older.text and "epoch 399" not in older.text

    found = web.get(f"/trials/{trial_id}?q=ERROR")
    assert found.text.count('class="line stream-') == 1 and "1 matching line" in found.text
    assert web.get(f"/trials/{trial_id}?q=nomatch").text.count('class="line stream-') == 0

    first = web.get(f"/trials/{trial_id}/logs.json?after=0&limit=5").json
    assert len(first["logs"]) == 5 and first["done"] is False
    rest = web.get(f"/trials/{trial_id}/logs.json?after={first['last_seq']}&limit=5000").json
    every = first["logs"] + rest["logs"]
    assert [x["line"] for x in every if x["stream"] == "stdout"] == lines
    assert any(x["stream"] == "master" for x in every)  # the master's own lines are there too

    download = web.get(f"/trials/{trial_id}/logs.txt")
    assert download.status_code == 200 and "attachment" in download.headers["Content-Disposition"]
    text = download.get_data(as_text=True)
    assert text.count("\n") == len(every) and "[stdout] ERROR: <b>boom</b>" in text

    series = web.get(f"/trials/{trial_id}/series.json?names=loss,acc&max_points=100").json
    assert series["downsampled"] is True and series["state"] == "ACTIVE"
    assert 0 < len(series["series"]["loss"]["steps"]) <= 100
    assert series["series"]["loss"]["values"][0] == 1.0  # min/max kept: the spike at step 1
    full = web.get(f"/trials/{trial_id}/series.json?names=loss&group=validation").json
    assert full["series"]["loss"] == {"steps": [2000], "values": [0.25]}
    assert web.get(f"/trials/{trial_id}/series.json").status_code == 400

    curves = web.get(f"/experiments/{exp_id}/curves.json?group=training&metric=acc").json
    assert list(curves["trials"]) == [str(trial_id)]
    assert web.get(f"/experiments/{exp_id}/curves.json?group=weird&metric=acc").status_code == 400
    exp_page = web.get(f"/experiments/{exp_id}")
    assert 'value="validation:loss" selected' in exp_page.text
    assert web.get("/trials/424242").status_code == 404


def _first_seq(html: str) -> int:
    return int(re.search(r'data-seq="(\d+)"', html).group(1))


def test_compare_page(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    one = submit(client, admin_auth, CONFIG.replace("lr: 0.1", "lr: 0.1, bs: 32"))
    two = submit(client, admin_auth, CONFIG.replace("lr: 0.1", "lr: 0.5, bs: 32"))
    ids = []
    for e in (one, two):
        ids += [
            t["id"]
            for t in client.get(
                f"/api/v1/experiments/{e['experiment']['id']}", headers=admin_auth
            ).json["trials"]
        ]
    web = signed_in(app)
    page = web.get(f"/compare?trials={ids[0]}&trials={ids[1]}")
    assert page.status_code == 200
    assert f"Trial {ids[0]}" in page.text and f"Trial {ids[1]}" in page.text
    assert "<th>bs</th>" in page.text and "<th>lr</th>" in page.text
    diff = web.get(f"/compare?trials={ids[0]},{ids[1]}&diff=1")
    assert "<th>lr</th>" in diff.text and "<th>bs</th>" not in diff.text
    assert f'data-trials="{ids[0]},{ids[1]}"' in diff.text
    one_only = web.get(f"/compare?trials={ids[0]}")
    assert one_only.status_code == 400 and "Pick 2 to 10 trials" in one_only.text
    eleven = ",".join(str(i) for i in range(1, 12))
    assert web.get(f"/compare?trials={eleven}").status_code == 400
    assert web.get(f"/compare?trials={ids[0]},999999").status_code == 404
    assert web.get("/compare").status_code == 200  # the empty form


def test_cluster_page_and_queue(app: Flask, client: FlaskClient, admin_auth: dict) -> None:
    first = submit(client, admin_auth)["experiment"]["id"]
    second = submit(client, admin_auth)["experiment"]["id"]
    poll(client)
    body = {
        "protocol": PROTOCOL_VERSION,
        "resource_pool": "default",
        "slots": [
            {"index": 0, "type": "cpu", "stats": {"util_percent": 1.0, "memory_used_mb": 512}}
        ],
        "allocations": [],
        "wait": 0,
    }
    client.post("/api/v1/agents/a1/poll", json=body, headers=AGENT)
    assert schedule(app) == 1
    web = signed_in(app)
    page = web.get("/cluster")
    assert page.status_code == 200
    assert "a1" in page.text and "CPU 0" in page.text
    assert "waiting for 1 free slot(s)" in page.text
    assert f'data-job="{first}"' in page.text and f'data-job="{second}"' in page.text
    live = web.get("/cluster/live")
    assert live.status_code == 200 and "<html" not in live.text and "a1" in live.text
    r = web.post(f"/jobs/{second}", data={"csrf_token": web.csrf, "priority": "5"})
    assert r.status_code == 302
    jobs = client.get("/api/v1/job-queues", headers=admin_auth).json["pools"][0]["jobs"]
    assert next(j for j in jobs if j["experiment_id"] == second)["priority"] == 5
    bad = web.post(f"/jobs/{second}", data={"csrf_token": web.csrf, "priority": "500"})
    assert bad.status_code == 400 and "priority must be an integer from 1 to 99" in bad.text
    r = web.post(f"/jobs/{first}", data={"csrf_token": web.csrf, "ahead_of": str(second)})
    assert r.status_code == 302
    jobs = client.get("/api/v1/job-queues", headers=admin_auth).json["pools"][0]["jobs"]
    assert jobs[0]["experiment_id"] == first


def test_asha_rungs_on_the_experiment_page(
    app: Flask, client: FlaskClient, admin_auth: dict
) -> None:
    exp_id = submit(client, admin_auth, ASHA)["experiment"]["id"]
    web = signed_in(app)
    page = web.get(f"/experiments/{exp_id}")
    assert page.status_code == 200
    assert "ASHA rungs" in page.text and "Rung 2" in page.text and "Rung 3" not in page.text
    assert "length 16" in page.text and "length 64" in page.text
    assert "0 results, 0 promoted" in page.text
    assert "adaptive_asha" in page.text and "loss (smaller is better)" in page.text
    data = page.text.split('id="scatter-data">', 1)[1].split("</script>", 1)[0]
    # lr is sampled on a log scale: its scatter's axis is logarithmic too
    assert {"name": "lr", "log": True} in json.loads(data)["axes"]


def test_third_party_files_come_from_the_npm_install(app: Flask) -> None:
    c = app.test_client()
    r = c.get("/static/vendor/htmx.min.js")
    assert r.status_code == 200 and b"htmx" in r.data[:2000]
    assert c.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    assert c.get("/static/vendor/uPlot.min.css").status_code == 200
    assert c.get("/static/vendor/..%2Fpackage.json").status_code == 404
    assert c.get("/static/vendor/left-pad.js").status_code == 404
    assert c.get("/static/web/app.js").status_code == 200


def test_long_series_answer_fast_then_exact(
    app: Flask, client: FlaskClient, admin_auth: dict
) -> None:
    """A series spanning more steps than the exact path handles comes first as a strided
    sample (one index probe per point), then, asked with exact=1, as the min/max envelope."""
    _, trial_id, spec = _running_trial(app, client, admin_auth)
    reports = [
        {"group": "training", "steps_completed": s, "metrics": {"loss": 1.0}}
        for s in range(0, 100_001, 1000)
    ] + [{"group": "training", "steps_completed": 50_500, "metrics": {"loss": 99.0}}]
    r = client.post(
        f"/api/v1/trials/{trial_id}/metrics", json={"reports": reports}, headers=trial_auth(spec)
    )
    assert r.status_code == 200
    web = signed_in(app)
    fast = web.get(f"/trials/{trial_id}/series.json?names=loss&max_points=11").json
    assert fast["reduction"] == "sampled" and fast["downsampled"] is True
    assert fast["series"]["loss"]["steps"] == list(range(0, 100_001, 10_000))
    assert 99.0 not in fast["series"]["loss"]["values"]  # a sample can miss a spike...
    exact = web.get(f"/trials/{trial_id}/series.json?names=loss&max_points=11&exact=1").json
    assert exact["reduction"] == "minmax"
    assert 99.0 in exact["series"]["loss"]["values"]  # ...the min/max envelope keeps it
    steps = exact["series"]["loss"]["steps"]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 100_000
    assert 50_500 in steps
    page = web.get(f"/trials/{trial_id}")
    assert 'value="training:loss"' in page.text  # names from the long series' ends


def _cloud_pools() -> list:
    from master.config import ResourcePoolConfig
    from master.provisioner.config import parse_provider

    aws = parse_provider(
        {
            "type": "aws",
            "region": "us-east-1",
            "image_id": "ami-0123",
            "instance_type": "g5.xlarge",
            "instance_slots": 1,
            "max_instances": 3,
        },
        "resource_pools[1].provider",
    )
    return [ResourcePoolConfig(name="default"), ResourcePoolConfig(name="gpu", provider=aws)]


@pytest.mark.parametrize("app", [{"resource_pools": _cloud_pools()}], indirect=True)
def test_cluster_page_shows_cloud_instances_and_the_last_launch_error(app: Flask) -> None:
    """The elastic pools' instances and launch errors are shown where people look."""
    from master.db import db, utcnow
    from master.models import Instance, ProvisionerPool

    with app.app_context():
        db.session.add(
            Instance(
                id="launch-1",
                pool="gpu",
                provider="aws",
                cloud_id="i-0abc",
                state="RUNNING",
                state_reason="its agent connected",
                instance_type="g5.xlarge",
                slots=1,
                spot=True,
            )
        )
        db.session.add(
            ProvisionerPool(
                name="gpu",
                cluster_id="c1",
                last_error="InsufficientInstanceCapacity: <no g5 in us-east-1a>",
                last_error_at=utcnow(),
            )
        )
        db.session.commit()
    page = signed_in(app).get("/cluster")
    assert page.status_code == 200
    assert 'id="cloud-gpu"' in page.text and "i-0abc" in page.text
    assert "RUNNING (spot)" in page.text and "its agent connected" in page.text
    assert "InsufficientInstanceCapacity: &lt;no g5 in us-east-1a&gt;" in page.text  # escaped
    assert 'id="cloud-default"' not in page.text  # a pool without a provider has no such card
