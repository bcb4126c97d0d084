"""Pod logs on Kubernetes end to end: a bounded set of log streams shared by more pods."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.cluster import Cluster, wait_for
from tests.integration.test_foundation import only_trial, submit
from tests.integration.test_scheduling import long_job
from tests.k8s.fake_apiserver import FakeApiServer
from tests.k8s.test_k8s_e2e import fake, k8s_cluster  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration


def _stdout(cluster: Cluster, trial_id: int) -> list[str]:
    return [ln for ln in cluster.logs(trial_id) if not ln.startswith("[master]")]


def test_two_pods_share_one_log_stream_and_lose_no_line(
    k8s_cluster: Callable[..., Cluster],  # noqa: F811 - the fixture
    fake: FakeApiServer,  # noqa: F811
) -> None:
    fake.cluster.add_node("a", gpus=1)
    fake.cluster.add_node("b", gpus=1)
    cluster = k8s_cluster(log_followers=1)
    # Each trial runs longer than a follower's slice (10 s) while the other waits for the
    # stream, so the stream is handed back and forth and each pod reopened from its mark.
    exps = [
        submit(cluster, long_job(cluster, f"turn{i}", batches=500, hparams={"log_lines": 30}))
        for i in (1, 2)
    ]
    for exp_id in exps:
        d = cluster.wait_experiment(exp_id, {"COMPLETED", "ERROR", "CANCELED"}, timeout=300)
        assert d["experiment"]["state"] == "COMPLETED", cluster.diagnose(exp_id)
    expected = [f"log line {i} of 30" for i in range(1, 31)]
    expected += [f"checkpoint at step {s}" for s in range(10, 501, 10)]
    expected += ["validation at step 500", "done"]
    for exp_id in exps:
        tid = only_trial(cluster, exp_id)["id"]
        wait_for(
            lambda tid=tid: "done" in _stdout(cluster, tid),  # type: ignore[misc]
            60,
            what="the pod's last line stored",
        )
        got = [
            re.sub(
                r"^(validation at step \d+) loss .*",
                r"\1",
                re.sub(r"^checkpoint \S+ at", "checkpoint at", ln),
            )
            for ln in _stdout(cluster, tid)
        ]
        got = [ln for ln in got if ln in expected]
        assert sorted(got) == sorted(expected), f"trial {tid}: each line once"
    assert fake.cluster.max_log_streams == 1, "never more streams than log_followers"
    opened = fake.cluster.api_calls.get("GET Pod log", 0)
    assert opened > 2, f"the stream was handed on (opened {opened} times for 2 pods)"
