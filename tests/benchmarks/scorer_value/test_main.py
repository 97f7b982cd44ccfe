"""`python -m benchmarks.scorer_value`: tables, then the last lines in their fixed order."""

from __future__ import annotations

import math

import pytest

import benchmarks.scorer_value.__main__ as entry
from benchmarks.scorer_value import grid
from benchmarks.scorer_value.gpu_hour import GpuHourSetting

LAST = [
    "step_auc_genprm",
    "step_auc_one_pass",
    "prm_tokens_per_policy_token_genprm",
    "prm_tokens_per_policy_token_one_pass",
    "yield_ratio_vs_rs_genprm",
    "yield_ratio_vs_rs_one_pass",
    "rows_per_gpu_hour_ratio",
]


def test_quick_run_prints_tables_then_the_last_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        grid, "QUICK", grid.GridSpec(budgets=(3000,), seeds=(0,), problems=2, workers=1)
    )
    monkeypatch.setattr(entry, "QUICK_SETTINGS", (GpuHourSetting(4, 1),))
    assert entry.main(["--quick", "--warm-s", "5", "--window-s", "20"]) == 0
    out = capsys.readouterr().out
    assert "## Data yield on the simulated grid" in out and "| one_pass | bg_mcts |" in out
    assert "## Training rows per simulated GPU-hour" in out
    lines = out.strip().splitlines()[-len(LAST) :]
    assert [line.split("=")[0] for line in lines] == LAST
    values = {line.split("=")[0]: float(line.split("=")[1]) for line in lines}
    assert math.isnan(values["step_auc_genprm"])  # the real runs are not written yet
    assert "note: step AUC lines are nan" in out
    for name in LAST[2:]:
        assert values[name] > 0, name
    assert (
        values["prm_tokens_per_policy_token_one_pass"]
        < values["prm_tokens_per_policy_token_genprm"]
    )
