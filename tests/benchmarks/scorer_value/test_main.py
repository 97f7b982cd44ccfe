"""`python -m benchmarks.scorer_value`: tables, then the last lines in their fixed order."""

from __future__ import annotations

import pytest

import benchmarks.scorer_value.__main__ as entry
from benchmarks.scorer_value import grid
from benchmarks.scorer_value.auc import CurvePoint, StepAUC
from benchmarks.scorer_value.gpu_hour import GpuHourSetting
from benchmarks.scorer_value.real import RealRuns

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
    # the real half runs SmolLM2 through the pipeline for minutes (its parts are tested in
    # test_real.py): here it stands in with fixed figures, to check how they are printed
    real = RealRuns(
        step_auc_genprm=StepAUC(0.6, 0.5, 0.7, 10, 20),
        step_auc_one_pass=StepAUC(0.7, 0.6, 0.8, 10, 20),
        prm_tokens_per_policy_token_genprm=20.0,
        prm_tokens_per_policy_token_one_pass=2.5,
        learning_curve=(CurvePoint(10, StepAUC(0.7, 0.6, 0.8, 10, 20)),),
        yield_ratio_vs_rs={"genprm": 0.001, "one_pass": 1e6},
        table="| a real runs table |",
    )
    monkeypatch.setattr(entry, "real_runs", lambda args: real)
    assert entry.main(["--quick", "--warm-s", "5", "--window-s", "20"]) == 0
    out = capsys.readouterr().out
    assert "## Data yield on the simulated grid" in out and "| one_pass | bg_mcts |" in out
    assert "## Training rows per simulated GPU-hour" in out
    lines = out.strip().splitlines()[-len(LAST) :]
    assert [line.split("=")[0] for line in lines] == LAST
    values = {line.split("=")[0]: float(line.split("=")[1]) for line in lines}
    assert values["step_auc_genprm"] == 0.6 and values["step_auc_one_pass"] == 0.7
    assert values["prm_tokens_per_policy_token_one_pass"] == 2.5
    assert "| a real runs table |" in out and "step AUC against training rows" in out
    # the lower of the two settings: the real one for genprm, the grid's for one_pass
    assert values["yield_ratio_vs_rs_genprm"] == 0.001
    assert 0 < values["yield_ratio_vs_rs_one_pass"] < 1e6
    for name in LAST[2:]:
        assert values[name] > 0, name
    assert (
        values["prm_tokens_per_policy_token_one_pass"]
        < values["prm_tokens_per_policy_token_genprm"]
    )
