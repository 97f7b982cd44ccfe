"""benchmarks/support/commands.py and trl.py: a child's output goes to its log, a failure
raises with the log's end, and a TRL stage that finished is not run again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.support.commands import REPO, run_logged
from benchmarks.support.trl import check_trl_python, run_job


def test_a_child_runs_in_the_repository_with_its_output_in_the_log(tmp_path: Path) -> None:
    log = tmp_path / "ok.log"
    code = "import os, sys; print(os.getcwd()); print('to stderr', file=sys.stderr)"
    seconds = run_logged([sys.executable, "-c", code], log, what="the child")
    assert seconds >= 0
    assert log.read_text().split() == [str(REPO), "to", "stderr"]


def test_a_failed_child_raises_with_the_end_of_its_log(tmp_path: Path) -> None:
    code = "print('the reason'); raise SystemExit(3)"
    with pytest.raises(RuntimeError, match=r"(?s)the child failed \(exit 3.*the reason"):
        run_logged([sys.executable, "-c", code], tmp_path / "bad.log", what="the child")


def test_a_missing_trl_python_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="make test-trl"):
        check_trl_python(tmp_path / "nope" / "python")


def test_a_finished_trl_stage_is_reused(tmp_path: Path) -> None:
    (tmp_path / "round0.result.json").write_text(json.dumps({"train": {"a": {"rows": 2}}}))
    # the TRL python does not exist: reusing must not start it
    result = run_job(tmp_path / "no-python", tmp_path, "round0", {}, reuse=True)
    assert result == {"train": {"a": {"rows": 2}}}
    assert not (tmp_path / "round0.job.json").exists()
