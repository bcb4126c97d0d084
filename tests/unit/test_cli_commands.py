"""The `det` CLI against a fake master: parsing, tables, --json, errors, create --follow."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Response, jsonify, request

from harness.api import auth
from harness.api.testing import FakeMaster, api_error
from harness.cli import _follow
from harness.cli.main import build_parser, main

EXP = {
    "id": 1,
    "name": "mnist",
    "description": "",
    "state": "ACTIVE",
    "owner": "ann",
    "config": {},
    "progress": 0.25,
    "num_trials": 1,
    "best_trial_id": 5,
    "best_validation": 0.12,
    "searcher_metric": "val_loss",
    "smaller_is_better": True,
    "resource_pool": "default",
    "created_at": "2026-01-02T03:04:05.123+00:00",
    "ended_at": None,
}
TRIAL = {
    "id": 5,
    "experiment_id": 1,
    "request_id": "r",
    "state": "ACTIVE",
    "display_state": "RUNNING",
    "hparams": {"lr": 0.1},
    "seed": 3,
    "restarts": 0,
    "steps_completed": 100,
    "searcher_target": 400,
    "progress": 0.25,
    "best_validation": 0.12,
    "latest_validation": 0.2,
    "latest_checkpoint": "c-1",
    "exit_reason": None,
    "allocation_id": "a",
    "agent_id": "box",
    "created_at": None,
    "ended_at": None,
}


class Cluster:
    def __init__(self, fake: FakeMaster) -> None:
        self.exp = dict(EXP)
        self.trial = dict(TRIAL)
        self.logs = [{"seq": i, "line": f"step {i}", "stream": "stdout"} for i in range(1, 4)]
        self.created: dict[str, Any] = {}
        self.describes = 0
        app = fake.app

        @app.post("/api/v1/auth/login")
        def login() -> Any:
            b = request.get_json()
            if b["password"] != "pw":
                return api_error(401, "unauthenticated", "bad username or password")
            return jsonify(token="TOK", user={"username": b["username"]})

        @app.post("/api/v1/auth/logout")
        def logout() -> Any:
            return jsonify({})

        @app.get("/api/v1/me")
        def me() -> Any:
            return jsonify(user={"id": 1, "username": "ann", "admin": True, "active": True})

        @app.get("/api/v1/users")
        def users() -> Any:
            return jsonify(users=[{"id": 1, "username": "ann", "admin": True, "active": True}])

        @app.post("/api/v1/users")
        def create_user() -> Any:
            return jsonify(user={"username": request.get_json()["username"]}), 201

        @app.get("/api/v1/experiments")
        def exps() -> Any:
            return jsonify(experiments=[self.exp], total=1)

        @app.post("/api/v1/experiments")
        def create() -> Any:
            self.created = {
                "config": request.form["config"],
                "model_def": request.files["model_def"].read(),
                "activate": request.args.get("activate"),
            }
            return jsonify(experiment={**self.exp, "id": 7}), 201

        @app.get("/api/v1/experiments/<int:eid>")
        def describe(eid: int) -> Any:
            if eid not in (1, 7):
                return api_error(404, "not_found", f"experiment {eid} not found")
            self.describes += 1
            if self.describes >= 2:  # the experiment finishes while followed
                self.exp.update(state="COMPLETED", progress=1.0)
                self.trial.update(state="COMPLETED", display_state="COMPLETED")
            return jsonify(experiment={**self.exp, "id": eid}, trials=[self.trial])

        @app.get("/api/v1/experiments/<int:eid>/trials")
        def trials(eid: int) -> Any:
            return jsonify(trials=[self.trial])

        @app.post("/api/v1/experiments/<int:eid>/pause")
        def pause(eid: int) -> Any:
            return api_error(
                409,
                "conflict",
                f"experiment {eid} is COMPLETED; only ACTIVE or PAUSED experiments can be paused",
            )

        @app.post("/api/v1/experiments/<int:eid>/kill")
        def kill(eid: int) -> Any:
            return jsonify(experiment={**self.exp, "state": "STOPPING_CANCELED"})

        @app.get("/api/v1/trials/5")
        def trial() -> Any:
            return jsonify(trial=self.trial)

        @app.get("/api/v1/trials/5/metrics")
        def metrics() -> Any:
            return jsonify(
                metrics=[
                    {
                        "group": "validation",
                        "steps_completed": 100,
                        "metrics": {"val_loss": 0.2},
                        "reported_at": None,
                    }
                ]
            )

        @app.get("/api/v1/trials/5/logs")
        def logs() -> Any:
            after = int(request.args.get("after", 0))
            page = [ln for ln in self.logs if ln["seq"] > after]
            done = self.trial["state"] == "COMPLETED"
            return jsonify(logs=page, last_seq=page[-1]["seq"] if page else after, done=done)

        @app.get("/api/v1/agents")
        def agents() -> Any:
            slots = [
                {"index": 0, "type": "cpu", "allocation_id": "a"},
                {"index": 1, "type": "cpu", "allocation_id": None},
            ]
            return jsonify(
                agents=[
                    {
                        "id": "box",
                        "state": "ACTIVE",
                        "resource_pool": "default",
                        "hostname": "box",
                        "runtime": "process",
                        "last_seen": None,
                        "slots": slots,
                    }
                ]
            )

        @app.get("/api/v1/checkpoints")
        def ckpts() -> Any:
            return jsonify(
                checkpoints=[
                    {
                        "uuid": "c-1",
                        "trial_id": 5,
                        "steps_completed": 100,
                        "state": "COMPLETED",
                        "size": 2048,
                        "reported_at": None,
                    }
                ]
            )

        @app.get("/api/v1/checkpoints/c-1")
        def ckpt() -> Any:
            return jsonify(
                checkpoint={
                    "uuid": "c-1",
                    "storage": {"type": "shared_fs", "path": "/nonexistent/c-1"},
                }
            )

        @app.get("/api/v1/checkpoints/c-1/download")
        def download() -> Any:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                data = b"weights"
                info = tarfile.TarInfo("model.pt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            return Response(buf.getvalue(), mimetype="application/gzip")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "cfg"))
    for k in ("DET_USER", "DET_PASSWORD", "DET_MASTER"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(_follow.time, "sleep", lambda s: None)
    with FakeMaster() as fake:
        c = Cluster(fake)
        auth.save_token(fake.url, "ann", "TOK")
        yield c, fake.url


def run(url: str, *argv: str) -> int:
    return main(["-m", url, *argv])


# ---- parsing ------------------------------------------------------------------------------


def test_parse_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_MASTER", raising=False)
    args = build_parser().parse_args(["experiment", "create", "c.yaml", "dir", "-f", "--paused"])
    assert args.master == "http://127.0.0.1:8080"
    assert (args.config, args.model_dir, args.follow, args.paused) == ("c.yaml", "dir", True, True)
    monkeypatch.setenv("DET_MASTER", "http://m:1")
    assert build_parser().parse_args(["agent", "list"]).master == "http://m:1"
    args = build_parser().parse_args(["e", "describe", "3", "--json"])
    assert args.id == [3] and args.json  # a list: Determined's describe takes 1,2,3


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "list"]) == 2  # needs --experiment or --trial
    assert main(["experiment", "describe", "notanint"]) == 2
    assert main([]) == 2
    assert "usage:" in capsys.readouterr().err


# ---- output -------------------------------------------------------------------------------


def test_experiment_list_table_and_json(
    cluster: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = cluster
    assert run(url, "experiment", "list") == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "STATE", "PROGRESS"]
    assert row.split()[:4] == ["1", "mnist", "ACTIVE", "25.0%"]
    assert "2026-01-02 03:04:05" in row
    assert not any(ch in out for ch in "│─┃━┌")
    assert run(url, "experiment", "list", "--all", "--json") == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == 1


def test_describe_trial_agents_checkpoints(
    cluster: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = cluster
    assert run(url, "experiment", "describe", "1", "--json") == 0
    detail = json.loads(capsys.readouterr().out)
    assert detail["experiment"]["id"] == 1 and detail["trials"][0]["id"] == 5
    assert run(url, "experiment", "describe", "1") == 0
    out = capsys.readouterr().out
    assert "Searcher metric:" in out and "val_loss" in out
    assert "Web page:" in out and f"{url}/experiments/1" in out
    assert "lr=0.1" in out.splitlines()[-1]  # hyperparameters as k=v, not a JSON dict
    assert run(url, "trial", "describe", "5", "--metrics") == 0
    out = capsys.readouterr().out
    assert "VAL_LOSS" in out and "Hyperparameters:" in out and "lr=0.1" in out
    assert "Exit reason" not in out and "Ended" not in out  # empty lines are left out
    assert run(url, "trial", "describe", "5", "--json") == 0
    assert json.loads(capsys.readouterr().out)["trial"]["id"] == 5
    assert run(url, "agent", "list") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:7] == ["box", "ACTIVE", "default", "box", "process", "2", "1"]
    assert run(url, "checkpoint", "list", "--trial", "5") == 0
    assert "2.0 KiB" in capsys.readouterr().out
    assert run(url, "checkpoint", "list", "--experiment", "1", "--json") == 0
    assert json.loads(capsys.readouterr().out)[0]["uuid"] == "c-1"
    assert run(url, "user", "list", "--json") == 0
    assert json.loads(capsys.readouterr().out)[0]["username"] == "ann"


def test_describe_several_experiments_as_determined(
    cluster: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Determined's `det e describe 1,7`: each in turn; --json a list.
    _, url = cluster
    assert run(url, "experiment", "describe", "1,7", "--json") == 0
    assert [d["experiment"]["id"] for d in json.loads(capsys.readouterr().out)] == [1, 7]
    assert run(url, "e", "describe", "1,7,1") == 0
    out = capsys.readouterr().out
    assert f"{url}/experiments/1" in out and f"{url}/experiments/7" in out
    assert out.count("Searcher metric:") == 2  # the repeated 1 is described once
    assert run(url, "e", "describe", "1,x") == 2
    assert "comma-separated IDs (1,2,3), not '1,x'" in capsys.readouterr().err


def test_logs(cluster: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]) -> None:
    c, url = cluster
    assert run(url, "trial", "logs", "5") == 0
    assert capsys.readouterr().out.splitlines() == ["step 1", "step 2", "step 3"]
    assert run(url, "experiment", "logs", "1") == 0
    assert capsys.readouterr().out.splitlines()[0] == "[trial 5] step 1"
    c.trial["state"] = "COMPLETED"
    assert run(url, "trial", "logs", "5", "-f") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "step 3"


def test_checkpoint_download_via_master(
    cluster: tuple[Cluster, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = cluster
    assert run(url, "checkpoint", "download", "c-1", "-o", str(tmp_path / "out")) == 0
    assert (tmp_path / "out" / "model.pt").read_bytes() == b"weights"


# ---- errors -------------------------------------------------------------------------------


def test_api_errors_are_one_line(
    cluster: tuple[Cluster, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = cluster
    assert run(url, "experiment", "pause", "1") == 1
    err = capsys.readouterr().err
    assert err == (
        "error: experiment 1 is COMPLETED; only ACTIVE or PAUSED experiments can be paused\n"
    )
    assert run(url, "experiment", "describe", "99") == 1
    assert capsys.readouterr().err == "error: experiment 99 not found\n"
    assert run(url, "experiment", "kill", "1") == 0
    assert "STOPPING_CANCELED" in capsys.readouterr().out


def test_unreachable_master(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DET_USER", "ann")
    monkeypatch.setenv("DET_PASSWORD", "pw")
    assert main(["-m", "http://127.0.0.1:9", "agent", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the master at http://127.0.0.1:9")
    assert "Traceback" not in err


def test_not_logged_in(
    cluster: tuple[Cluster, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = cluster
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("DET_USER", raising=False)
    monkeypatch.delenv("DET_PASSWORD", raising=False)
    assert main(["-m", url, "experiment", "list"]) == 1
    assert "det user login" in capsys.readouterr().err


def test_unreachable_master_is_not_reported_as_not_logged_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped URL has no cached token either: say the master does not answer."""
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("DET_USER", raising=False)
    monkeypatch.delenv("DET_PASSWORD", raising=False)
    assert main(["-m", "http://127.0.0.1:9", "experiment", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "error: cannot reach the master at http://127.0.0.1:9 "
        "(is it running? check DET_MASTER or -m)"
    ), err
    assert "login" not in err


# ---- users --------------------------------------------------------------------------------


def test_login_whoami_logout(
    cluster: tuple[Cluster, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, url = cluster
    auth.remove_token(url, "ann")
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "pw")
    assert run(url, "user", "login", "ann") == 0
    assert auth.cached_token(url) == ("ann", "TOK")
    assert run(url, "user", "whoami") == 0
    assert "ann (admin)" in capsys.readouterr().out
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "nope")
    assert run(url, "user", "login", "ann") == 1
    assert "bad username or password" in capsys.readouterr().err
    assert run(url, "user", "logout") == 0
    assert auth.cached_token(url) is None
    monkeypatch.setenv("DET_PASSWORD", "pw")
    assert run(url, "user", "login", "ann") == 0
    assert run(url, "user", "create", "bob", "--admin", "--password", "x") == 0
    assert "Created user bob" in capsys.readouterr().out


# ---- experiment create ----------------------------------------------------------------------

GOOD = """
name: mnist
entrypoint: python3 train.py
searcher: {name: single, metric: val_loss, max_length: {batches: 100}}
"""


def test_create_validates_locally(
    cluster: tuple[Cluster, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, url = cluster
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + "resources: {slots_per_trial: many}\n")
    assert run(url, "experiment", "create", str(bad), str(tmp_path / "model")) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: resources.slots_per_trial: ") and err.count("\n") == 1
    assert c.created == {}  # nothing was uploaded


def test_create_and_follow(
    cluster: tuple[Cluster, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, url = cluster
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(GOOD)
    assert run(url, "experiment", "create", str(cfg), str(tmp_path / "model"), "--paused") == 0
    assert capsys.readouterr().out == f"Created experiment 7\nWeb page: {url}/experiments/7\n"
    assert c.created["config"] == GOOD and c.created["activate"] == "false"
    with tarfile.open(fileobj=io.BytesIO(c.created["model_def"]), mode="r:gz") as tar:
        assert tar.getnames() == ["train.py"]

    c.describes = 0
    assert run(url, "experiment", "create", str(cfg), str(tmp_path / "model"), "-f") == 0
    out = capsys.readouterr().out
    assert "Created experiment 7" in out
    assert "Experiment 7 is ACTIVE" in out and "Experiment 7 is COMPLETED" in out
    assert "[trial 5] step 3" in out


def test_follow_exit_code_on_failure(
    cluster: tuple[Cluster, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, url = cluster
    c.exp["state"] = "ERROR"
    c.trial["state"] = "COMPLETED"
    c.describes = -100  # stays ERROR
    assert run(url, "experiment", "logs", "1", "-f") == 1
