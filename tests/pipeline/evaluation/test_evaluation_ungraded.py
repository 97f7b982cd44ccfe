"""An evaluation's chosen answer whose comparison was cut off by the grading time limit is
unknown, not wrong: `correct` is null, the accuracy counts it as not correct (a lower bound)
and the report says how many; saved parts of an older build (the column then never null)
still join the new ones on a resumed grid.

Through the services runner (`_run_services_tasks`) with the scripted policy and scorer (a
fake LLM, the only fake) and real math-verify in the grading pool, on an answer sympy
cannot finish (tests/common/test_grading.py's SLOW_ANSWERS).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from common.grading import compare, too_costly
from pipeline.evaluation.config import Method, ServicesEnvironment
from pipeline.evaluation.parts import PartStore
from pipeline.evaluation.runner import Task, _run_services_tasks
from pipeline.evaluation.schema import EVAL_NODES_SCHEMA, EVAL_TREES_SCHEMA
from pipeline.records.config import RecordsConfig
from pipeline.report.load import RunData, flatten_trace
from pipeline.report.markdown import _ungraded_note
from pipeline.report.tables import accuracy_table, ungraded_chosen
from pipeline.store.sink import commit_batch
from search import parse_search_config
from search.scripted import ScriptedPolicy, ScriptedScorer

SLOW = "(x+1)^{9999}-x^{9999}"
PROBLEM = "Tom has 5 apples and buys 7 more. How many apples does he have?"


def _grid(tmp_path: Path, answers: tuple[str, ...]) -> PartStore:
    method = Method(label="bg_mcts", search=parse_search_config({"algorithm": "bg_mcts"}))
    tasks = [Task(method, 1000, 0, "p0", PROBLEM, "12")]
    env = ServicesEnvironment.model_validate(
        {"source": {"kind": "bundled", "dataset": "gsm8k"}, "grade_timeout_s": 2.0}
    )
    store = PartStore(tmp_path)
    failures = asyncio.run(
        _run_services_tasks(
            tasks,
            ScriptedPolicy(seed=0, p_answer=0.5, answers=answers),
            ScriptedScorer(seed=0),
            env,
            lambda done, total: None,
            store,
            RecordsConfig(),
        )
    )
    assert failures == []
    return store


@pytest.fixture(scope="module", autouse=True)
def _warm_pool() -> None:
    """A warm grading pool: only the slow comparison runs into the limit."""
    assert too_costly(SLOW) is None
    asyncio.run(compare("\\frac{1}{2}", "0.5", 30))


def test_a_chosen_answer_cut_off_is_unknown_and_the_accuracy_says_so(tmp_path: Path) -> None:
    trees, nodes = _grid(tmp_path, (SLOW,)).tables()
    row = trees.to_pylist()[0]
    assert row["chosen_answer"] == SLOW
    assert row["correct"] is None  # unknown, not false
    answered = [n for n in nodes.to_pylist() if n["answered"]]
    assert answered and all(n["correct"] is None for n in answered)
    assert row["correct_nodes"] == 0
    assert all(p["correct"] is False for p in row["trace"])  # curves: counted not correct
    frame = trees.drop_columns(["trace"]).to_pandas()
    # counted as not correct (a lower bound), not left out of the mean (NaN)
    assert accuracy_table(frame)["accuracy_mean"].tolist() == [0.0]
    assert ungraded_chosen(frame) == 1
    run = RunData(frame, nodes.to_pandas(), flatten_trace(trees.column("trace")))
    assert "could not be graded in time" in _ungraded_note(run)


def test_a_graded_grid_says_nothing_and_joins_parts_of_an_older_build(tmp_path: Path) -> None:
    store = _grid(tmp_path, ("12", "7"))
    trees, _ = store.tables()
    frame = trees.drop_columns(["trace"]).to_pandas()
    assert ungraded_chosen(frame) == 0
    # a part written when `correct` was never null: the resumed grid reads both
    old = EVAL_TREES_SCHEMA.set(
        EVAL_TREES_SCHEMA.get_field_index("correct"),
        EVAL_TREES_SCHEMA.field("correct").with_nullable(False),
    )
    older = {**trees.to_pylist()[0], "problem_id": "p-old"}
    commit_batch(
        store.saved.store,
        {
            "trees": pa.Table.from_pylist([older], schema=old),
            "nodes": EVAL_NODES_SCHEMA.empty_table(),
        },
    )
    joined, _ = store.tables()
    assert sorted(joined.column("problem_id").to_pylist()) == ["p-old", "p0"]
