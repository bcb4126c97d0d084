"""Build the docker runtime's default images (`scripts/build-images`; see agent/images).

    python -m agent.images.build [cpu|cuda] [--force]

cpu, offline and cached in ~/.cache/detlab/ (XDG_CACHE_HOME):
  1. the root filesystem: `debootstrap --variant=minbase --include=python3 bookworm` (the same
     tarball as the tests' base image: built once, reused by both);
  2. the Python packages: the host's pip installs PyTorch (the CPU wheel from $DET_TORCH_WHEEL or
     /opt/wheels when there, else `torch==2.13.0` from the package index), numpy, scikit-learn
     and PyYAML with `--target`, for CPython 3.11 on manylinux x86_64 (bookworm's python3);
     kept in a directory named by the hash of what was asked, so a second build skips pip;
  3. one tar of both, `docker import`ed as detlab/pytorch:2.13.0-cpu.
cuda: `docker build -f images/cuda.Dockerfile` (needs a registry for NVIDIA's base image).

Nothing happens when the image exists already with the same packages (its label
ai.detlab.packages), unless --force. Every step prints its elapsed time.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent.images import DEFAULT_IMAGES, PACKAGES, TORCH_VERSION

SUITE = "bookworm"
PYTHON_VERSION = "3.11"  # bookworm's python3
SITE = f"usr/local/lib/python{PYTHON_VERSION}/dist-packages"  # on Debian's sys.path
PLATFORM = "manylinux_2_28_x86_64"
# This pip does not widen --platform to older manylinux tags itself: wheels tagged only
# manylinux2014 (= 2_17, e.g. rpds-py under JupyterLab) need it named too. Bookworm's glibc
# (2.36) runs both.
OLDER_PLATFORMS = ("manylinux2014_x86_64",)
REPO_ROOT = Path(__file__).resolve().parents[2]
CUDA_DOCKERFILE = REPO_ROOT / "images" / "cuda.Dockerfile"


def say(msg: str, started: float | None = None) -> None:
    when = f"[{time.monotonic() - started:5.0f}s] " if started is not None else ""
    print(f"build-images: {when}{msg}", flush=True)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "detlab"


def mirror() -> str | None:
    """The Debian mirror named by DET_DEBIAN_MIRROR, or None for debootstrap's own default."""
    return os.environ.get("DET_DEBIAN_MIRROR") or None


