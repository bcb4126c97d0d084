"""Issue 41's pages in headless Chromium against a real cluster: a failed trial's error summary,
log lines coloured by level, the trial header moving live, the model registry's pages."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cluster import wait_for
from tests.web.test_browser import attr, browser, count, shot, sign_in, submit

__all__ = ["browser"]  # the fixture, used by name

RED = "rgb(252, 165, 165)"  # app.css: pre.logs .level-error


def _color(drv, css: str) -> str:  # type: ignore[no-untyped-def]
    return drv.execute_script(
        "var e = document.querySelector(arguments[0]); return e && getComputedStyle(e).color;",
        css,
    )


def test_failure_levels_live_header_and_models_in_chromium(  # type: ignore[no-untyped-def]
    cluster_factory, tmp_path: Path, browser
) -> None:
    from selenium.webdriver.common.by import By

    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    failing = submit(
        cluster,
        tmp_path,
        "failing",
        batches=30,
        max_restarts=0,
        hparams={"fail_at_step": 5, "checkpoint_every": 2},
    )
    slow = submit(cluster, tmp_path, "slow", batches=3000, hparams={"sleep": 0.1})
    failed_trial = cluster.experiment(failing)["trials"][0]["id"]
    slow_trial = cluster.experiment(slow)["trials"][0]["id"]
    cluster.wait_experiment(failing, {"ERROR"})

    sign_in(browser, cluster, f"/trials/{failed_trial}")
    summary = browser.find_element(By.CSS_SELECTOR, "#trial-live .failure").text
    assert "RuntimeError: scripted failure at step 5" in summary, summary
    assert "Traceback (most recent call last):" in summary
    # the log panel: the exception line red (an error), a plain stdout line not
    wait_for(lambda: count(browser, "#log-lines span.level-error") > 0, 30, what="error lines")
    assert _color(browser, "#log-lines span.level-error") == RED
    assert _color(browser, "#log-lines span.stream-stdout:not([class*=level-])") != RED
    shot(browser, "trial-failed")
    browser.get(f"{cluster.url}/experiments/{failing}")
    text = browser.find_element(By.CSS_SELECTOR, "#exp-live .failure").text
    assert f"Trial {failed_trial} failed" in text and "scripted failure" in text

    # the running trial's header moves without a reload
    browser.get(f"{cluster.url}/trials/{slow_trial}")
    marker = browser.execute_script("window.__noReload = 1; return window.__noReload;")

    def steps() -> int:
        facts = browser.find_element(By.CSS_SELECTOR, "#trial-live dl.facts").text
        m = re.search(r"Steps\s+(\d+)", facts)
        return int(m.group(1)) if m else -1

    first = steps()
    wait_for(lambda: steps() > first, 90, what="the header's steps to move")
    assert browser.execute_script("return window.__noReload;") == marker
    cluster.post(f"/experiments/{slow}/kill")

    # the model registry: a version of the failed trial's first checkpoint, linked back
    ckpts = [  # the one the checkpoint GC keeps (the trial's latest)
        c
        for c in cluster.get("/checkpoints", trial_id=failed_trial)["checkpoints"]
        if c["state"] == "ACTIVE"
    ]
    assert ckpts, "the scripted trial checkpoints before it fails"
    cluster.det("model", "create", "digits-web")
    cluster.det("model", "register-version", "digits-web", ckpts[0]["uuid"])
    browser.get(f"{cluster.url}/models")
    link = browser.find_element(By.LINK_TEXT, "digits-web")
    link.click()
    wait_for(lambda: "/models/digits-web" in browser.current_url, 30, what="the model page")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-version="1"]')
    assert ckpts[0]["uuid"] in row.text
    row.find_element(By.PARTIAL_LINK_TEXT, f"trial {failed_trial}").click()
    wait_for(lambda: f"/trials/{failed_trial}" in browser.current_url, 30, what="lineage link")
    assert attr(browser, "#trial-live", "id") == "trial-live"
    shot(browser, "models-lineage")
