"""The quick-start path: embedded SQLite, the digits example, `--follow` to COMPLETED."""

from __future__ import annotations

import re

import pytest

from tests.cluster import ROOT

pytestmark = pytest.mark.integration


def test_digits_example_reaches_90_percent_on_sqlite(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(db="sqlite")
    cluster.start_agent("agent-1", slots=1)
    digits = ROOT / "examples" / "digits"
    r = cluster.det(
        "experiment", "create", str(digits / "core_api.yaml"), str(digits), "--follow", timeout=600
    )
    exp_id = int(re.search(r"Created experiment (\d+)", r.stdout).group(1))
    assert "COMPLETED" in r.stdout
    lines = r.stdout.splitlines()
    assert any("training loss" in ln for ln in lines), "the Core API example logs its loss"
    assert any("not a terminal" in ln for ln in lines), "--follow says why there is no bar"
    assert any(re.fullmatch(rf"experiment {exp_id}: \d+% \(ACTIVE\)", ln) for ln in lines)
    # the end state comes after the trial's last lines (its final validation and checkpoint)
    last_log = max(i for i, ln in enumerate(lines) if ln.startswith("[trial "))
    assert lines.index(f"Experiment {exp_id} is COMPLETED") > last_log
    d = cluster.experiment(exp_id)
    assert d["experiment"]["state"] == "COMPLETED"
    trial = d["trials"][0]
    val = cluster.get(f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert val[-1]["metrics"]["validation_accuracy"] > 0.9
    assert trial["latest_checkpoint"]
    assert (cluster.data_dir / "detlab.sqlite").exists()
