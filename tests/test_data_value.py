"""benchmarks/data_value/measure.py, the half that runs in the main venv: the selections,
the per-method run configs, grading (real math-verify) and the table with its last lines
(the statistics and grading helpers themselves: tests/benchmarks/support/).

The TRL half (training and generation) is tested in tests/trl/test_self_improve.py, on the
checkpoint one step of the self-improvement loop trains; the summary here reads a result of
the same shape `benchmarks.data_value.train` writes.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.data_value.measure import (
    FULL,
    QUICK,
    MethodData,
    run_config,
    selections,
    summarize,
)
from benchmarks.support.synthesis import write_config
from pipeline.config import load_run_config
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
        # as jobs.synthesize reads it: the file the benchmark writes
        m: load_run_config(write_config(run_config(m, 4, 300, tmp_path), tmp_path / f"{m}.yaml"))
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
