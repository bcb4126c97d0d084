"""The Docker test image: Debian bookworm (minbase) with python3, built offline and cached.

    python -m tests.docker.image          # make sure the engine answers and the image exists

The image is `debootstrap --variant=minbase --include=python3 bookworm` imported with
`docker import`: nothing detlab-specific is in it (the agent injects the harness). The rootfs
tarball is cached in ~/.cache/detlab/ and the image is only built when `docker image inspect`
does not find it, so repeated runs cost nothing.

debootstrap downloads from its own default Debian mirror; set DET_DEBIAN_MIRROR to use another
(a local mirror or proxy). A first build takes a few minutes on an idle 2-core machine and much
longer on a busy one: debootstrap's progress lines are printed as they come, with the elapsed
time, and nothing here has a time limit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMAGE = "detlab-test-python:bookworm"
SUITE = "bookworm"


def mirror() -> str | None:
    """The mirror named by DET_DEBIAN_MIRROR, or None for debootstrap's own default."""
    return os.environ.get("DET_DEBIAN_MIRROR") or None


def debootstrap_args(root: Path, mirror_url: str | None) -> list[str]:
    args = ["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(root)]
    return [*args, mirror_url] if mirror_url else args


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
        where = mirror() or "debootstrap's default mirror (set DET_DEBIAN_MIRROR for another)"
        print(
            f"image: building the rootfs once with debootstrap {SUITE} (minbase + python3) from "
            f"{where}; this takes a few minutes (longer on a busy machine), later runs reuse it",
            flush=True,
        )
        started = time.monotonic()
        tail: list[str] = []
        with subprocess.Popen(
            debootstrap_args(root, mirror()),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                tail = [*tail[-40:], line]
                # I: lines are debootstrap's steps (Retrieving, Validating, Extracting, ...).
                if line.startswith(("I:", "E:", "W:")):
                    print(f"image: [{time.monotonic() - started:5.0f}s] {line}", flush=True)
        if proc.returncode != 0:
            last = "\n".join(tail[-15:])
            raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n{last}")
        print(f"image: rootfs built in {time.monotonic() - started:.0f}s; packing it", flush=True)
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
