"""The Docker test image: Debian bookworm (minbase) with python3, built offline and cached.

    python -m tests.docker.image          # make sure the engine answers and the image exists

The image is `debootstrap --variant=minbase --include=python3 bookworm` imported with
`docker import`: nothing detlab-specific is in it (the agent injects the harness). The rootfs
tarball is cached in ~/.cache/detlab/ and the image is only built when `docker image inspect`
does not find it, so repeated runs cost nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IMAGE = "detlab-test-python:bookworm"
MIRROR = os.environ.get("DET_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "detlab"


def rootfs_tarball() -> Path:
    return cache_dir() / "rootfs-bookworm-minbase-python3.tar"


def engine_error() -> str | None:
    """Why the Docker engine cannot be used here, or None when it answers."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as e:
        return f"the Docker engine does not answer: {e}"
    return None


def image_exists(image: str = IMAGE) -> bool:
    return (
        subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, check=False
        ).returncode
        == 0
    )


def build_rootfs(tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="detlab-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        print(f"image: debootstrap bookworm (minbase + python3) from {MIRROR}", flush=True)
        proc = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3",
                "bookworm",
                str(root),
                MIRROR,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({proc.returncode}): {proc.stderr[-2000:]}")
        partial = tarball.with_suffix(".partial")
        subprocess.run(
            ["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        os.replace(partial, tarball)


def ensure_image(image: str = IMAGE) -> str:
    """Build and import the test image unless it exists; returns its name."""
    if image_exists(image):
        return image
    tarball = rootfs_tarball()
    if not tarball.is_file():
        build_rootfs(tarball)
    print(f"image: docker import {tarball} {image}", flush=True)
    with open(tarball, "rb") as f:
        subprocess.run(["docker", "import", "-", image], stdin=f, check=True, capture_output=True)
    return image


def main() -> int:
    why = engine_error()
    if why:
        print(f"image: {why}", file=sys.stderr)
        return 1
    try:
        print(f"image: {ensure_image()} is ready")
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        print(f"image: cannot build {IMAGE}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
