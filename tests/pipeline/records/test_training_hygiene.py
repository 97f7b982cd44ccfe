"""Training rows end at their answer, one prompt everywhere, the quality gates, step-level
pairs and prm steps: on hand-built trees whose texts are SmolLM2's own habits (it goes on
after "The answer is N." with a new "Problem:"), real math-verify and real pyarrow."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pipeline.records import (
    SCHEMAS,
    BuildContext,
    GatesConfig,
    RecordsConfig,
    RecordsSpec,
    grade_result,
    prm_rows,
    records_for,
    to_table,
    training_text,
)
from pipeline.records.config import PrmConfig
from pipeline.records.splits import split_of
from pipeline.report.hygiene import hygiene
from search.answers import AnswerExtraction, answer_span, answer_statements, stated_answers
from search.driver import SearchResult
from search.protocols import FinishReason, TokenCounts
from search.tree import Tree

LAST = AnswerExtraction.LAST_NUMBER
PROBLEM = "Mia has 14 shells. Then Mia gets 5 more shells. How many shells does Mia have now?"


def _ctx(**records: Any) -> BuildContext:
    """Run "r" under the records config `records` (everything else its default)."""
    return BuildContext(RecordsConfig.model_validate(records), run_id="r")


def _result(tree: Tree) -> SearchResult:
    return SearchResult(
        problem=tree.problem,
        algorithm="bg_mcts",
        seed=0,
        budget=300,
        c_used=100,
        tree=tree,
        chosen_answer=None,
        chosen_node_id=None,
        tokens=TokenCounts(policy_output_tokens=100),
        trace=[],
        stop_reason="budget_exhausted",
        iterations=3,
        wall_time_s=1.0,
    )


def _child(tree: Tree, parent: int, text: str, **kw: Any) -> int:
    finish = kw.pop("finish", FinishReason.EOS)
    answered = kw.pop("answered", "answer is" in text or finish is FinishReason.EOS)
    from search.answers import extract_answer

    answer = extract_answer(text, LAST) if answered else None
    inserted = "\nStep" if tree[parent].finish is FinishReason.STOP_STRING else ""
    node = tree.add_child(
        tree[parent],
        text=text,
        inserted_text=kw.pop("inserted_text", inserted),
        q=kw.pop("q", 0.5),
        answered=answered,
        answer=answer,
        finish=finish,
        output_tokens=len(text.split()),
        **kw,
    )
    return node.id


def _smollm2_tree() -> Tree:
    """One problem, SmolLM2-style: right and wrong one-step answers that run on past the
    answer, a capped one, a two-step path, a wrong path that first said the right answer."""
    tree = Tree(PROBLEM)
    _child(
        tree,
        0,
        " Mia has 14 + 5 = 19 shells. The answer is 19.\n\nProblem:\nLeo has 9 cards. The "
        "answer is 9.",
        q=0.9,
    )
    _child(tree, 0, " Mia has 14 + 5 = 20 shells. Then she lost some. The answer is 20.", q=0.2)
    _child(
        tree,
        0,
        " Mia has 14 - 5 = 9 shells, because she gave away five of them to her "
        "friend Leo. The answer is 9.",
        q=0.3,
    )
    _child(
        tree, 0, " Mia has 14 + 5 = 19. The answer is 19 shel", q=0.8, finish=FinishReason.LENGTH
    )
    step = _child(tree, 0, " Mia starts with 14 shells.", q=0.6, finish=FinishReason.STOP_STRING)
    _child(tree, step, " 2: She gets 5 more: 14 + 5 = 19.\n\n\nThe answer is 19.", q=0.7)
    _child(tree, step, " 2: She gets 5 more: 14 + 5 = 21. The answer is 21.", q=0.4)
    # a self-correction trace: right first, then continued to a wrong answer
    first = _child(tree, 0, " 14 + 5 = 19. The answer is 19.", q=0.5)
    _child(
        tree,
        first,
        " 2: Actually she had 10, so 10 + 5 = 15. The answer is 15.",
        inserted_text="\nBut wait, let me think about the problem again.\nStep",
        q=0.1,
    )
    return tree


def test_answer_span_cuts_after_the_statement_extraction_read() -> None:
    text = "Step 1: Mia has 19 shells. The answer is 19.\n\nProblem: Leo has 3. The answer is 3."
    span = answer_span(text, LAST)
    assert span is not None and span.closed
    assert text[: span.end] == "Step 1: Mia has 19 shells. The answer is 19."
    boxed = "So $x = 4$. Therefore, the final answer is: $\\boxed{4}$. I hope it is correct."
    cut = answer_span(boxed)
    assert cut is not None and boxed[: cut.end].endswith("$\\boxed{4}$.")
    assert answer_span("The answer is 4 x 3 = 12 bo", LAST) == answer_span(
        "The answer is 4 x 3 = 12 bo", LAST
    )
    capped = answer_span("The answer is 4 x 3 = 12 bo", LAST)
    assert capped is not None and not capped.closed
    assert answer_span("no box here") is None  # boxed mode reads only boxes
    assert len(answer_statements(text)) == 2
    assert stated_answers(text, LAST) == ["19", "3"]


def test_training_text_ends_at_the_answer_and_flags_the_cap() -> None:
    tree = _smollm2_tree()
    first = training_text(tree, tree[1], LAST)
    assert first.text == "Step 1: Mia has 14 + 5 = 19 shells. The answer is 19."
    assert first.dropped_chars > 0 and first.statements == 1 and not first.truncated
    capped = training_text(tree, tree[4], LAST)
    assert capped.truncated and capped.text.endswith("The answer is 19 shel")
    two_steps = training_text(tree, tree[6], LAST)
    assert two_steps.text == (
        "Step 1: Mia starts with 14 shells.\nStep 2: She gets 5 more: 14 + 5 = 19.\n"
        "The answer is 19."
    )  # blank lines folded: every line a non-empty step
    assert training_text(tree, tree[6], LAST, fold_blank_lines=False).text.count("\n") == 4


async def _records(tree: Tree, config: RecordsConfig | None = None) -> dict[str, list[Any]]:
    return await records_for(
        _result(tree),
        "19",
        RecordsSpec(
            problem_id="mia",
            run_id="r",
            config=config or RecordsConfig(),
            instruction="Example problem: ...\nProblem:\n{problem}",
            extraction=LAST,
        ),
    )


async def test_rows_are_clean_under_the_default_gates() -> None:
    records = await _records(_smollm2_tree())
    for name, rows in records.items():
        to_table(rows, SCHEMAS[name])
    report = await hygiene(records, records["nodes"], records["trees"])
    assert report.dirty_rows == 0, report.markdown()
    assert all(report.tables[t].rows for t in ("sft", "dpo", "kto", "prm", "step_dpo"))
    for row in records["sft"]:
        text = row["completion"][0]["content"]
        assert "Problem:" not in text and not row["truncated"]
        assert row["reference"] == "19" and row["split"] == split_of("mia", 0.05)
    # one prompt: the bare problem, in every table (not the search's few-shot scaffold)
    prompts = {r["prompt"][0]["content"] for t in ("sft", "dpo", "kto") for r in records[t]}
    prompts |= {r["prompt"] for t in ("prm", "step_dpo") for r in records[t]}
    assert prompts == {PROBLEM}
    # the capped node (4) is in no training row; nodes keeps it, flagged
    assert {r["node_id"]: r["truncated"] for r in records["nodes"]}[4] is True
    assert 4 not in {r["node_id"] for r in records["sft"]}
    drops = {d["gate"]: d["dropped"] for d in records["trees"][0]["gate_drops"]}
    assert drops["sft.truncated"] == 1
    assert records["trees"][0]["difficulty"] == "mixed"


async def test_rejected_that_states_the_reference_is_dropped() -> None:
    tree = _smollm2_tree()
    # wrong node that said the right answer first in its own text
    said = _child(tree, 0, " 14 + 5 = 19, the answer is 19. No wait, the answer is 18.", q=0.05)
    open_gates = RecordsConfig(
        gates=GatesConfig(rejected_states_reference=False, min_edit_distance=0, sft_top_k=0),
        self_correction="include",
    )
    graded = await grade_result(_result(tree), "19", problem_id="mia", extraction=LAST)
    assert said in graded.states_reference
    assert graded.labels[said] is True  # the first statement is its answer under last_number
    everything = await _records(tree, open_gates)
    gated = await _records(tree, RecordsConfig(self_correction="include"))
    bad_ids = {r["rejected_node_id"] for r in everything["dpo"]}
    assert 9 in graded.states_reference  # the self-correction trace said 19 first
    assert 9 in bad_ids
    assert 9 not in {r["rejected_node_id"] for r in gated["dpo"]}
    assert all(r["label"] or r["node_id"] != 9 for r in gated["kto"])
    drops = Counter({d["gate"]: d["dropped"] for d in gated["trees"][0]["gate_drops"]})
    assert drops["dpo.rejected.states_reference"] >= 1


async def test_edit_distance_q_margin_and_top_k_gates_count_what_they_drop() -> None:
    tree = _smollm2_tree()
    strict = RecordsConfig(gates=GatesConfig(min_edit_distance=1000, min_q_margin=0.9))
    records = await _records(tree, strict)
    assert records["dpo"] == [] and records["step_dpo"] == []
    drops = {d["gate"]: d["dropped"] for d in records["trees"][0]["gate_drops"]}
    assert drops.get("dpo.q_margin", 0) + drops.get("dpo.edit_distance", 0) >= 1
    one = await _records(tree, RecordsConfig(gates=GatesConfig(sft_top_k=1)))
    every = await _records(tree, RecordsConfig(gates=GatesConfig(sft_top_k=0)))
    assert len(one["sft"]) == 1 < len(every["sft"])
    assert one["sft"][0]["score"] == max(r["score"] for r in every["sft"])
    for row in records["dpo"] + every["dpo"]:
        assert row["edit_distance"] >= 0


async def test_near_duplicates_keep_the_best_q() -> None:
    tree = Tree(PROBLEM)
    a = _child(tree, 0, " Mia has 14 + 5 = 19 shells. The answer is 19.", q=0.4)
    b = _child(tree, 0, " Mia has 14 + 5 = 19 shells! The answer is 19.", q=0.9)
    _child(tree, 0, " 14 - 5 = 9. So she has nine of them left now. The answer is 9.", q=0.1)
    records = await _records(tree, RecordsConfig(gates=GatesConfig(sft_top_k=0)))
    assert [r["node_id"] for r in records["sft"]] == [b]
    exact = await _records(tree, RecordsConfig(gates=GatesConfig(near_duplicate=1.0)))
    assert {r["node_id"] for r in exact["sft"]} == {a, b}


async def test_step_dpo_rows_have_step_dpo_columns_and_rebuild() -> None:
    records = await _records(_smollm2_tree())
    rows = records["step_dpo"]
    assert rows
    shared = [r for r in rows if r["shared_steps"]]
    assert shared, "the two-step paths share their first step"
    for row in rows:
        assert row["full_chosen"].startswith(row["initial_reason_steps"] + row["chosen"])
        assert row["full_rejected"].startswith(row["initial_reason_steps"] + row["rejected"])
        assert row["chosen"] != row["rejected"] and row["answer"] == "19"
        assert "\n" not in row["chosen"] + row["rejected"]
    best = shared[0]
    assert best["initial_reason_steps"] == "Step 1: Mia starts with 14 shells.\n"
    assert best["chosen"] == "Step 2: She gets 5 more: 14 + 5 = 19."
    assert best["rejected"] == "Step 2: She gets 5 more: 14 + 5 = 21. The answer is 21."


async def test_prm_steps_rebuild_the_trajectory_and_carry_q() -> None:
    tree = _smollm2_tree()
    graded = await grade_result(_result(tree), "19", problem_id="mia", extraction=LAST)
    rows = prm_rows(graded, _ctx()).rows
    assert rows
    for row in rows:
        node = tree[row["node_id"]]
        assert row["separator"].join(row["completions"]) == graded.training(node).text
        assert all(row["separator"] not in s and s for s in row["completions"])
        n = len(row["completions"])
        assert len(row["labels"]) == len(row["values"]) == len(row["q_values"]) == n
        assert row["q_values"] == [tree[i].q for i in row["step_node_ids"]]
    two = next(r for r in rows if r["node_id"] == 6)
    assert two["step_node_ids"] == [5, 6, 6]  # the answer line belongs to node 6
    assert two["labels"] == [True, True, True]
    assert two["values"][0] == pytest.approx(0.5)  # one of the two answers below is right
    # unanswered branches: off by default, on request labelled from Q
    dead = _child(tree, 5, " 2: She counts again.", q=0.8, finish=FinishReason.STOP_STRING)
    graded = await grade_result(_result(tree), "19", problem_id="mia", extraction=LAST)
    assert all(r["node_id"] != dead for r in prm_rows(graded, _ctx()).rows)
    more = prm_rows(graded, _ctx(prm=PrmConfig(unanswered_branches=True))).rows
    branch = next(r for r in more if r["node_id"] == dead)
    assert branch["ends_in_answer"] is False and branch["labels"][-1] is True
    assert branch["values"][-1] == pytest.approx(0.8)


def test_split_is_stable_and_near_the_fraction() -> None:
    ids = [f"problem-{i}" for i in range(4000)]
    test = [i for i in ids if split_of(i, 0.1) == "test"]
    assert 300 < len(test) < 500
    assert [split_of(i, 0.1) for i in ids] == [split_of(i, 0.1) for i in ids]
    assert {split_of(i, 0.0) for i in ids} == {"train"}


def test_config_rejects_a_bad_prompt_and_gates() -> None:
    with pytest.raises(ValueError, match="template"):
        RecordsConfig.model_validate({"prompt": {"template": "no field"}})
    with pytest.raises(ValueError, match="min_edit_distance"):
        RecordsConfig.model_validate({"gates": {"min_edit_distance": -1}})
    with pytest.raises(ValueError, match="test_fraction"):
        RecordsConfig.model_validate({"test_fraction": 1.5})
