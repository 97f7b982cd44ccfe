"""An answer whose comparison with the reference was cut off by the time limit is *ungraded*:
neither correct nor incorrect, so no row of any table uses it (as a positive or as a
negative), it is recorded as unknown (a null label, `grade_timeouts`, ``<table>.ungraded``
gate drops), and the tree's other rows stay as they were.

Real searches (the scripted policy and scorer: a fake LLM, the only fake) and a hand-built
tree, graded by real math-verify (`common.grading.compare_all`).  Where a test needs one
comparison to time out on cue, it hands `grade_result` the real comparison with one
answer's verdict replaced by `Verdict.TIMEOUT`: the verdict a loaded machine gives (a cold
grading pool's start), not a fake grader.  One test times out for real, through
`common.grading`, on an answer sympy cannot finish.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from common.grading import Verdict, compare, compare_all, too_costly
from pipeline.records import (
    BuildContext,
    GradedTree,
    RecordsConfig,
    RecordsSpec,
    grade_result,
    records_for,
)
from pipeline.records.build import rows_for
from pipeline.records.grading import Compare, answer_key
from pipeline.records.nodes import NODES_SCHEMA
from pipeline.records.schema import Row, to_table
from pipeline.records.trees import TREES_SCHEMA
from pipeline.report.hygiene import hygiene
from pipeline.report.run_report import _totals_rows, report_numbers
from pipeline.run.summary import RunSummary
from search import SearchResult, parse_search_config, run_search
from search.answers import AnswerExtraction, extract_answer
from search.protocols import FinishReason, TokenCounts
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import Tree

PROBLEM = "Tom has 5 apples and buys 7 more. How many apples does he have?"
TRAINING = ("sft", "dpo", "step_dpo", "kto", "prm")
# every row visible: no edit-distance, top-k or near-duplicate gate that one path's absence
# could move (a near duplicate kept instead of an ungraded one would be a new row)
REPO = Path(__file__).resolve().parents[3]
OPEN = {"min_edit_distance": 0, "sft_top_k": 0, "near_duplicate": 1.0}
CONFIGS = {
    "default": {"gates": OPEN},
    # self-correction traces too, and no states_reference gate (which an ungraded answer
    # stated on the way closes: `test_a_hand_built_tree...` checks that)
    "include": {
        "gates": {**OPEN, "rejected_states_reference": False},
        "self_correction": "include",
    },
}


def _timing_out(answer: str) -> Compare:
    """math-verify's verdicts, except a timeout for `answer` (as a loaded machine gives)."""

    async def compare_with_timeout(
        pairs: Sequence[tuple[str | None, str]], timeout_s: float
    ) -> list[Verdict]:
        verdicts = await compare_all(pairs, timeout_s)
        return [
            Verdict.TIMEOUT if a == answer else v for (a, _), v in zip(pairs, verdicts, strict=True)
        ]

    return compare_with_timeout


async def _search(seed: int, answers: Sequence[str] = ("12", "7", "\\frac{1}{2}")) -> SearchResult:
    config = parse_search_config({"algorithm": "bg_mcts"})
    policy = ScriptedPolicy(seed=seed, p_answer=0.5, answers=answers)
    return await run_search(PROBLEM, config, policy, ScriptedScorer(seed=seed), 4000, seed)


def _used(records: dict[str, list[Row]]) -> dict[str, set[int]]:
    """Per training table, the nodes whose label a row rests on: the answered node of an sft
    or kto row, both sides of a pair, every step node of a prm row."""
    used: dict[str, set[int]] = {}
    for name in TRAINING:
        ids: set[int] = set()
        for row in records.get(name, []):
            if name in ("dpo", "step_dpo"):
                ids |= {row["chosen_node_id"], row["rejected_node_id"]}
            elif name == "prm":
                ids |= {row["node_id"], *row["step_node_ids"]}
            else:
                ids.add(row["node_id"])
        used[name] = ids
    return used


def _drops(records: dict[str, list[Row]]) -> dict[str, int]:
    return {d["gate"]: d["dropped"] for d in records["trees"][0]["gate_drops"]}


def _without(rows: list[Row], skip: set[int], *columns: str) -> list[Row]:
    """`rows` of nodes not in `skip`, without `columns` (those a graded set may change)."""
    return [
        {k: v for k, v in r.items() if k not in columns} for r in rows if r["node_id"] not in skip
    ]


def _below_ungraded(graded: GradedTree, step: int) -> bool:
    """Is an ungraded answered node in the subtree of `step`?"""
    tree = graded.result.tree
    for node_id in graded.ungraded:
        current: int | None = node_id
        while current is not None:
            if current == step:
                return True
            current = tree[current].parent_id
    return False


