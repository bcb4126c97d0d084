"""The docker runtime as a newcomer meets it: a plain `det-agent` (runtime auto) on a machine
whose Docker has no registry runs examples/digits in the default image, says at start which
runtime and image it uses, and a trial whose image lacks a module says so."""

from __future__ import annotations

import collections
import re
import shutil
from pathlib import Path

import pytest

from agent.images import DEFAULT_IMAGES
from tests.cluster import Cluster
from tests.docker.image import IMAGE
from tests.docker.test_docker_runtime import TERMINAL, config, submit

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.timeout(900),
]

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


@pytest.fixture
def auto_cluster(cluster_factory, docker_agent: str, default_image: str) -> Cluster:  # type: ignore[no-untyped-def]
    """A master and one agent started the way the README says: no --runtime, no image."""
    c = cluster_factory(db="sqlite")
    c.start_agent(docker_agent, 1, "--keep-failed-containers", "1", runtime="auto")
    c.docker_agent = docker_agent  # type: ignore[attr-defined]
    return c


def test_digits_completes_in_the_default_image_under_the_default_runtime(
    auto_cluster: Cluster, tmp_path: Path
) -> None:
    agent_log = auto_cluster.read_log(auto_cluster.docker_agent)  # type: ignore[attr-defined]
    assert re.search(
        r"runtime docker \(--runtime auto and the Docker engine answers\).*"
        + re.escape(DEFAULT_IMAGES["cpu"])
        + r" \(the default for cpu slots; present here\)",
        agent_log,
    ), agent_log
    model = tmp_path / "digits"
    shutil.copytree(DIGITS, model)
    text = (DIGITS / "core_api.yaml").read_text()
    assert "environment" not in text  # the default image, not one the example names
    exp_id = submit(auto_cluster, text, model)
    d = auto_cluster.wait_experiment(exp_id, TERMINAL, timeout=600)
    assert d["experiment"]["state"] == "COMPLETED", auto_cluster.diagnose(exp_id)
    trial = d["trials"][0]
    logs = auto_cluster.logs(trial["id"])
    # train.py logs like a Determined script (logging.basicConfig + det.LOG_FORMAT): each of its
    # lines once, as under the process runtime.
    batches = [line for line in logs if re.search(r"batch \d+: \{", line)]
    assert batches, "\n".join(logs)
    twice = [line for line, n in collections.Counter(batches).items() if n > 1]
    assert not twice, "\n".join(logs)
    val = auto_cluster.get(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert val and val[-1]["metrics"]["validation_accuracy"] > 0.8, val


def test_an_image_without_a_module_the_trial_imports_says_so(
    auto_cluster: Cluster, docker_image: str
) -> None:
    text = config(auto_cluster, entrypoint="python3 -c 'import numpy'", max_restarts=0)
    exp_id = submit(auto_cluster, text)
    d = auto_cluster.wait_experiment(exp_id, TERMINAL, timeout=180)
    assert d["experiment"]["state"] == "ERROR", auto_cluster.diagnose(exp_id)
    logs = "\n".join(auto_cluster.logs(d["trials"][0]["id"]))
    assert "No module named 'numpy'" in logs, logs  # the traceback is still there
    assert (
        f"the trial imports the Python module 'numpy', which the image {IMAGE} does not have"
        in logs
    ), logs
    assert "python3 -m pip install numpy" in logs, logs
