"""TensorBoards on the docker runtime (issue 38): `det tensorboard start` on a docker agent runs
real TensorBoard in the default image's container, reading the experiment's shared_fs files
through a read-only mount, and answers through the master's proxy on the host network and on a
bridge (its port published on the agent's host). Going around the proxy to the container's port
without the task's own token is refused."""

from __future__ import annotations

import math
from typing import Any

import pytest
import requests

from harness.core._tensorboard import metric_tag
from tests.cluster import Cluster, wait_for
from tests.docker.conftest import DOCKER_AGENT_ARGS, agent_containers
from tests.integration.test_trial_api import DIGITS, digits_config, metrics, run_to_end
from tests.notebooks._nb import bearer, user_token

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(900),
]

# The trial runs in pool `train`, the TensorBoard in pool `docker`: on a bridge a trial's
# container could not reach this test's master (127.0.0.1), so there a process agent trains.
POOLS = "resource_pools:\n  - name: train\n  - name: docker\n"


def task_port(container: Any) -> int:
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    return int(env["DET_TASK_PORT"])


@pytest.mark.parametrize("network", ["host", "bridge"])
def test_a_tensorboard_in_a_container_shows_the_trials_scalars_through_the_proxy(
    cluster_factory: Any, docker_agent: str, default_image: str, docker_client: Any, network: str
) -> None:
    cluster: Cluster = cluster_factory(db="sqlite", master_yaml=POOLS)
    cluster.start_agent(
        docker_agent,
        1,
        *DOCKER_AGENT_ARGS,
        "--resource-pool",
        "docker",
        "--container-network",
        network,
        "--container-master-url",
        cluster.url,
    )
    # On the host network the trial trains in the default image too (its PyTorchTrial writes
    # the events with the image's tensorboard); on a bridge a process agent trains.
    train_pool = "docker" if network == "host" else "train"
    if train_pool == "train":
        cluster.start_agent("trainer", 1, "--resource-pool", "train")
    config = digits_config(
        cluster,
        searcher={
            "name": "single",
            "metric": "validation_accuracy",
            "smaller_is_better": False,
            "max_length": {"batches": 40},
        },
        min_validation_period={"batches": 20},
        scheduling_unit=10,
        resources={"resource_pool": train_pool},
    )
    d, exp_id = run_to_end(cluster, config, DIGITS)
    trial_id = d["trials"][0]["id"]
    reported = metrics(cluster, trial_id)
    stored = cluster.ckpt_dir / "tensorboard" / "experiment" / str(exp_id) / "trial" / str(trial_id)
    assert any(p.name.startswith("events.out.tfevents.") for p in stored.iterdir())

    tb_cfg = cluster.tmp / "tb.yaml"
    tb_cfg.write_text("resources: {resource_pool: docker}\n")
    try:  # returns once TensorBoard answers through the proxy
        tb = cluster.det_json(
            "tensorboard", "start", str(exp_id), "--config-file", str(tb_cfg), "--no-browser",
            "--json",
        )  # fmt: skip
    except AssertionError as e:  # its log says why (the container's output, the agent's lines)
        ids = [t["id"] for t in cluster.det_json("tensorboard", "list")]
        logs = [cluster.det("tensorboard", "logs", i, check=False).stdout for i in ids]
        raise AssertionError(f"{e}\n" + "\n".join(logs)) from e
    running = agent_containers(docker_client, docker_agent, status="running")
    assert len(running) == 1, running
    assert default_image in running[0].image.tags
    base, auth = str(tb["url"]), bearer(cluster.token)
    run = f"experiment/{exp_id}/trial/{trial_id}"
    wait_for(
        lambda: run in requests.get(base + "data/runs", headers=auth, timeout=10).json(),
        60,
        0.5,
        what="the trial's run in TensorBoard",
    )
    for group in ("training", "validation"):
        for name in reported[group][-1][1]:
            r = requests.get(
                base + "data/plugin/scalars/scalars",
                params={"run": run, "tag": metric_tag(group, name)},
                headers=auth,
                timeout=10,
            )
            assert r.status_code == 200, r.text
            got = [(int(step), float(value)) for _wall, step, value in r.json()]
            want = [(s, float(m[name])) for s, m in reported[group]]
            assert [s for s, _ in got] == [s for s, _ in want], name
            assert all(
                math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, want, strict=True)
            ), (name, got, want)

    # An attacker going around the proxy to the container's port (published on the agent's
    # host on a bridge): without the task's own token, which only the proxy adds, TensorBoard
    # refuses, even with a user's bearer token or a guessed task token.
    direct = f"http://127.0.0.1:{task_port(running[0])}/proxy/{tb['id']}/data/runs"
    for headers in ({}, auth, {"Authorization": "token guessed"}):
        assert requests.get(direct, headers=headers, timeout=10).status_code == 403, headers
    # Through the proxy: only its owner (or an admin).
    assert requests.get(base + "data/runs", timeout=10).status_code == 401
    other = user_token(cluster, "mallory")
    assert requests.get(base + "data/runs", headers=bearer(other), timeout=10).status_code == 403

    cluster.det("tensorboard", "kill", tb["id"])
    wait_for(
        lambda: cluster.get(f"/tensorboards/{tb['id']}")["tensorboard"]["state"] == "CANCELED",
        120,
        what="the TensorBoard CANCELED",
    )
    wait_for(
        lambda: not agent_containers(docker_client, docker_agent, status="running"),
        120,
        what="the TensorBoard's container gone",
    )
