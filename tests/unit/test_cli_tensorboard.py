"""`det tensorboard start` argument forms (Determined's: EXP_ID... and/or -t TRIAL_ID...)."""

from __future__ import annotations

import pytest

from harness.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("argv", "exps", "trials"),
    [
        (["3", "4"], [3, 4], None),
        (["-t", "5", "6"], [], [5, 6]),
        (["3", "-t", "7", "--no-browser"], [3], [7]),
    ],
)
def test_start_forms(argv: list[str], exps: list[int], trials: list[int] | None) -> None:
    args = build_parser().parse_args(["tensorboard", "start", *argv])
    assert (args.experiment_ids, args.trial_ids) == (exps, trials)


def test_start_without_ids_says_how(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-m", "http://127.0.0.1:9", "tensorboard", "start"]) != 0
    assert "det tensorboard start EXP_ID" in capsys.readouterr().err
