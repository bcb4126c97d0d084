"""The pure log-level reading and failure summary of the web pages."""

from __future__ import annotations

import pytest

from master.web.log_levels import error_lines, log_level


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("INFO:root:epoch 1 done", "info"),
        ("2026-11-27 10:00:00,123 - WARNING - lr is high", "warning"),
        ("[ERROR] could not open data", "error"),
        ("[rank=0] INFO: training", "info"),
        ("DEBUG:urllib3.connectionpool:Starting new HTTP connection", "debug"),
        ("CRITICAL:root:out of disk", "error"),
        ("Traceback (most recent call last):", "error"),
        ("ValueError: bad shape", "error"),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory", "error"),
        ("KeyboardInterrupt", "error"),
        ("step 10 loss 0.5", None),
        ("information about ERRORS", None),  # words that merely contain a level
        ('  File "train.py", line 3, in <module>', None),
        ("x" * 100 + " ERROR late in a long line", None),  # a level is stated near the start
    ],
)
def test_log_level(line: str, level: str | None) -> None:
    assert log_level(line) == level


def test_error_lines_pick_the_last_traceback() -> None:
    lines = [
        "INFO:root:start",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "KeyError: 'old'",
        "INFO:root:retrying",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "    x = load()",
        "ValueError: bad shape (3, 4)",
        "INFO:determined:exiting",
    ]
    assert error_lines(lines) == lines[5:9]
    # a long traceback keeps its first line and the end
    long = ["Traceback (most recent call last):", *[f'  File "f{i}.py"' for i in range(50)]]
    long.append("RuntimeError: deep")
    got = error_lines(long, limit=5)
    assert got[0] == long[0] and got[-1] == "RuntimeError: deep" and len(got) == 5


def test_error_lines_without_a_traceback_are_the_error_lines() -> None:
    lines = ["INFO:a:x", "ERROR:a:disk full", "INFO:a:y", "[ERROR] giving up"]
    assert error_lines(lines) == ["ERROR:a:disk full", "[ERROR] giving up"]
    assert error_lines(["INFO:a:fine"]) == []


def test_scatters_skip_constants_and_put_log_hparams_on_a_log_axis() -> None:
    from master.web.format import scatter_axes

    space = {
        "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
        "layers": {"type": "categorical", "vals": [1, 2]},
        "batch": 32,  # a bare value: a constant
        "opt": {"momentum": {"type": "const", "val": 0.9}, "wd": {"type": "double"}},
        "seed_like": {"type": "int", "minval": 1, "maxval": 9},
    }
    trials = [
        {"lr": 0.001, "layers": 1, "batch": 32, "opt.momentum": 0.9, "opt.wd": 0.1, "seed_like": 3},
        {"lr": 0.01, "layers": 2, "batch": 32, "opt.momentum": 0.9, "opt.wd": 0.2, "seed_like": 3},
    ]
    assert scatter_axes(space, trials) == [
        {"name": "layers", "log": False},
        {"name": "lr", "log": True},
        {"name": "opt.wd", "log": False},
    ]  # seed_like drew the same value in every trial: nothing to plot
    assert scatter_axes(space, trials[:1]) == []  # one trial: every value is the only one
    stored = {  # the same space as the master stores it (normalised: groups are objects)
        "lr": space["lr"],
        "layers": space["layers"],
        "batch": {"type": "const", "val": 32},
        "opt": {"type": "object", "vals": space["opt"]},
        "seed_like": space["seed_like"],
    }
    assert scatter_axes(stored, trials) == scatter_axes(space, trials)
