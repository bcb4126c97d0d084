"""Fixtures: an S3 server and a GCS emulator per test session, a fresh bucket per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import app, client  # noqa: F401 - the in-process master fixtures
from tests.checkpoints.servers import (
    S3_KEY,
    S3_SECRET,
    gcs_client,
    gcs_emulator,
    moto_server,
    s3_client,
)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        yield url


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gcs_emulator(tmp_path_factory.mktemp("gcs") / "gcs.log") as url:
        old = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = url
        yield url
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old


@pytest.fixture
def s3_storage(s3_endpoint: str) -> dict[str, Any]:
    """A `checkpoint_storage` config of type s3 on a new bucket."""
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    return {
        "type": "s3",
        "bucket": bucket,
        "prefix": "exp",
        "endpoint_url": s3_endpoint,
        "access_key": S3_KEY,
        "secret_key": S3_SECRET,
    }


@pytest.fixture
def gcs_storage(gcs_endpoint: str) -> dict[str, Any]:
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    gcs_client(gcs_endpoint).create_bucket(bucket)
    return {"type": "gcs", "bucket": bucket, "prefix": "exp"}


@pytest.fixture(params=["s3", "gcs"])
def object_storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(f"{request.param}_storage")


def bucket_keys(storage: dict[str, Any]) -> dict[str, int]:
    """Every object in the config's bucket: `{key: size}`."""
    if storage["type"] == "s3":
        client = s3_client(storage["endpoint_url"])
        out: dict[str, int] = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=storage["bucket"]):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = obj["Size"]
        return out
    client = gcs_client(os.environ["STORAGE_EMULATOR_HOST"])
    return {b.name: b.size for b in client.list_blobs(storage["bucket"])}


def uuids_in(storage: dict[str, Any]) -> set[str]:
    """Checkpoint uuids that have at least one object in the bucket (the trials' TensorBoard
    files, under `tensorboard/`, are not checkpoints)."""
    prefix = (storage.get("prefix") or "").strip("/")
    out = set()
    for key in bucket_keys(storage):
        rest = key[len(prefix) + 1 :] if prefix else key
        out.add(rest.split("/", 1)[0])
    return out - {"tensorboard"}


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path