@pytest.mark.parametrize("config_name", list(CONFIGS))
async def test_a_timed_out_answer_is_in_no_row_and_the_other_rows_stay(config_name: str) -> None:
    config = RecordsConfig.model_validate({**CONFIGS[config_name], "max_pairs_per_problem": 9})
    context = BuildContext(config, run_id="r")
    once_a_row = 0  # rows the timed-out nodes were in when a timeout graded them incorrect
    for seed in range(3):
        result = await _search(seed)
        true = await grade_result(result, "12", problem_id=f"p{seed}", timeout_s=30)
        cut = await grade_result(
            result, "12", problem_id=f"p{seed}", timeout_s=30, compare=_timing_out("7")
        )
        sevens = {n.id for n in result.answered_nodes if n.answer == "7"}
        assert sevens
        before, after = rows_for(true, context), rows_for(cut, context)
        once_a_row += sum(len(ids & sevens) for ids in _used(before).values())

        # no row of any training table rests on a timed-out node, as positive or negative
        assert all(not ids & sevens for ids in _used(after).values()), _used(after)
        assert cut.labels == {i: v for i, v in true.labels.items() if i not in sevens}
        assert cut.ungraded == sevens
        assert cut.grade_timeouts == 1 and true.grade_timeouts == 0
        # every table counts the paths it left out for it, like any other gate
        drops = _drops(after)
        for name in ("sft", "kto", "dpo", "step_dpo"):
            assert drops[f"{name}.ungraded"] == len(sevens)
        assert drops["prm.ungraded"] >= len(sevens)
        # recorded as unknown: a null label (and correct), not false
        for table in ("nodes", "tree_nodes"):
            for row in after[table]:
                if row["node_id"] in sevens:
                    assert row["label"] is None
                    assert row.get("correct") is None
        # the other nodes' rows are the rows they were (difficulty is over the graded nodes)
        for table in ("sft", "kto", "nodes", "tree_nodes"):
            assert _without(after[table], sevens, "difficulty") == _without(
                before[table], sevens, "difficulty"
            ), table
        tree_before, tree_after = before["trees"][0], after["trees"][0]
        assert tree_after["n_answered"] == tree_before["n_answered"]
        assert tree_after["n_correct"] == tree_before["n_correct"]
        assert tree_after["grade_timeouts"] == 1
        # pairs: only graded nodes, each on the side its true label puts it
        for name in ("dpo", "step_dpo"):
            for row in after[name]:
                assert true.labels[row["chosen_node_id"]] is True
                assert true.labels[row["rejected_node_id"]] is False
        # prm: a row that stays keeps its step labels; a value moves only where an ungraded
        # answer below the step is no longer counted
        kept = {r["node_id"]: r for r in before["prm"]}
        for row in after["prm"]:
            old = kept[row["node_id"]]
            assert row["labels"] == old["labels"]
            for step, new_value, old_value in zip(
                row["step_node_ids"], row["values"], old["values"], strict=True
            ):
                assert new_value == old_value or _below_ungraded(cut, step)
        # and every prm row that went is counted as left out for it
        assert len(after["prm"]) + drops["prm.ungraded"] >= len(before["prm"])
    assert once_a_row, "the timed-out nodes were never in a row: the test shows nothing"


async def test_a_timed_out_chosen_answer_is_unknown_not_wrong() -> None:
    result = await _search(0)
    chosen = answer_key(result.chosen_answer)
    assert chosen is not None
    graded = await grade_result(
        result, "12", problem_id="p0", timeout_s=30, compare=_timing_out(chosen)
    )
    assert graded.chosen_correct is None
    records = rows_for(graded, BuildContext(RecordsConfig(), run_id="r"))
    assert records["trees"][0]["correct"] is None
    summary = RunSummary("r", "/tmp/r")
    summary.account(records)
    # neither a correct chosen answer nor a graded one: "0 of 0 graded", not "0 of 1"
    assert (summary.chosen_correct_trees, summary.graded_trees) == (0, 0)


class _Tree:
    """A hand-built tree: a path to the ungraded answer 7 with a wrong continuation after
    it, a wrong sibling below the same first step, and a right answer of its own."""

    def __init__(self) -> None:
        self.tree = tree = Tree(PROBLEM)

        def add(parent: int, text: str, q: float, answered: bool = True, inserted: str = "") -> int:
            if tree[parent].finish is FinishReason.STOP_STRING:
                inserted = "\nStep"
            node = tree.add_child(
                tree[parent],
                text=text,
                inserted_text=inserted,
                q=q,
                answered=answered,
                answer=extract_answer(text, AnswerExtraction.LAST_NUMBER) if answered else None,
                finish=FinishReason.EOS if answered else FinishReason.STOP_STRING,
                output_tokens=len(text.split()),
            )
            return node.id

        first = add(0, " First I look at what Tom buys.", 0.6, answered=False)
        self.first = first
        self.seven = add(first, " 2: He buys some more. The answer is 7.", 0.4)
        # a self-correction trace after the ungraded answer: it states 7 on its way
        self.after_seven = add(
            self.seven,
            " Tom has 5 and buys more. The answer is 5.",
            0.3,
            inserted=" But wait, let me think about the problem again.",
        )
        self.five = add(first, " 2: He keeps what he has. The answer is 5.", 0.2)
        self.twelve = add(0, " Tom has 5 + 7 = 12 apples. The answer is 12.", 0.9)


