"""`det cmd run --config-file F --config KEY=VAL` (Determined 0.38's forms): the file, then the
overrides, then the flags, in the config the master receives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import jsonify, request

from harness.api import auth
from harness.api.testing import FakeMaster
from harness.cli.main import main


def test_cmd_run_merges_the_file_the_overrides_and_the_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "cfg"))
    for k in ("DET_USER", "DET_PASSWORD", "DET_MASTER"):
        monkeypatch.delenv(k, raising=False)
    config = tmp_path / "cmd.yaml"
    config.write_text(
        "description: from the file\n"
        "resources: {slots: 2, priority: 10}\n"
        "environment:\n"
        "  image: lab/img:1\n"
        "  environment_variables: [A=1]\n"
        "bind_mounts: [{host_path: /data, container_path: /mnt/data}]\n"
    )
    posted: list[dict[str, Any]] = []
    with FakeMaster() as fake:

        @fake.app.post("/api/v1/commands")
        def create() -> Any:
            body = request.get_json(silent=True) or json.loads(request.form["config"])
            posted.append(body.get("config", body))
            return jsonify(command={"id": "c1", "state": "ACTIVE"}), 201

        auth.save_token(fake.url, "ann", "TOK")
        rc = main(
            [
                "-m", fake.url, "cmd", "run", "--config-file", str(config),
                "--config", "resources.priority=20", "--config", "resources.resource_pool=gpu",
                "--slots", "4", "--env", "B=2", "-d", "--", "python3", "-c", "print(1)",
            ]
        )  # fmt: skip
    assert rc == 0
    (got,) = posted
    assert got["entrypoint"] == ["python3", "-c", "print(1)"]
    assert got["description"] == "from the file"
    # the file's priority overridden by --config, its slots by the flag
    assert got["resources"] == {"slots": 4, "priority": 20, "resource_pool": "gpu"}
    assert got["environment"] == {"image": "lab/img:1", "environment_variables": ["A=1", "B=2"]}
    assert got["bind_mounts"] == [{"host_path": "/data", "container_path": "/mnt/data"}]


def test_cmd_run_names_a_bad_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeMaster() as fake:
        rc = main(["-m", fake.url, "cmd", "run", "--config", "resources", "--", "true"])
    assert rc != 0
    assert "expected KEY.PATH=VALUE" in capsys.readouterr().err
