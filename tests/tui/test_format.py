"""The TUI's pure helpers: formatting, bars, sparklines, the chart, the header, the table cache."""

from __future__ import annotations

from harness.api import MasterUnreachable
from tui.data import (
    EXPERIMENT_ACTIONS,
    Freshness,
    History,
    bar,
    fmt_duration,
    fmt_number,
    job_action_allowed,
    latest_metric,
    load_style,
    metrics_text,
    parse_time,
    resample,
    sparkline,
    summarize,
    trial_display_state,
)
from tui.fake import NOW, FakeClient
from tui.screens.cluster import slot_rows
from tui.screens.experiment import pick_metric
from tui.widgets.chart import Series, render_chart
from tui.widgets.header import Summary, header_text
from tui.widgets.table import Column, Row, RowCache, column_widths, fit_widths

from .helpers import fake_app, sync, wait_until


def test_durations_and_numbers() -> None:
    assert fmt_duration(5) == "5s"
    assert fmt_duration(185) == "3m05s"
    assert fmt_duration(7620) == "2h07m"
    assert fmt_duration(3 * 86400 + 4 * 3600) == "3d04h"
    assert fmt_duration(None) == "-"
    assert fmt_number(0.123456) == "0.1235"
    assert fmt_number(1.2e-5) == "1.20e-05"
    assert fmt_number("NaN") == "NaN"
    assert fmt_number(None) == "-"
    assert parse_time("2025-06-01T12:00:00Z") == NOW
    assert parse_time("garbage") is None


def test_bars_and_sparklines() -> None:
    assert bar(50, 10).plain == "█████       50%"
    assert bar(None, 4).plain.startswith("····")
    assert load_style(95) == "red" and load_style(70) == "yellow" and load_style(1) != "red"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, 1, 1]) == "▄▄▄"
    assert sparkline([]) == ""
    assert len(sparkline(list(range(1000)), 16)) == 16
    assert resample([1, 2, 3, 4], 2) == [1.5, 3.5]


def test_history_is_bounded() -> None:
    h = History(3)
    for v in range(10):
        h.add("gpu", v)
    h.add("gpu", None)
    assert h.get("gpu") == [7.0, 8.0, 9.0]


def test_permissions() -> None:
    assert job_action_allowed("bob", {"username": "bob", "admin": False})
    assert not job_action_allowed("bob", {"username": "alice", "admin": False})
    assert job_action_allowed("bob", {"username": "alice", "admin": True})
    assert job_action_allowed("bob", None)  # unknown yet: the master decides


def test_chart_draws_braille_and_axes() -> None:
    text = render_chart(
        [Series("training loss", [1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0], "cyan")], 40, 10
    )
    lines = text.plain.split("\n")
    assert len(lines) == 10
    assert "training loss" in lines[0]
    assert any(any(0x2800 <= ord(ch) <= 0x28FF for ch in line) for line in lines)
    assert "4" in lines[1] and lines[-1].strip().endswith("4")
    empty = render_chart([Series("x", [], [])], 40, 10).plain
    assert "no numeric data" in empty


def test_header_turns_red_when_the_master_is_down() -> None:
    fresh = Freshness().ok(NOW)
    ok = header_text("queue", "http://m", "alice", Summary(1, 8, 2, 1, 2), fresh, NOW + 1)
    assert "slots 1/8" in ok.plain and "queued 2" in ok.plain and "agents 1/2" in ok.plain
    assert "● 1s ago" in ok.plain
    fresh = fresh.failed("connection refused", NOW + 2)
    assert fresh.failed("again", NOW + 5).error_since == NOW + 2
    down = header_text("queue", "http://m", "alice", Summary(), fresh, NOW + 12)
    assert "unreachable" in down.plain
    assert any("red" in str(span.style) for span in down.spans)


def test_cluster_summary_and_idle_flags() -> None:
    api = FakeClient()
    s = summarize(api.agents, api.pools)
    assert s == {
        "slots_used": 5,
        "slots_total": 8,
        "queued": 2,
        "agents_up": 2,
        "agents_total": 3,
    }
    rows = {r.key: r for r in slot_rows(api.agents, {})}
    assert "IDLE" in rows["gpu-node-00/0"].cells[-1].plain  # allocated, 1% busy
    assert "LOST" in rows["cpu-box/0"].cells[-1].plain


