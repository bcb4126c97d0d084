"""`det experiment continue ID [--config k=v]`: a single-trial experiment trains on from its
latest checkpoint (as a new experiment whose trial starts from that checkpoint)."""

from __future__ import annotations

import re

import pytest

from tests.cluster import Cluster
from tests.compat._util import TERMINAL, config, run

pytestmark = pytest.mark.integration


def test_continue_trains_on_from_the_latest_checkpoint(cluster: Cluster) -> None:
    text = config(cluster, {"name": "single"}, {"max_length": 6, "every": 3})
    d = run(cluster, text)
    first, (trial,) = d["experiment"], d["trials"]
    assert first["state"] == "COMPLETED", cluster.diagnose(first["id"])
    latest = trial["latest_checkpoint"]
    out = cluster.det(
        "experiment", "continue", str(first["id"]), "--config", "hyperparameters.max_length=10"
    ).stdout
    assert f"from checkpoint {latest}" in out
    m = re.search(r"Created experiment (\d+)", out)
    assert m, out
    d2 = cluster.wait_experiment(int(m.group(1)), TERMINAL, timeout=240)
    assert d2["experiment"]["state"] == "COMPLETED", cluster.diagnose(int(m.group(1)))
    (t2,) = d2["trials"]
    assert t2["steps_completed"] == 10
    assert f"resumed from {latest} at 6" in "\n".join(cluster.logs(t2["id"]))
    train = cluster.get(f"/trials/{t2['id']}/metrics", group="training")["metrics"]
    assert [m["steps_completed"] for m in train] == [9, 10]
    bad = cluster.det("experiment", "continue", "999", check=False)
    assert bad.returncode == 1