async def _hand_graded() -> tuple[_Tree, GradedTree]:
    """The hand-built tree graded against 12, its answer 7's comparison timing out."""
    built = _Tree()
    result = SearchResult(
        PROBLEM, "bg_mcts", 0, 300, 100, built.tree, None, None, TokenCounts(), [], "x", 1, 0
    )
    graded = await grade_result(
        result,
        "12",
        problem_id="hand",
        timeout_s=30,
        extraction=AnswerExtraction.LAST_NUMBER,
        compare=_timing_out("7"),
    )
    return built, graded


async def test_a_hand_built_tree_keeps_every_label_that_rests_on_the_timeout_out() -> None:
    built, graded = await _hand_graded()
    config = RecordsConfig.model_validate(
        {"gates": OPEN, "self_correction": "include", "max_pairs_per_problem": 9}
    )
    records = rows_for(graded, BuildContext(config, run_id="r"))
    used = _used(records)
    assert all(built.seven not in ids for ids in used.values())
    # a wrong text that states an ungraded answer is no negative (it may state the reference)
    assert built.after_seven not in used["kto"] | used["dpo"]
    assert {(r["node_id"], r["label"]) for r in records["kto"]} == {
        (built.twelve, True),
        (built.five, False),
    }
    # the first step has two wrong answers and the ungraded 7 below it: it may be a good
    # step, so no prm row labels it (not the 5's, not the trace's), and no step pair takes
    # it as the rejected step
    assert {r["node_id"] for r in records["prm"]} == {built.twelve}
    assert records["step_dpo"] == []
    drops = _drops(records)
    assert drops["prm.ungraded"] == 3  # the 7's own path, the trace through it, the 5's
    assert drops["step_dpo.rejected_step"] == 1
    assert drops["kto.states_reference"] == 1
    # the pair of the right answer and the 5 (a real wrong answer) stays
    assert [(r["chosen_node_id"], r["rejected_node_id"]) for r in records["dpo"]] == [
        (built.twelve, built.five)
    ]
    assert graded.labels == {built.after_seven: False, built.five: False, built.twelve: True}
    assert graded.ungraded == {built.seven}
    # the trace after 7 states it: it may state the reference
    assert built.after_seven in graded.may_state_reference


async def test_a_reference_too_costly_for_sympy_leaves_every_other_answer_ungraded() -> None:
    """The grader refuses a tower of powers before sympy: with the reference such text it
    never looked at any answer (but the identical text), so 16 is not wrong, it is unknown."""
    reference = "2^{2^{2}}"
    assert too_costly(reference)
    result = await _search(1, answers=("16", reference))
    graded = await grade_result(result, reference, problem_id="p", timeout_s=30)
    sixteens = {n.id for n in result.answered_nodes if n.answer == "16"}
    towers = {n.id for n in result.answered_nodes if n.answer == reference}
    assert sixteens and towers
    records = rows_for(graded, BuildContext(RecordsConfig(), run_id="r"))
    assert all(not ids & sixteens for ids in _used(records).values())
    assert graded.labels == dict.fromkeys(towers, True)
    assert graded.ungraded == sixteens


async def test_an_answer_too_costly_for_sympy_stays_incorrect() -> None:
    """Refused on its own text against an ordinary reference: text built to explode, which
    no reference is written as, stays a negative (only the limit's cut-off is unknown)."""
    tower = "9^{9^{9}}"
    result = await _search(1, answers=("12", tower))
    graded = await grade_result(result, "12", problem_id="p", timeout_s=30)
    towers = {n.id for n in result.answered_nodes if n.answer == tower}
    assert towers
    assert all(graded.labels[i] is False for i in towers)  # labelled, and incorrect
    assert graded.grade_timeouts == 1  # refused: counted with the timeouts


# An answer the filter lets through (nothing in its text says it explodes) on which sympy
# grinds past any limit (tests/common/test_grading.py's SLOW_ANSWERS).
SLOW = "(x+1)^{9999}-x^{9999}"


