"""Local object stores for the checkpoint tests: moto's S3 server and a GCS emulator on loopback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.cluster import BIN, free_port, wait_for

S3_KEY = "test-access-key-id"
S3_SECRET = "test-secret-s3cr3t-do-not-log"


def _up(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
        return True
    except requests.RequestException:
        return False


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """`moto_server` on a free loopback port; yields its endpoint URL."""
    port = free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is None and _up(url), 60, 0.2, what="moto_server")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def gcs_emulator(log: Path) -> Iterator[str]:
    """`gcp-storage-emulator` (in memory) on a free loopback port; yields its URL."""
    port = free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                str(BIN / "gcp-storage-emulator"),
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--in-memory",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is None and _up(url), 60, 0.2, what="gcs emulator")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def s3_client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    )


def gcs_client(endpoint: str):  # type: ignore[no-untyped-def]
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    from harness.storage.gcs import make_client

    return make_client()