def debootstrap_args(root: Path, mirror_url: str | None) -> list[str]:
    args = ["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(root)]
    return [*args, mirror_url] if mirror_url else args


def rootfs_tarball() -> Path:
    return cache_dir() / f"rootfs-{SUITE}-minbase-python3.tar"


def image_exists(image: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False)
    return done.returncode == 0


# The image's label naming what went into it: an image built before a package was added (e.g.
# tensorboard) is rebuilt instead of being taken for current because its tag exists.
PACKAGES_LABEL = "ai.detlab.packages"


def packages_digest() -> str:
    """Pure: a short digest of what the cpu image is asked to hold (torch + PACKAGES)."""
    return hashlib.sha256("\n".join([TORCH_VERSION, *PACKAGES]).encode()).hexdigest()[:16]


def image_label(image: str, label: str) -> str | None:
    """A label of a local image; None when the image or the label is not there."""
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    try:
        labels = json.loads(done.stdout) or {}
    except ValueError:
        return None
    value = labels.get(label) if isinstance(labels, dict) else None
    return str(value) if value is not None else None


def build_rootfs(tarball: Path, prefix: str = "image: ") -> None:
    """debootstrap into a temporary directory and pack it into `tarball` (printing progress)."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="detlab-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        where = mirror() or "debootstrap's default mirror (set DET_DEBIAN_MIRROR for another)"
        print(
            f"{prefix}building the rootfs once with debootstrap {SUITE} (minbase + python3) from "
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
                    print(f"{prefix}[{time.monotonic() - started:5.0f}s] {line}", flush=True)
        if proc.returncode != 0:
            last = "\n".join(tail[-15:])
            raise RuntimeError(f"debootstrap failed ({proc.returncode}):\n{last}")
        print(f"{prefix}rootfs built in {time.monotonic() - started:.0f}s; packing it", flush=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(
            ["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        os.replace(partial, tarball)


def torch_requirement() -> str:
    """The CPU wheel on this disk when there is one, else the index's torch==2.13.0."""
    named = os.environ.get("DET_TORCH_WHEEL")
    if named:
        return named
    wheels = sorted(glob.glob(f"/opt/wheels/torch-{TORCH_VERSION}+cpu-cp311-*.whl"))
    return wheels[0] if wheels else f"torch=={TORCH_VERSION}"


def pip_args(target: Path, requirements: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--target",
        str(target),
        "--only-binary=:all:",
        "--platform",
        PLATFORM,
        *(arg for p in OLDER_PLATFORMS for arg in ("--platform", p)),
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--abi",
        f"cp{PYTHON_VERSION.replace('.', '')}",
        *requirements,
    ]


def site_packages(started: float) -> Path:
    """The image's Python packages, installed once per set of requirements (cached)."""
    requirements = [torch_requirement(), *PACKAGES]
    key = hashlib.sha256("\n".join([PLATFORM, PYTHON_VERSION, *requirements]).encode())
    target = cache_dir() / f"site-cpu-{key.hexdigest()[:16]}"
    if (target / ".complete").is_file():
        say(f"Python packages: cached in {target}", started)
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    say(f"pip installing {' '.join(requirements)} (a minute or two; cached afterwards)", started)
    with subprocess.Popen(
        pip_args(partial, requirements), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        tail: list[str] = []
        for line in proc.stdout:
            tail = [*tail[-30:], line.rstrip()]
            if line.startswith(("Collecting", "Installing", "Successfully", "ERROR")):
                say(f"  {line.rstrip()[:150]}", started)
    if proc.returncode != 0:
        raise RuntimeError("pip failed:\n" + "\n".join(tail[-15:]))
    shutil.rmtree(partial / "bin", ignore_errors=True)  # console scripts for the host's python
    (partial / ".complete").write_text("\n".join(requirements) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    return target


def build_cpu(image: str, started: float) -> None:
    rootfs = rootfs_tarball()
    if not rootfs.is_file():
        build_rootfs(rootfs, prefix="build-images: ")
    else:
        say(f"root filesystem: cached in {rootfs}", started)
    site = site_packages(started)
    with tempfile.TemporaryDirectory(prefix="detlab-image-", dir=cache_dir()) as tmp:
        combined = Path(tmp) / "image.tar"
        say("joining the root filesystem and the packages into one tar", started)
        shutil.copyfile(rootfs, combined)
        subprocess.run(
            [
                "tar",
                "-rf",
                str(combined),
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-C",
                str(site),
                # Into the rootfs's (existing) dist-packages: its entries, not the directory.
                f"--transform=s,^,./{SITE}/,",
                *sorted(p.name for p in site.iterdir() if p.name != ".complete"),
            ],
            check=True,
        )
        say(f"docker import as {image}", started)
        changes = [
            f"LABEL ai.detlab.image=cpu ai.detlab.torch={TORCH_VERSION} "
            f"{PACKAGES_LABEL}={packages_digest()}",
            "ENV LANG=C.UTF-8",
            'CMD ["python3"]',
        ]
        args = ["docker", "import"]
        for change in changes:
            args += ["--change", change]
        subprocess.run([*args, str(combined), image], check=True, stdout=subprocess.DEVNULL)


def build_cuda(image: str, started: float) -> None:
    say(f"docker build -f {CUDA_DOCKERFILE} (needs a registry for NVIDIA's CUDA base)", started)
    subprocess.run(
        ["docker", "build", "-f", str(CUDA_DOCKERFILE), "-t", image, str(CUDA_DOCKERFILE.parent)],
        check=True,
    )


def ensure(kind: str, force: bool = False) -> str:
    image = DEFAULT_IMAGES[kind]
    if not force and image_exists(image):
        built_with = image_label(image, PACKAGES_LABEL) if kind == "cpu" else packages_digest()
        if built_with == packages_digest():
            say(f"{image} is there already (--force rebuilds it)")
            return image
        say(f"{image} is there but holds other packages than {', '.join(PACKAGES)}: rebuilding")
    started = time.monotonic()
    (build_cpu if kind == "cpu" else build_cuda)(image, started)
    say(f"{image} is ready", started)
    return image


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scripts/build-images", description="Build the docker runtime's default images."
    )
    p.add_argument("kinds", nargs="*", metavar="cpu|cuda", help="which images (default: cpu)")
    p.add_argument("--force", action="store_true", help="rebuild even when the image exists")
    args = p.parse_args(argv)
    unknown = [k for k in args.kinds if k not in DEFAULT_IMAGES]
    if unknown:
        p.error(f"unknown image {', '.join(unknown)}: choose from {', '.join(DEFAULT_IMAGES)}")
    try:
        for kind in args.kinds or ["cpu"]:
            ensure(kind, args.force)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        print(f"build-images: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