def test_metrics_are_numbers_not_json() -> None:
    latest = {"steps_completed": 400, "validation_loss": 0.231, "accuracy": 0.912, "f1": 0.5}
    assert latest_metric(latest, "validation_loss") == 0.231
    assert latest_metric(latest, "loss") == 0.231  # the validation_ prefix either way
    assert latest_metric(latest, "bleu") is None
    assert latest_metric(0.5, "loss") == 0.5  # a bare number (older masters) as it is
    text = metrics_text(latest, "accuracy", others=1)
    assert text == "accuracy 0.9120 · validation_loss 0.2310 (+1 more) at step 400"
    assert metrics_text(None, "x") == "-"


def test_waiting_trials_say_what_they_wait_for() -> None:
    t = {"state": "ACTIVE", "display_state": "QUEUED", "waiting_for": "promotion"}
    assert trial_display_state(t) == "waiting for promotion"
    assert trial_display_state({**t, "waiting_for": None}) == "QUEUED"


def test_experiment_actions_match_the_masters_table() -> None:
    from master.states import ACTIONS

    for action, states in EXPERIMENT_ACTIONS.items():
        assert states == {s.value for s in ACTIONS[action]}, action


def test_pick_metric() -> None:
    names = {"training": ["loss", "lr"], "validation": ["loss", "accuracy"]}
    assert pick_metric(names, "validation_loss") == ("validation", "loss")
    assert pick_metric(names, "accuracy") == ("validation", "accuracy")
    assert pick_metric({"training": ["lr"], "validation": []}, None) == ("training", "lr")
    assert pick_metric({}, None) is None


def test_row_cache_reuses_unchanged_rows() -> None:
    cache = RowCache()
    a = cache.put("1", ("x",), Row("1", ["x"]))
    cache.finish()
    assert cache.get("1", ("x",)) is a
    assert cache.get("1", ("y",)) is None
    cache.finish()
    cache.finish()
    assert cache.get("1", ("x",)) is None  # not seen in a build: dropped


def test_columns_sized_to_content_when_the_screen_has_room() -> None:
    cols = [Column("a", "A", max_width=5), Column("b", "B", width=3), Column("c", "C", max_width=4)]
    wanted = column_widths(cols, [Row("1", ["abcdefgh", "x", "0123456789"])])
    assert wanted == [8, 3, 10]  # the content, not capped
    # a row is 1 mark cell + each column and a space after it
    assert fit_widths(cols, wanted, 200) == [8, 3, 10]  # room for everything
    assert fit_widths(cols, wanted, 1 + 5 + 3 + 4 + 3) == [5, 3, 4]  # no room: the caps
    assert fit_widths(cols, wanted, 1 + 5 + 3 + 4 + 3 + 4) == [8, 3, 5]  # left to right
    assert fit_widths(cols, wanted, 0) == [5, 3, 4]  # not laid out yet


class DownClient(FakeClient):
    def list_agents(self):  # type: ignore[no-untyped-def]
        raise MasterUnreachable("cannot reach the master at http://m: connection refused")

    def list_experiments(self, *a, **kw):  # type: ignore[no-untyped-def]
        return self.list_agents()


@sync
async def test_the_ui_keeps_working_while_the_master_is_down() -> None:
    app = fake_app(("exps", None), api=DownClient())
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: app.freshness.error is not None, what="marked down")
        header = app.screen.query_one("HeaderBar")
        assert "unreachable" in header.text.plain
        await pilot.press("j", "colon", *"queue", "enter")  # still responds
        await wait_until(pilot, lambda: app.screen.VIEW == "queue")


def test_views_never_import_the_app_nor_read_private_attributes() -> None:
    """Views and widgets talk to the app through messages and reactive attributes only, and
    nothing in det-tui reads another object's private attributes (Textual's included)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "tui"
    for path in root.rglob("*.py"):
        text = path.read_text()
        if path.parent.name in ("screens", "widgets"):
            assert "tui.app" not in text, path
        assert not re.search(r"\b(?!self\b)\w+\._[a-z]\w*", text), path
        assert not re.search(r"getattr\([\w.]+, \"_", text), path


def test_trial_rung_from_the_experiments_rung_lengths() -> None:
    from harness.api import trial_rung

    lengths = [111, 333, 1000]
    assert [trial_rung({"searcher_target": n}, lengths) for n in (111, 333, 1000)] == [1, 2, 3]
    assert trial_rung({"searcher_target": 500}, lengths) is None  # not a rung length
    assert trial_rung({"searcher_target": 1000}, [1000]) is None  # one length: no rungs
    assert trial_rung({}, lengths) is None