async def test_a_comparison_cut_off_for_real_leaves_its_answer_ungraded() -> None:
    """Through `records_for` and `common.grading`: the slow answer's comparison is cut off
    by `grade_timeout_s`, and no row uses its nodes; the other answers are graded as ever."""
    assert too_costly(SLOW) is None
    await compare("\\frac{1}{2}", "0.5", 30)  # a warm pool: the quick comparisons finish
    result = await _search(2, answers=("12", "7", SLOW))
    slow = {n.id for n in result.answered_nodes if n.answer == SLOW}
    assert slow
    config = RecordsConfig.model_validate({"gates": OPEN, "grade_timeout_s": 2.0})
    records = await records_for(
        result,
        "12",
        RecordsSpec(problem_id="p", run_id="r", config=config, extraction=AnswerExtraction.BOXED),
    )
    labels: dict[int, Any] = {r["node_id"]: r["label"] for r in records["tree_nodes"]}
    for n in result.answered_nodes:
        expected = None if n.id in slow else n.answer == "12"
        assert labels[n.id] is expected, (n.id, n.answer)
    assert all(not ids & slow for ids in _used(records).values())
    tree = records["trees"][0]
    assert tree["grade_timeouts"] == 1
    assert _drops(records)["kto.ungraded"] == len(slow)


async def test_check_flags_a_kto_row_of_an_ungraded_node() -> None:
    """`bgmcts check`'s kto_label: our rows are clean; a kto row of a node the nodes table
    holds as ungraded (a table written by an older build, or edited) is dirty, whatever its
    label (before, a false label on it passed: bool(None) is False)."""
    built, graded = await _hand_graded()
    records = rows_for(graded, BuildContext(RecordsConfig.model_validate({"gates": OPEN})))
    clean = await hygiene({"kto": records["kto"]}, records["nodes"], records["trees"])
    assert clean.tables["kto"].checks["kto_label"] == 0
    five = next(r for r in records["kto"] if r["node_id"] == built.five)
    on_seven = {**five, "node_id": built.seven}
    dirty = await hygiene({"kto": [on_seven]}, records["nodes"], records["trees"])
    assert dirty.tables["kto"].checks["kto_label"] == 1


async def test_the_run_report_and_summary_count_ungraded_nodes_apart() -> None:
    """The run report's and the summary's precision is over the graded answered nodes, and
    both say how many were ungraded (before, an ungraded node counted as a wrong one)."""
    _, graded = await _hand_graded()
    records = rows_for(graded, BuildContext(RecordsConfig(), run_id="r"))
    trees = to_table(records["trees"], TREES_SCHEMA)
    nodes = to_table(records["nodes"], NODES_SCHEMA).to_pandas()
    numbers = report_numbers(trees, nodes)
    assert numbers.precision == pytest.approx(1 / 3)  # the 12 among 12, 5 and 5
    assert (numbers.answered_nodes, numbers.correct_nodes, numbers.ungraded_nodes) == (4, 1, 1)
    answered = dict(_totals_rows(numbers))["answered nodes"]
    assert answered.startswith("4 (1 ungraded")
    # the run summary (as the search actors' records reach it) counts them the same way
    summary = RunSummary("r", "/tmp/r")
    summary.account(records)
    assert summary.precision == pytest.approx(1 / 3)
    assert (summary.answered_nodes, summary.ungraded_nodes) == (4, 1)


SLOW_START = """
import asyncio, json, time
import common.grading as grading
from pipeline.records import RecordsConfig, RecordsSpec, records_for
from search.answers import AnswerExtraction
from tests.pipeline.records.test_ungraded import OPEN, _search

start = grading._PoolStart._start

def slow_start(self):  # a start as slow as on a machine at load 9 (about 10 s seen)
    time.sleep(4)
    start(self)

grading._PoolStart._start = slow_start

async def main():
    result = await _search(2)
    config = RecordsConfig.model_validate({"gates": OPEN, "grade_timeout_s": 1.0})
    spec = RecordsSpec("p", "r", config=config, extraction=AnswerExtraction.BOXED)
    records = await records_for(result, "12", spec)
    labels = {r["node_id"]: r["label"] for r in records["tree_nodes"]}
    expected = {n.id: n.answer == "12" for n in result.answered_nodes}
    got = {str(k): labels[k] for k in expected}
    want = {str(k): v for k, v in expected.items()}
    print(json.dumps([got, want, records["trees"][0]["grade_timeouts"]]))

asyncio.run(main())
"""


def test_a_grading_pool_slower_to_start_than_the_limit_still_labels_every_answer() -> None:
    """In a fresh interpreter (a cold pool) whose pool takes 4 s to start, longer than the
    1 s limit and its 1.5 s allowance: the records wait for the pool before they compare,
    so every answer is labelled as the mathematics says, none left ungraded by the load."""
    out = subprocess.run(
        [sys.executable, "-c", SLOW_START], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    labels, expected, timeouts = json.loads(out.stdout.splitlines()[-1])
    assert expected and labels == expected
    assert timeouts == 0
