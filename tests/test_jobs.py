"""The main command's entrypoint (scripted services until the pipeline lands)."""

from __future__ import annotations

import pytest

from jobs.synthesize import main


def test_main_command_runs_and_keeps_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--algorithm", "bg_mcts", "--budget", "600"]) == 0
    out = capsys.readouterr().out
    assert "budget kept in every search: True" in out


def test_unknown_algorithm_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--algorithm", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
