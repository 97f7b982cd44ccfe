"""Rows per simulated GPU-hour: both scorers run on one simulated GPU and make progress."""

from __future__ import annotations

import pytest

from benchmarks.scorer_value.gpu_hour import GpuHourSetting, best, gpu_hour_markdown, run_gpu_hour


@pytest.mark.parametrize("scorer", ["genprm", "one_pass"])
def test_a_short_window_measures_policy_progress(scorer: str) -> None:
    result = run_gpu_hour(scorer, GpuHourSetting(4, 1), warm_s=5.0, window_s=30.0)  # type: ignore[arg-type]
    assert result["seconds"] == pytest.approx(30.0)
    assert result["policy_tokens_per_s"] > 0 and result["trees_per_gpu_hour"] > 0
    assert 0 < result["engine_util"] <= 1.05
    if scorer == "one_pass":
        # one forward step per score, no decode: decode tokens are the policy's and one per score
        assert result["decode_per_policy_token"] < 1.2
    else:
        assert result["decode_per_policy_token"] > 1.5  # GenPRM decodes its analyses
    table = gpu_hour_markdown([result], rows_per_tree=2.0)
    assert f"| {scorer} | 4 | 1 |" in table
    assert best([result], scorer) is result  # type: ignore[arg-type]
