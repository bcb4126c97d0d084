"""The Docker test image: Debian bookworm (minbase) with python3, built offline and cached.

    python -m tests.docker.image          # make sure the engine answers and the image exists

The image is `debootstrap --variant=minbase --include=python3 bookworm` imported with
`docker import`: nothing detlab-specific is in it (the agent injects the harness). The rootfs
tarball (agent/images/build.py builds it; the default cpu image starts from the same one) is
cached in ~/.cache/detlab/ and the image is only built when `docker image inspect`
does not find it, so repeated runs cost nothing.

debootstrap downloads from its own default Debian mirror; set DET_DEBIAN_MIRROR to use another
(a local mirror or proxy). A first build takes a few minutes on an idle 2-core machine and much
longer on a busy one: debootstrap's progress lines are printed as they come, with the elapsed
time, and nothing here has a time limit.
"""

from __future__ import annotations

import subprocess
import sys

from agent.images.build import build_rootfs, image_exists, rootfs_tarball

IMAGE = "detlab-test-python:bookworm"


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
