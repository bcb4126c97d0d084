"""Notebooks and shells on the docker runtime (issue 38): JupyterLab and the shell server run
in the default image's container, and the master's proxy reaches the port the agent gave them;
a kernel computes through the proxy, a shell command's output and status come back."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import requests

from tests.cluster import Cluster, wait_for
from tests.docker.conftest import DOCKER_AGENT_ARGS, agent_containers
from tests.notebooks._nb import (
    base_url,
    bearer,
    execute,
    kernel_socket,
    new_kernel,
    start_notebook,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(600),
]


def _ended(cluster: Cluster, kind: str, task_id: str) -> bool:
    rows = cluster.det_json(kind, "list")
    return any(r["id"] == task_id and r["state"] == "CANCELED" for r in rows)


def _task_port(container: Any) -> int:
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    return int(env["DET_TASK_PORT"])


def _refused(url: str) -> int | None:
    try:
        return requests.get(url, timeout=5).status_code
    except requests.RequestException:
        return None


@pytest.mark.parametrize("network", ["host", "bridge"])
def test_a_notebook_and_a_shell_run_in_containers_behind_the_proxy(
    cluster_factory: Any, docker_agent: str, default_image: str, docker_client: Any, network: str
) -> None:
    """On the host network the task binds the agent's port itself; on a bridge the port is
    published on the agent's host under the same number."""
    dcluster = cluster_factory(db="sqlite")
    # This engine's bridge names no gateway for the agent to derive the master's address from:
    # the URL is given as is (JupyterLab and the shell server never call the master).
    dcluster.start_agent(
        docker_agent,
        1,
        *DOCKER_AGENT_ARGS,
        "--container-network",
        network,
        "--container-master-url",
        dcluster.url,
    )
    agent = docker_agent
    try:
        nb = start_notebook(dcluster)  # returns once JupyterLab answers through the proxy
    except AssertionError as e:  # its log says why (the container's output, the agent's lines)
        ids = [r["id"] for r in dcluster.det_json("notebook", "list")]
        logs = [dcluster.det("notebook", "logs", i, check=False).stdout for i in ids]
        raise AssertionError(f"{e}\n" + "\n".join(logs)) from e
    running = agent_containers(docker_client, agent, status="running")
    assert len(running) == 1, running
    assert running[0].image.tags == [default_image] or default_image in running[0].image.tags

    # An attacker on the network going around the proxy to the task's port: without the
    # task's own token (only the proxy adds it) JupyterLab refuses, even with a user's token.
    port = _task_port(running[0])
    direct = f"http://127.0.0.1:{port}/proxy/{nb['id']}/api/kernels"
    for headers in ({}, {"Authorization": f"Bearer {dcluster.token}"}):
        assert requests.get(direct, headers=headers, timeout=10).status_code in (401, 403)
        assert requests.post(direct, json={}, headers=headers, timeout=10).status_code in (
            401,
            403,
        )

    base = base_url(nb)
    kernel = new_kernel(base, dcluster.token)
    ws = kernel_socket(base, kernel, dcluster.token)
    try:
        assert execute(ws, "6*7") == "42"
        # In the container (Docker's marker file), not a process on the agent's host.
        assert execute(ws, "__import__('os').path.exists('/.dockerenv')") == "True"
    finally:
        ws.close()
    dcluster.det("notebook", "kill", nb["id"])
    wait_for(lambda: _ended(dcluster, "notebook", nb["id"]), 120, what="the notebook CANCELED")
    wait_for(
        lambda: not agent_containers(docker_client, agent, status="running"),
        120,
        what="the notebook's container gone",
    )

    shell = dcluster.det_json("shell", "start", "-d")
    box = wait_for(
        lambda: next(iter(agent_containers(docker_client, agent, status="running")), None),
        120,
        what="the shell's container",
    )
    forged = wait_for(  # the shell server answers once it listens: refusing the bare request
        lambda: _refused(f"http://127.0.0.1:{_task_port(box)}/proxy/{shell['id']}/"),
        120,
        what="the shell server to answer",
    )
    assert forged == 403
    run = dcluster.det(
        "shell",
        "open",
        shell["id"],
        "--",
        "sh",
        "-c",
        "test -f /.dockerenv && echo in-a-container-$((6*7)); exit 4",
        check=False,
    )
    assert run.returncode == 4, (run.stdout, run.stderr)
    assert "in-a-container-42" in run.stdout
    dcluster.det("shell", "kill", shell["id"])
    wait_for(lambda: _ended(dcluster, "shell", shell["id"]), 120, what="the shell CANCELED")


@pytest.mark.parametrize("network", ["host", "bridge"])
def test_a_notebook_still_answers_through_the_proxy_after_its_agent_restarts(
    cluster_factory: Any, docker_agent: str, default_image: str, docker_client: Any, network: str
) -> None:
    """The agent dies (SIGKILL: a crash, an upgrade) and comes back; the notebook's container
    ran on, and the restarted agent reports its port again (the container's label), so the
    master's proxy still reaches it: the same kernel computes through the proxy."""
    dcluster = cluster_factory(db="sqlite")
    args = (
        *DOCKER_AGENT_ARGS, "--container-network", network, "--container-master-url", dcluster.url,
    )  # fmt: skip
    dcluster.start_agent(docker_agent, 2, *args)
    nb = start_notebook(dcluster)
    base = base_url(nb)
    kernel = new_kernel(base, dcluster.token)
    ws = kernel_socket(base, kernel, dcluster.token)
    try:
        assert execute(ws, "x = 6*7; x") == "42"
    finally:
        ws.close()
    (box,) = agent_containers(docker_client, docker_agent, status="running")
    assert box.labels["ai.detlab.proxy-port"] == str(_task_port(box))

    dcluster.stop_agent(docker_agent, signal.SIGKILL)
    dcluster.start_agent(docker_agent, 2, *args)
    # A second notebook reachable through the proxy proves the master has applied the restarted
    # agent's reports, each of which carries the first notebook's allocation too.
    second = start_notebook(dcluster)
    assert "re-attached to container" in dcluster.read_log(docker_agent)
    box.reload()
    assert box.status == "running"  # the same container, never restarted

    r = requests.get(base + "api/kernels", headers=bearer(dcluster.token), timeout=10)
    assert r.status_code == 200, (r.status_code, r.text[:300])  # 503 when the port was lost
    assert kernel in [k["id"] for k in r.json()]
    ws = kernel_socket(base, kernel, dcluster.token)
    try:
        assert execute(ws, "x + 1") == "43"  # the kernel's state outlived the agent
    finally:
        ws.close()
    ids = (nb["id"], second["id"])
    for task_id in ids:
        dcluster.det("notebook", "kill", task_id)
    wait_for(lambda: all(_ended(dcluster, "notebook", i) for i in ids), 120, what="both CANCELED")
