"""A command's own `environment.image` and `bind_mounts` on the docker runtime (issue 38): the
task's container is made from the image it names (not the default) and gets its mounts, as a
trial's does; a read-only mount stays read-only."""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cluster import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(600),
]


@pytest.fixture
def marked_image(default_image: str) -> Iterator[str]:
    """The default image plus one environment variable: a build with no RUN step (offline)."""
    import docker

    client = docker.from_env()
    tag = "detlab/test-marked:1"
    dockerfile = f"FROM {default_image}\nENV DETLAB_MARKER=from-the-named-image\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    client.images.remove(tag, noprune=False)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A host directory any task user can read (pytest's tmp_path is root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix="detlab-mount-"))
    d.chmod(0o755)
    (d / "data.txt").write_text("mounted-data")
    (d / "data.txt").chmod(0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_command_runs_in_the_image_it_names_with_its_bind_mounts(
    dcluster: Cluster, marked_image: str, shared_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "cmd.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "environment": {"image": {"cpu": marked_image, "cuda": "never/pulled:1"}},
                "bind_mounts": [
                    {"host_path": str(shared_dir), "container_path": "/mnt/d", "read_only": True}
                ],
            }
        )
    )
    run = dcluster.det(
        "cmd",
        "run",
        "--config-file",
        str(config),
        "--",
        "sh",
        "-c",
        'echo "marker=$DETLAB_MARKER data=$(cat /mnt/d/data.txt)"; '
        "touch /mnt/d/new 2>/dev/null && echo writable || echo read-only",
    )
    assert "marker=from-the-named-image data=mounted-data" in run.stdout, run.stdout
    lines = run.stdout.splitlines()
    assert "read-only" in lines and "writable" not in lines, run.stdout
    assert not (shared_dir / "new").exists()
    assert "ignored" not in run.stdout + run.stderr  # neither key is warned about any more
