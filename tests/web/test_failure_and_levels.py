"""A failed trial's page and its experiment's page say why it failed; log lines are coloured by
the level they state, not by stream; the trial header has a live fragment."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api.conftest import AGENT, login, poll, start_one
from tests.web.conftest import CONFIG, signed_in, submit

TRACEBACK = [
    "INFO:root:epoch 1",
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "    x = load(<path>)",
    "ValueError: bad shape <3, 4>",
]


def _ship(client: FlaskClient, spec: dict, lines: list[str], stream: str = "stderr") -> None:
    entries = [{"allocation_id": spec["allocation_id"], "line": x, "stream": stream} for x in lines]
    r = client.post("/api/v1/agents/a1/logs", json={"logs": entries}, headers=AGENT)
    assert r.status_code == 200, r.json


def test_a_failed_trial_shows_its_exit_reason_and_last_error_lines(
    app: Flask, client: FlaskClient
) -> None:
    auth = login(client)
    exp = submit(client, auth, CONFIG.replace("max_restarts: 2", "max_restarts: 0"))
    exp_id = exp["experiment"]["id"]
    spec = start_one(app, client)
    _ship(client, spec, TRACEBACK)
    web = signed_in(app)
    running = web.get(f"/trials/{spec['trial_id']}")
    assert 'role="alert"' not in running.text  # not failed: nothing to say
    assert f'hx-get="/trials/{spec["trial_id"]}/head"' in running.text  # live header
    poll(client, [{"id": spec["allocation_id"], "state": "EXITED", "exit_code": 1}])
    trial = client.get(f"/api/v1/trials/{spec['trial_id']}", headers=auth).json
    trial = trial.get("trial", trial)
    assert trial["state"] == "ERROR", trial

    page = web.get(f"/trials/{spec['trial_id']}")
    summary = page.text.split('role="alert"', 1)[1].split("</div>", 1)[0]
    assert trial["exit_reason"] in summary
    assert "ValueError: bad shape &lt;3, 4&gt;" in summary  # escaped
    assert "Traceback (most recent call last):" in summary
    assert "INFO:root:epoch 1" not in summary  # only the lines that explain it
    assert "hx-get" not in page.text.split('id="trial-live"', 1)[1].split(">", 1)[0]  # ended

    exp_page = web.get(f"/experiments/{exp_id}")
    assert f"Trial {spec['trial_id']}</a> failed" in exp_page.text
    assert "ValueError: bad shape &lt;3, 4&gt;" in exp_page.text
    live = web.get(f"/experiments/{exp_id}/live")  # the fragment the page refreshes with
    assert "ValueError: bad shape" in live.text


def test_log_lines_are_coloured_by_level_not_stream(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    _ship(
        client,
        spec,
        ["INFO:root:healthy", "WARNING:root:lr high", "ERROR:root:disk full", "plain stderr"],
    )
    _ship(client, spec, ["step 1 loss 0.5"], stream="stdout")
    web = signed_in(app)
    page = web.get(f"/trials/{spec['trial_id']}").text

    def classes(text: str) -> str:
        before = page.split(text, 1)[0]
        return before.rsplit('<span class="', 1)[1].split('"', 1)[0]

    assert classes("INFO:root:healthy") == "line stream-stderr level-info"
    assert classes("WARNING:root:lr high") == "line stream-stderr level-warning"
    assert classes("ERROR:root:disk full") == "line stream-stderr level-error"
    assert classes("plain stderr") == "line stream-stderr"  # no level stated: not red
    assert classes("step 1 loss 0.5") == "line stream-stdout"
    logs = web.get(f"/trials/{spec['trial_id']}/logs.json?after=0").json["logs"]
    levels = {x["line"]: x["level"] for x in logs}
    assert levels["INFO:root:healthy"] == "info" and levels["ERROR:root:disk full"] == "error"
    assert levels["plain stderr"] is None


def test_the_trial_header_fragment_moves_with_the_trial(app: Flask, client: FlaskClient) -> None:
    auth = login(client)
    submit(client, auth)
    spec = start_one(app, client)
    web = signed_in(app)
    tid = spec["trial_id"]
    head = web.get(f"/trials/{tid}/head")
    assert head.status_code == 200 and "<dt>Steps</dt><dd>0" in head.text
    assert 'data-ended="no"' in head.text
    r = client.post(
        f"/api/v1/trials/{tid}/metrics",
        json={"reports": [{"group": "training", "steps_completed": 40, "metrics": {"loss": 1.0}}]},
        headers={"Authorization": f"Bearer {spec['env']['DET_SESSION_TOKEN']}"},
    )
    assert r.status_code == 200, r.json
    assert "<dt>Steps</dt><dd>40" in web.get(f"/trials/{tid}/head").text
    assert web.get("/trials/424242/head").status_code == 404
