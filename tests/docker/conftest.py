"""Fixtures for the docker runtime's tests: a real Docker engine and the offline test image.

scripts/docker-setup (which scripts/test runs first) installs and starts the engine and builds
the image. When the engine does not answer or the image is missing, these tests FAIL saying so
(a run cannot pass by skipping them); DET_SKIP_DOCKER_SETUP=1 leaves them out on purpose, and the
test summary repeats it (tests/skipguard.py). The fixtures never build the image themselves: a
first build takes minutes and belongs to scripts/docker-setup, not to a test's time limit.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests import skipguard
from tests.cluster import Cluster
from tests.docker.image import IMAGE, engine_error, image_exists

LABEL_AGENT = "ai.detlab.agent"


@pytest.fixture(scope="session")
def docker_image() -> str:
    if skipguard.opted_out("docker"):
        pytest.skip(skipguard.opt_out_reason("docker"))
    how = "run scripts/docker-setup, or set DET_SKIP_DOCKER_SETUP=1 to leave these tests out"
    why = engine_error()
    if why:
        pytest.fail(f"{why} ({how})", pytrace=False)
    if not image_exists(IMAGE):
        pytest.fail(f"the test image {IMAGE} is not built ({how})", pytrace=False)
    return IMAGE


@pytest.fixture(scope="session")
def docker_client(docker_image: str) -> Iterator[Any]:
    import docker

    client = docker.from_env(timeout=60)
    yield client
    client.close()


def agent_containers(client: Any, agent_id: str, **filters: Any) -> list[Any]:
    # The SDK lists ids, then inspects each one; the agent may remove a container in between
    # (run 19: the docker_agent fixture's teardown, which runs while the agent still disposes of
    # its finished trial, got a 404 from the inspect). A container gone by then is not listed.
    return client.containers.list(
        all=True, filters={"label": f"{LABEL_AGENT}={agent_id}", **filters}, ignore_removed=True
    )


def remove_agent_containers(client: Any, agent_id: str) -> None:
    for c in agent_containers(client, agent_id):
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


@pytest.fixture
def docker_agent(docker_client: Any) -> Iterator[str]:
    """A fresh agent id; its containers are removed afterwards, whatever happened."""
    agent_id = f"dkr-{uuid.uuid4().hex[:8]}"
    yield agent_id
    remove_agent_containers(docker_client, agent_id)


DOCKER_AGENT_ARGS = ("--runtime", "docker", "--keep-failed-containers", "1")


@pytest.fixture
def dcluster(cluster_factory, docker_agent: str) -> Cluster:  # type: ignore[no-untyped-def]
    """A master on SQLite and one docker-runtime agent (id: `dcluster.docker_agent`)."""
    c = cluster_factory(db="sqlite")
    c.start_agent(docker_agent, 1, *DOCKER_AGENT_ARGS)
    c.docker_agent = docker_agent  # type: ignore[attr-defined]
    return c


@pytest.fixture(scope="session")
def default_image(docker_image: str) -> str:
    """The default cpu image (scripts/build-images; scripts/docker-setup builds it)."""
    from agent.images import DEFAULT_IMAGES
    from agent.images.build import PACKAGES_LABEL, image_label, packages_digest

    image = DEFAULT_IMAGES["cpu"]
    if not image_exists(image):
        pytest.fail(f"the default image {image} is not built (run scripts/docker-setup)")
    if image_label(image, PACKAGES_LABEL) != packages_digest():
        pytest.fail(
            f"the default image {image} was built with other packages than agent/images says "
            "(run scripts/build-images, which rebuilds it)"
        )
    return image
