"""A test run cannot pass by skipping: any skipped test fails the run, saying which and why.

Two groups may be left out on purpose, and only with an environment variable that the summary
repeats:

    DET_SKIP_DOCKER_SETUP=1   the Docker runtime tests (marker `docker`): no engine, no image
    DET_SKIP_TMUX_TESTS=1     the det-tui tests in a real terminal (marker `tmux`)

Every other skip (a missing dependency, an engine that does not answer, tmux not installed) turns
a green run red, so "all passed" always means the tests ran. The policy lives in pure functions
(`verdict`), the pytest hooks below only collect what happened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

# group -> the environment variable that opts out of it
OPT_OUTS: dict[str, str] = {
    "docker": "DET_SKIP_DOCKER_SETUP",
    "tmux": "DET_SKIP_TMUX_TESTS",
}
GROUP_NAMES = {"docker": "Docker runtime", "tmux": "tmux (det-tui in a real terminal)"}


def opted_out(group: str, env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    var = OPT_OUTS.get(group)
    return bool(var) and env.get(var, "") == "1"


def opt_out_reason(group: str) -> str:
    return f"{OPT_OUTS[group]}=1: the {GROUP_NAMES[group]} tests are left out on request"


@dataclass(frozen=True)
class Skip:
    nodeid: str
    groups: frozenset[str]
    reason: str


@dataclass
class Verdict:
    failed: bool
    lines: list[str] = field(default_factory=list)


def verdict(skips: Iterable[Skip], env: Mapping[str, str] | None = None) -> Verdict:
    """Whether the skips fail the run, and the summary lines that say so (or name the opt-outs)."""
    env = os.environ if env is None else env
    allowed: dict[str, int] = {}
    refused: list[Skip] = []
    for s in skips:
        ok = [g for g in s.groups if opted_out(g, env)]
        if ok:
            allowed[ok[0]] = allowed.get(ok[0], 0) + 1
        else:
            refused.append(s)
    lines: list[str] = []
    for group, n in sorted(allowed.items()):
        lines.append(
            f"OPTED OUT: {n} {GROUP_NAMES[group]} test(s) did not run because "
            f"{OPT_OUTS[group]}=1 is set"
        )
    if refused:
        lines.append(
            f"FAILED: {len(refused)} test(s) were skipped; a run that skips tests is not green:"
        )
        for s in refused:
            lines.append(f"  {s.nodeid}: {s.reason}")
        hints = sorted({OPT_OUTS[g] for s in refused for g in s.groups if g in OPT_OUTS})
        if hints:
            lines.append(
                "  to leave these groups out on purpose, set "
                + " ".join(f"{h}=1" for h in hints)
                + " (the summary then says so)"
            )
    return Verdict(failed=bool(refused), lines=lines)


def skip_reason(longrepr: object) -> str:
    """The reason text of a skipped report's longrepr ((path, line, reason) or anything else)."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ")
    return str(longrepr)


# -- the pytest hooks (a plugin: tests/conftest.py loads it; `pytest -p tests.skipguard` too) -----

_skips: list[Skip] = []


def pytest_report_header(config) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"detlab tests: {opt_out_reason(g)}" for g in OPT_OUTS if opted_out(g)]


_groups: dict[str, frozenset[str]] = {}
GROUPS_PROPERTY = "skipguard.groups"


def report_groups(report) -> frozenset[str]:  # type: ignore[no-untyped-def]
    """The opt-out groups of a report's test: from collection here, or from the report itself
    (a report an xdist worker sent to the controller, which collected nothing)."""
    if report.nodeid in _groups:
        return _groups[report.nodeid]
    for name, value in getattr(report, "user_properties", ()):
        if name == GROUPS_PROPERTY:
            return frozenset(g for g in str(value).split(",") if g)
    return frozenset()


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        # Any test that needs the engine (directly or through another fixture) is a Docker test.
        if "docker_image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
        groups = frozenset(g for g in OPT_OUTS if item.get_closest_marker(g))
        _groups[item.nodeid] = groups
        # Under pytest-xdist the workers collect and the controller judges the skips: the groups
        # travel to it in the reports (every report carries its item's user_properties).
        item.user_properties.append((GROUPS_PROPERTY, ",".join(sorted(groups))))


def pytest_runtest_setup(item) -> None:  # type: ignore[no-untyped-def]
    for group in _groups.get(item.nodeid, ()):
        if opted_out(group):
            pytest.skip(opt_out_reason(group))


def pytest_runtest_logreport(report) -> None:  # type: ignore[no-untyped-def]
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append(
            Skip(
                report.nodeid,
                report_groups(report),
                skip_reason(report.longrepr),
            )
        )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:  # type: ignore[no-untyped-def]
    if verdict(_skips).failed and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    v = verdict(_skips)
    if v.lines:
        terminalreporter.section("skipped tests", sep="=", red=v.failed, yellow=not v.failed)
        for line in v.lines:
            terminalreporter.write_line(line)
