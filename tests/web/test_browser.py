"""The pages in headless Chromium against a real cluster (det-master + det-agent processes).

Signs in, watches a training trial's chart and logs grow without a reload, pauses the experiment
from its page, and compares two trials. Screenshots land in build/test-artifacts/web/ (ignored by
git) for a person to look at.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import ADMIN_PASSWORD, ROOT, Cluster, wait_for
from tests.fixtures.scripted_config import SCRIPTED_DIR, make_config

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("DET_TEST_ARTIFACTS") or ROOT / "build" / "test-artifacts") / "web"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)


@pytest.fixture
def browser() -> Iterator:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), f"{path} is missing: apt-get install chromium chromium-driver"
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield drv
    finally:
        drv.quit()


def shot(drv, name: str) -> None:  # type: ignore[no-untyped-def]
    drv.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def sign_in(drv, cluster: Cluster, path: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    drv.get(cluster.url + path)
    assert "/login" in drv.current_url  # signed-out visitors are sent to sign in
    drv.find_element(By.NAME, "username").send_keys("admin")
    drv.find_element(By.NAME, "password").send_keys(ADMIN_PASSWORD)
    drv.find_element(By.CSS_SELECTOR, ".login button[type=submit]").click()
    wait_for(lambda: path in drv.current_url, 30, what=f"redirect to {path}")


def count(drv, css: str) -> int:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    return len(drv.find_elements(By.CSS_SELECTOR, css))


def attr(drv, css: str, name: str) -> str | None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    found = drv.find_elements(By.CSS_SELECTOR, css)
    return found[0].get_attribute(name) if found else None


def submit(cluster: Cluster, tmp: Path, name: str, **kw) -> int:  # type: ignore[no-untyped-def]
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(make_config(cluster.ckpt_dir, name=name, **kw))
    out = cluster.det("experiment", "create", str(cfg), str(SCRIPTED_DIR)).stdout
    exp_id = int(re.search(r"Created experiment (\d+)", out).group(1))
    assert f"Web page: {cluster.url}/experiments/{exp_id}" in out  # the CLI prints the page
    return exp_id


def test_watch_pause_and_compare_in_chromium(cluster_factory, tmp_path: Path, browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    cluster = cluster_factory()
    cluster.start_agent("agent-1", slots=2)
    # A slow trial: a metric every step, a checkpoint (and a log line) every 10 steps.
    slow = submit(
        cluster,
        tmp_path,
        "slow",
        batches=3000,
        hparams={"sleep": 0.05, "checkpoint_every": 10},
    )
    quick = submit(cluster, tmp_path, "quick", batches=30, hparams={"loss_offset": 0.5})
    slow_trial = cluster.experiment(slow)["trials"][0]["id"]
    quick_trial = cluster.experiment(quick)["trials"][0]["id"]
    cluster.wait_trial(slow_trial, lambda t: t["steps_completed"] >= 5, what="slow trial training")
    cluster.wait_experiment(quick, {"COMPLETED"})

    sign_in(browser, cluster, f"/trials/{slow_trial}")
    # The chart draws from the master's series, then grows with no reload.
    wait_for(lambda: count(browser, "#trial-chart .uplot canvas") == 1, 30, what="trial chart")
    wait_for(lambda: int(attr(browser, "#trial-chart", "data-points") or 0) > 0, 30)
    marker = browser.execute_script("window.__noReload = 1; return window.__noReload;")
    first_points = int(attr(browser, "#trial-chart", "data-points") or 0)
    first_lines = count(browser, "#log-lines span.line")
    wait_for(
        lambda: int(attr(browser, "#trial-chart", "data-points") or 0) > first_points,
        60,
        what="chart points to grow",
    )
    wait_for(lambda: count(browser, "#log-lines span.line") > first_lines, 60, what="new log lines")
    assert browser.execute_script("return window.__noReload;") == marker  # same page
    assert "checkpoint" in browser.find_element(By.ID, "log-lines").text
    # Times are rewritten in the viewer's locale.
    assert count(browser, "time[data-local]") > 0
    shot(browser, "trial-live")
    browser.execute_script("document.getElementById('logs').scrollIntoView()")
    shot(browser, "trial-logs")

    # The experiment page: learning curves, then pause from the page.
    browser.get(f"{cluster.url}/experiments/{slow}")
    wait_for(lambda: count(browser, "#curves-chart .uplot canvas") == 1, 30, what="curves chart")
    browser.find_element(By.CSS_SELECTOR, 'button[data-action="pause"]').click()
    wait_for(
        lambda: "pause requested" in browser.find_element(By.TAG_NAME, "main").text,
        30,
        what="pause confirmation",
    )
    assert cluster.experiment(slow)["experiment"]["state"] == "PAUSED"
    wait_for(lambda: count(browser, 'button[data-action="activate"]') == 1, 30)
    shot(browser, "experiment-paused")

    # The experiments list knows the new state; the phone layout still shows the table.
    browser.get(f"{cluster.url}/experiments")
    row = browser.find_element(By.CSS_SELECTOR, f'#exp-rows tr[data-id="{slow}"]')
    assert "PAUSED" in row.text
    browser.set_window_size(390, 844)
    shot(browser, "experiments-phone")
    browser.set_window_size(1280, 1000)

    # Compare the two trials on one chart.
    browser.get(f"{cluster.url}/compare?trials={slow_trial},{quick_trial}")
    wait_for(lambda: count(browser, "#compare-chart .uplot canvas") == 1, 30, what="compare")
    # Both trials' training loss on one chart (every option of the metric picker works).
    Select(browser.find_element(By.CSS_SELECTOR, 'select[name="metric"]')).select_by_value(
        "training:loss"
    )
    wait_for(
        lambda: (
            all(
                int(n) > 0
                for n in (attr(browser, "#compare-chart", "data-series-points") or "0").split(",")
            )
            and len((attr(browser, "#compare-chart", "data-series-points") or "").split(",")) == 2
        ),
        30,
        what="both compared series drawn",
    )
    legend = browser.find_element(By.CSS_SELECTOR, "#compare-chart .u-legend").text
    assert f"trial {slow_trial}" in legend and f"trial {quick_trial}" in legend
    table = browser.find_element(By.CSS_SELECTOR, "table.compare").text
    assert "loss_offset" in table
    shot(browser, "compare")

    # A finished experiment: its curves; one trial, so no hyperparameter varies: no scatter
    # (test_browser_pages.py and test_pages.py check the scatters of a search)
    browser.get(f"{cluster.url}/experiments/{quick}")
    wait_for(lambda: count(browser, "#curves-chart .uplot canvas") == 1, 30, what="curves")
    wait_for(lambda: "nothing to plot" in browser.find_element(By.ID, "scatters").text, 30)
    assert count(browser, "#scatters .uplot") == 0
    browser.find_element(By.CSS_SELECTOR, '#curves input[name="logy"]').click()
    wait_for(lambda: count(browser, "#curves-chart .uplot canvas") == 1, 30, what="log-y curves")
    shot(browser, "experiment-completed")
    browser.execute_script("document.getElementById('hparams').scrollIntoView()")
    shot(browser, "experiment-scatters")

    # The cluster page: the agent's two slots.
    browser.get(f"{cluster.url}/cluster")
    assert count(browser, ".slot") == 2
    shot(browser, "cluster")
