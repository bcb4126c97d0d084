"""The process of a TensorBoard task (`python -m harness.tb_serve`, started by an agent as the
task owner's Unix user; master/services/task/tensorboards.py writes its environment).

It copies the trials' event files from their experiments' checkpoint storage into a local
directory (`experiment/<E>/trial/<T>/...`, so each trial is one TensorBoard run), again every
DET_TENSORBOARD_REFRESH_S seconds while trials keep training, and runs TensorBoard itself on
DET_TASK_PORT under `/proxy/<task id>/`. TensorBoard has no authentication of its own, and it
listens where the master can reach it: every request must carry the task's token
(`Authorization: token <DET_TENSORBOARD_TOKEN>`), which only the master's proxy adds.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.core._tensorboard import STORAGE_DIR, sync_path
from harness.storage import build

logger = logging.getLogger("harness.tb_serve")

REFRESH_S = float(os.environ.get("DET_TENSORBOARD_REFRESH_S", "30"))


def parse_sources(raw: str) -> list[dict[str, Any]]:
    """DET_TENSORBOARD_SOURCES: `[{experiment_id, trial_ids, storage}]` (pure; ValueError
    naming what is wrong)."""
    sources = json.loads(raw or "[]")
    if not isinstance(sources, list) or not sources:
        raise ValueError("DET_TENSORBOARD_SOURCES must be a non-empty JSON list")
    for s in sources:
        if not isinstance(s, dict) or not isinstance(s.get("storage"), dict):
            raise ValueError("each TensorBoard source needs a checkpoint storage")
        int(s["experiment_id"])
        if not all(isinstance(t, int) for t in s.get("trial_ids") or []):
            raise ValueError("trial_ids must be integers")
    return sources


def trial_selector(experiment_id: int, trial_ids: Iterable[int]) -> Callable[[str], bool]:
    """Which stored paths (relative to STORAGE_DIR) belong to the chosen trials (pure)."""
    prefixes = tuple(f"{sync_path(experiment_id, t)}/" for t in trial_ids)
    return lambda rel: rel.startswith(prefixes)


def fetch(sources: list[dict[str, Any]], logdir: Path) -> int:
    """Copy every chosen trial's files into `logdir`; returns how many sources had some."""
    found = 0
    for s in sources:
        exp_id = int(s["experiment_id"])
        pick = trial_selector(exp_id, s["trial_ids"])
        try:
            backend = build(s["storage"])
            if not any(pick(rel) for rel in backend.list_files(STORAGE_DIR)):
                logger.info("experiment %d has no TensorBoard files (yet)", exp_id)
                continue
            backend.download(STORAGE_DIR, logdir, pick)
        except Exception as e:  # noqa: BLE001 - one unreachable storage must not stop the rest
            logger.warning("experiment %d: TensorBoard files not fetched: %s", exp_id, e)
            continue
        found += 1
    return found


def token_guard(app: Callable[..., Any], token: str) -> Callable[..., Any]:
    """WSGI: answer 403 to any request without `Authorization: token <token>`."""
    expected = f"token {token}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        got = str(environ.get("HTTP_AUTHORIZATION", "")).encode()
        if not hmac.compare_digest(got, expected):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"open this TensorBoard through the detlab master (/proxy/<task id>/)\n"]
        return app(environ, start_response)

    return guarded


def _refresh(sources: list[dict[str, Any]], logdir: Path, stop: threading.Event) -> None:
    while not stop.wait(REFRESH_S):
        fetch(sources, logdir)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    task_id = os.environ["DET_TASK_ID"]
    port = int(os.environ["DET_TASK_PORT"])
    token = os.environ["DET_TENSORBOARD_TOKEN"]
    sources = parse_sources(os.environ.get("DET_TENSORBOARD_SOURCES", ""))
    logdir = Path(tempfile.mkdtemp(prefix="det-tensorboard-"))
    n = fetch(sources, logdir)
    print(
        f"TensorBoard files of {n} of {len(sources)} experiment(s) in {logdir} (uid {os.getuid()})",
        flush=True,
    )
    stop = threading.Event()
    threading.Thread(target=_refresh, args=(sources, logdir, stop), daemon=True).start()

    from tensorboard import program

    def server(wsgi_app: Any, flags: Any) -> Any:
        return program.WerkzeugServer(token_guard(wsgi_app, token), flags)

    tb = program.TensorBoard(server_class=server)
    tb.configure(
        argv=[
            "tensorboard",
            "--logdir",
            str(logdir),
            "--host",
            "0.0.0.0",  # the master's proxy reaches it at the agent's address
            "--port",
            str(port),
            "--path_prefix",
            f"/proxy/{task_id}",
            "--reload_interval",
            "5",
        ]
    )
    try:
        return int(tb.main() or 0)
    finally:
        stop.set()


if __name__ == "__main__":
    sys.exit(main())
