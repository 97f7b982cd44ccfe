"""benchmarks/data_value/measure.py, the half that runs in the main venv: the selections,
the per-method run configs, grading (real math-verify) and the table with its last lines.

The TRL half (training and generation) is tested in tests/trl/test_data_value.py; the
summary here reads a result of the same shape `benchmarks.data_value.train` writes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.data_value.measure import (
    FULL,
    QUICK,
    MethodData,
    check_trl_python,
    cut_at_stops,
    mcnemar_p,
    run_config,
    selections,
    summarize,
    wilson,
)
from pipeline.config import parse_run_config
from search.answers import AnswerExtraction


def test_train_and_heldout_selections_are_disjoint_and_full_mode_holds_out_200() -> None:
    train, held = selections(FULL.train, FULL.heldout)
    assert len(train) == FULL.train and len(held) == FULL.heldout >= 200
    assert not {p["problem"] for p in train} & {p["problem"] for p in held}
    assert {p["id"].split("/")[1] for p in train} == {"0"}  # the run's source: seed 0
    quick_train, quick_held = selections(QUICK.train, QUICK.heldout)
    assert quick_train == train[: QUICK.train]  # a prefix: the same problems
    assert len(quick_held) == QUICK.heldout


def test_every_method_runs_local_yaml_with_only_the_search_changed(tmp_path: Path) -> None:
    configs = {
        m: parse_run_config(run_config(m, 4, 300, tmp_path))
        for m in ("bg_mcts", "repeated_sampling", "beam")
    }
    assert {c.search.algorithm for c in configs.values()} == {
        "bg_mcts",
        "repeated_sampling",
        "beam",
    }
    dumps = [c.model_dump(mode="json") for c in configs.values()]
    for d in dumps:
        d.pop("search"), d.pop("run_id")
    assert dumps[0] == dumps[1] == dumps[2]
    first = configs["bg_mcts"]
    assert first.budget == 300 and first.source.count == 4  # type: ignore[union-attr]
    assert all(c.search.answer_extraction == "last_number" for c in configs.values())


def test_wilson_interval_matches_known_values() -> None:
    low, high = wilson(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12) and round(high, 4) == 0.2775
    assert all(math.isnan(x) for x in wilson(0, 0))


def test_exact_mcnemar() -> None:
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(2, 0) == 0.5  # 2 x (1/2)^2
    assert mcnemar_p(23, 14) == pytest.approx(0.18774, abs=1e-5)
    assert mcnemar_p(14, 23) == mcnemar_p(23, 14)


def test_completions_are_cut_at_the_policy_stops() -> None:
    text = "Step 1: 3 + 4 = 7. The answer is 7.\nProblem: Ben has 9"
    assert cut_at_stops(text, ["Problem:"]) == "Step 1: 3 + 4 = 7. The answer is 7.\n"
    assert cut_at_stops(text, []) == text


def test_summary_grades_with_math_verify_and_ends_with_the_last_lines() -> None:
    held = [
        {"id": "h0", "problem": "a", "answer": "12"},
        {"id": "h1", "problem": "b", "answer": "7"},
        {"id": "h2", "problem": "c", "answer": "30"},
        {"id": "h3", "problem": "d", "answer": "5"},
    ]
    result = {
        "completions": {
            # base: one right (its last number), the others wrong or without a number
            "base": ["So 12 it is", "I do not know", "That is 31.", "none"],
            # trained: three right; "The answer is 30.0" equals 30 for math-verify only;
            # the last one says 5 after the stop string, which must not count
            "bg_mcts": [
                "Step 1: 5 + 7 = 12. The answer is 12.",
                "The answer is 7.",
                "Step 1: 10 x 3 = 30. The answer is 30.0.",
                "The answer is 4.\nProblem: x has 5",
            ],
        },
        "train": {"bg_mcts": {"rows": 3}},
    }
    data = [
        MethodData("bg_mcts", 4, 3, 2, 1200, 34000, {"a"}),
        MethodData("repeated_sampling", 4, 0, 0, 1190, 9000, {"a"}),
    ]
    lines = summarize(
        result, held, data, extraction=AnswerExtraction.LAST_NUMBER, stops=["Problem:"]
    )
    assert lines[-3:] == [
        "heldout_base=0.2500",
        "heldout_gain_bg_mcts=0.5000",
        "heldout_gain_repeated_sampling=nan",
    ]
    assert lines[-4] == (
        "paired bg_mcts vs base: right only with bg_mcts 2, only with base 0, McNemar p=0.5"
    )
    table = "\n".join(lines[:-4])
    assert "0.750 [" in table and "(3/4)" in table and "+0.500" in table
    assert "repeated_sampling (no rows)" in table
    assert "34,000" in table and "1,200" in table


def test_a_missing_trl_python_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="make test-trl"):
        check_trl_python(tmp_path / "nope" / "python")
