"""A Core API trial whose second checkpoint upload is killed halfway (SIGKILL after one file).

The first checkpoint is stored and registered; the second leaves some objects in the bucket
and must never be registered.
"""

from __future__ import annotations

import logging
import os
import signal

import harness as det


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core:
        with core.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
            (path / "a.bin").write_bytes(b"a" * 1000)
        logging.info("stored %s", uuid)
        storage = core.checkpoint.storage
        real = storage._upload_files  # type: ignore[attr-defined]

        def upload_one_then_die(files: list, *rest: object) -> None:
            real(files[:1], *rest)  # rest: the transfer journal
            logging.info("KILLED UPLOAD of %d files after 1", len(files))
            os.kill(os.getpid(), signal.SIGKILL)

        storage._upload_files = upload_one_then_die  # type: ignore[attr-defined]
        with core.checkpoint.store_path({"steps_completed": 2}) as (path, uuid):
            logging.info("writing %s", uuid)
            for i in range(4):
                (path / f"part{i}.bin").write_bytes(os.urandom(2000))


if __name__ == "__main__":
    main()
