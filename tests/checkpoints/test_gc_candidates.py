"""The GC planner's input query (`master/ckpt/candidates.py`) on PostgreSQL and SQLite: one
statement, the metric read as a number only when it is one, protection from the trials' resume
checkpoints and the model registry, dead checkpoints left out."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import event

from master.ckpt.candidates import candidates
from master.config import MasterConfig
from master.db import db, utcnow
from master.models import Checkpoint, Experiment, Metric, Model, ModelVersion, Trial


@pytest.fixture(params=["postgres", "sqlite"])
def gc_app(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Flask]:
    from master.app import create_app, prepare_database

    monkeypatch.setenv("DET_AGENT_TOKEN", "agent-secret")
    monkeypatch.setenv("DET_ADMIN_PASSWORD", "admin-password")
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    app = create_app(MasterConfig(db=url, data_dir=tmp_path / "data"))
    prepare_database(app)
    with app.app_context():
        yield app
        db.session.remove()
        db.engine.dispose()


def _ckpt(trial: Trial, steps: int, state: str = "ACTIVE") -> str:
    uuid = str(uuidlib.uuid4())
    db.session.add(
        Checkpoint(
            uuid=uuid,
            trial_id=trial.id,
            experiment_id=trial.experiment_id,
            steps_completed=steps,
            size=steps,
            state=state,
            reported_at=utcnow(),
        )
    )
    return uuid


def _val(trial: Trial, steps: int, metrics: dict) -> None:
    db.session.add(
        Metric(trial_id=trial.id, group="validation", steps_completed=steps, metrics=metrics)
    )


def test_candidates_in_one_query(gc_app: Flask) -> None:
    exp = Experiment(name="c", state="ACTIVE", owner_id=1, config={}, original_config="", seed=1)
    db.session.add(exp)
    db.session.flush()
    t1, t2 = (
        Trial(experiment_id=exp.id, request_id=str(i), state="ACTIVE", hparams={}, seed=i)
        for i in (1, 2)
    )
    db.session.add_all([t1, t2])
    db.session.flush()
    number = _ckpt(t1, 100)
    _val(t1, 100, {"loss": 0.5, "acc": 0.9})
    text = _ckpt(t1, 200)
    _val(t1, 200, {"loss": "0.25"})  # a string is not a metric value
    boolean = _ckpt(t1, 300)
    _val(t1, 300, {"loss": True})
    twice = _ckpt(t2, 100)
    _val(t2, 100, {"other": 1})
    _val(t2, 100, {"loss": 2})  # two validations at one step: the one with the number
    bare = _ckpt(t2, 200)  # no validation
    resumed = _ckpt(t2, 300)
    t2.latest_checkpoint = resumed
    registered = _ckpt(t1, 400)
    model = Model(name="m", owner_id=1)
    db.session.add(model)
    db.session.flush()
    db.session.add(ModelVersion(model_id=model.id, version=1, checkpoint_uuid=registered))
    _ckpt(t1, 500, state="DELETED")
    _ckpt(t1, 600, state="DELETING")
    db.session.commit()
    exp_id, t1_id = exp.id, t1.id  # read now: the commit expired the objects

    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        got = {c.uuid: c for c in candidates(exp_id, "loss")}
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    assert len(statements) == 1, statements
    assert set(got) == {number, text, boolean, twice, bare, resumed, registered}
    assert got[number].metric == 0.5 and got[number].trial_id == t1_id
    assert got[text].metric is None and got[boolean].metric is None
    assert got[twice].metric == 2.0
    assert got[bare].metric is None
    assert {u for u, c in got.items() if c.protected} == {resumed, registered}
    assert got[number].size == 100
    # Without a searcher metric: the same checkpoints, none with a metric.
    plain = candidates(exp_id, None)
    assert {c.uuid for c in plain} == set(got)
    assert all(c.metric is None for c in plain)
