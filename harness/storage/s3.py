"""Checkpoints in an S3 bucket (or any S3-compatible server: `endpoint_url`) through boto3.

Credentials come from `access_key`/`secret_key` in the config, else boto3's default chain
(environment, shared files, instance roles). Transfers go through one boto3 transfer manager per
call: every file of a checkpoint is in flight at once (up to `DEFAULT_CONCURRENCY`), and large
files go up and down in parallel multipart chunks.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from harness.storage import s3_resume
from harness.storage._object import DEFAULT_CONCURRENCY, ObjectStorageManager
from harness.storage.journal import Journal

MiB = 1024 * 1024


class S3StorageManager(ObjectStorageManager):
    scheme = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str | None = None,
        *,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        temp_dir: str | None = None,
    ) -> None:
        super().__init__(bucket, prefix, temp_dir)
        self.endpoint_url = endpoint_url
        self.concurrency = concurrency
        session = boto3.session.Session(
            aws_access_key_id=access_key or None, aws_secret_access_key=secret_key or None
        )
        self.client = session.client(
            "s3",
            endpoint_url=endpoint_url or None,
            config=Config(
                max_pool_connections=concurrency * 2,
                retries={"max_attempts": 5, "mode": "standard"},
            ),
        )
        self.transfer_config = TransferConfig(
            multipart_threshold=16 * MiB,
            multipart_chunksize=16 * MiB,
            max_concurrency=concurrency,
            use_threads=True,
        )

    def __repr__(self) -> str:  # never the credentials
        return f"S3StorageManager(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _upload_files(self, files: list[tuple[Path, str]], journal: Journal | None = None) -> None:
        s3_resume.upload_files(self, files, journal or Journal(None))

    def _download_files(
        self,
        files: list[tuple[str, Path]],
        meta: dict[str, tuple[int, str | None]] | None = None,
        journal: Journal | None = None,
    ) -> None:
        s3_resume.download_files(self, files, meta or {}, journal or Journal(None))

    def _list_meta(self, prefix: str) -> dict[str, tuple[int, str | None]]:
        out: dict[str, tuple[int, str | None]] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = (int(obj["Size"]), obj.get("ETag"))
        return out

    def _list(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = int(obj["Size"])
        return out

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            reply = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )
            errors = [e for e in reply.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise OSError(
                    f"S3 refused to delete {len(errors)} object(s) in {self.bucket}, e.g. "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )

    def _list_times(self, prefix: str) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"]] = obj["LastModified"]
        return out

    def unfinished_uploads(self) -> list[tuple[str, str, datetime]]:
        out = []
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        for page in pages:
            for up in page.get("Uploads", []):
                out.append((up["Key"], up["UploadId"], up["Initiated"]))
        return out

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "NoSuchUpload":
                raise

    def _read(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise


def from_config(config: dict[str, Any]) -> S3StorageManager:
    return S3StorageManager(
        str(config.get("bucket") or ""),
        config.get("prefix"),
        endpoint_url=config.get("endpoint_url") or os.environ.get("DET_S3_ENDPOINT_URL") or None,
        access_key=config.get("access_key"),
        secret_key=config.get("secret_key"),
        temp_dir=config.get("temp_dir"),
    )
