"""`--context DIR` end to end (issue 38): a real master and agent; a command, a shell and a
notebook started with `det ... --context` find the directory's files in their working
directory, without what `.detignore` lists; another user's task, holding its own session token,
cannot read them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.cluster import Cluster, wait_for
from tests.notebooks._nb import base_url, bearer, execute, kernel_socket, new_kernel, user_token

pytestmark = pytest.mark.integration

LIST_FILES = "cat data.txt; echo; find . -path ./.local -prune -o -type f -print | sort"


@pytest.fixture
def cluster3(cluster_factory: Any) -> Cluster:
    """A notebook, a shell and a command at once: three slots."""
    c: Cluster = cluster_factory()
    c.start_agent("agent-1", slots=3)
    return c


def context_dir(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    (ctx / "pkg").mkdir(parents=True)
    (ctx / "secret").mkdir()
    (ctx / "data.txt").write_text("forty-two")
    (ctx / "pkg" / "helper.py").write_text("ANSWER = 42\n")
    (ctx / "run.sh").write_text("#!/bin/sh\necho ran-$1\n")
    (ctx / "run.sh").chmod(0o755)
    (ctx / "weights.ckpt").write_bytes(b"\0" * 4096)
    (ctx / "secret" / "key").write_text("never uploaded")
    (ctx / ".detignore").write_text("# large or private\n*.ckpt\nsecret/\n")
    return ctx


def assert_context_files(listing: str) -> None:
    assert "forty-two" in listing, listing
    assert "./pkg/helper.py" in listing and "./run.sh" in listing, listing
    assert "weights.ckpt" not in listing and "secret" not in listing, listing


def test_a_command_shell_and_notebook_see_their_context(cluster3: Cluster, tmp_path: Path) -> None:
    cluster, ctx = cluster3, context_dir(tmp_path)

    # A command: its output (followed by det) shows the files, an executable stays one, and
    # the directory is importable.
    run = cluster.det(
        "cmd",
        "run",
        "--context",
        str(ctx),
        "--",
        "sh",
        "-c",
        f"{LIST_FILES}; ./run.sh ok; python3 -c 'import pkg.helper as h; print(h.ANSWER * 2)'",
    )
    assert_context_files(run.stdout)
    assert "ran-ok" in run.stdout and "84" in run.stdout

    # A shell (Determined's short form, -c): a command in it sees them too.
    shell = cluster.det_json("shell", "start", "-c", str(ctx), "-d")
    opened = cluster.det("shell", "open", shell["id"], "--", "sh", "-c", LIST_FILES)
    assert_context_files(opened.stdout)
    cluster.det("shell", "kill", shell["id"])

    # A notebook: JupyterLab's file browser lists them, and a kernel reads them.
    nb = cluster.det_json("notebook", "start", "--no-browser", "--context", str(ctx))
    base = base_url(nb)
    listing = requests.get(base + "api/contents", headers=bearer(cluster.token), timeout=30)
    assert listing.status_code == 200, listing.text
    names = {item["name"] for item in listing.json()["content"]}
    assert {"data.txt", "pkg", "run.sh"} <= names and not names & {"weights.ckpt", "secret"}
    ws = kernel_socket(base, new_kernel(base, cluster.token), cluster.token)
    try:
        assert execute(ws, "open('data.txt').read()") == "'forty-two'"
    finally:
        ws.close()
    cluster.det("notebook", "kill", nb["id"])


def _targz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


# Run inside mallory's task, as an attacker would: its own session token against the admin's
# task's context, then its own.
PROBE = """
import os, requests
def get(task):
    url = os.environ["DET_MASTER"] + "/api/v1/tasks/" + task + "/context"
    auth = {"Authorization": "Bearer " + os.environ["DET_SESSION_TOKEN"]}
    return requests.get(url, headers=auth, timeout=30).status_code
print("OTHER", get(open("victim.txt").read().strip()))
print("OWN", get(os.environ["DET_TASK_ID"]))
"""


def test_another_users_task_cannot_read_a_context(cluster3: Cluster, tmp_path: Path) -> None:
    cluster = cluster3
    victim = cluster.det_json("shell", "start", "-c", str(context_dir(tmp_path)), "-d")
    mallory = user_token(cluster, "mallory")
    body = {"entrypoint": ["python3", "probe.py"]}
    archive = _targz({"probe.py": PROBE, "victim.txt": victim["id"]})
    r = requests.post(
        cluster.url + "/api/v1/commands",
        files={
            "config": (None, json.dumps(body), "application/json"),
            "context": ("c.tar.gz", archive, "application/gzip"),
        },
        headers=bearer(mallory),
        timeout=60,
    )
    assert r.status_code == 201, r.text
    cmd = r.json()["command"]["id"]

    def ended() -> dict | None:
        task = cluster.get(f"/tasks/{cmd}")["task"]
        return task if task["state"] in ("COMPLETED", "ERROR", "CANCELED") else None

    task = wait_for(ended, 180, what="mallory's command to end")
    lines = [log["line"] for log in cluster.get(f"/tasks/{cmd}/logs")["logs"]]
    assert task["state"] == "COMPLETED", lines
    assert any("OTHER 403" in line for line in lines), lines
    assert any("OWN 200" in line for line in lines), lines
    # Her own login cannot read the victim's context either.
    url = f"{cluster.url}/api/v1/tasks/{victim['id']}/context"
    assert requests.get(url, headers=bearer(mallory), timeout=30).status_code == 403
    cluster.det("shell", "kill", victim["id"])
