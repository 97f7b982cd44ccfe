"""The process gates: a right answer reached through a wrong step (a false equation, or a
step the PRM scored low) is no positive training example, on a hand-built tree graded by
real math-verify; the negative side and the prm table's rows stay, prm's labels turn bad."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.records import GatesConfig, RecordsConfig, grade_for_records
from pipeline.records.build import rows_for
from pipeline.records.context import BuildContext
from pipeline.records.dpo import dpo_rows
from pipeline.records.grading import GradedTree
from pipeline.records.kto import kto_rows
from pipeline.records.paths import GatedPaths
from pipeline.records.prm import prm_rows
from pipeline.records.sft import sft_rows
from pipeline.records.step_dpo import step_dpo_rows
from search.answers import AnswerExtraction, extract_answer
from search.driver import SearchResult
from search.protocols import FinishReason, TokenCounts
from search.tree import Tree

LAST = AnswerExtraction.LAST_NUMBER
PROBLEM = "Carla has 9 stickers. Then Carla gives away 7 stickers. How many does she have now?"
# every pair and row visible: no edit-distance, top-k or near-duplicate gate in the way
OPEN = {"min_edit_distance": 0, "sft_top_k": 0, "near_duplicate": 1.0}


class Carla:
    """Node ids of the tree: the run's real example (right answer, false step 2) among
    clean right and wrong paths."""

    def __init__(self) -> None:
        self.tree = tree = Tree(PROBLEM)

        def add(parent: int, text: str, q: float, answered: bool = True) -> int:
            finish = FinishReason.EOS if answered else FinishReason.STOP_STRING
            inserted = "\nStep" if tree[parent].finish is FinishReason.STOP_STRING else ""
            node = tree.add_child(
                tree[parent],
                text=text,
                inserted_text=inserted,
                q=q,
                answered=answered,
                answer=extract_answer(text, LAST) if answered else None,
                finish=finish,
                output_tokens=len(text.split()),
            )
            return node.id

        self.clean = add(0, " Carla has 9 - 7 = 2 stickers. The answer is 2.", 0.8)
        step1 = add(0, " Carla has 9 stickers.", 0.7, answered=False)
        self.false_step = add(step1, " 2: Carla has 7 - 9 = 1 sticker.", 0.6, answered=False)
        self.lucky = add(self.false_step, " 3: Carla has 1 + 1 = 2 stickers. The answer is 2.", 0.9)
        self.wrong_after_step1 = add(
            step1, " 2: Carla has 9 + 7 = 16 stickers. The answer is 16.", 0.3
        )
        # a wrong path whose arithmetic is false too: the negative side keeps it
        self.wrong_false = add(0, " Carla has 9 + 7 = 15 stickers, so the answer is 15.", 0.2)
        # a right path through a step the PRM scored low (no false equation)
        low = add(0, " Carla starts with nine of them.", 0.3, answered=False)
        self.low_q = add(low, " 2: She gives 7 away, so 9 - 7 = 2. The answer is 2.", 0.85)


async def _graded(carla: Carla, **gates: Any) -> tuple[GradedTree, BuildContext]:
    result = SearchResult(
        PROBLEM, "bg_mcts", 0, 300, 100, carla.tree, None, None, TokenCounts(), [], "x", 1, 0
    )
    config = RecordsConfig.model_validate({"gates": {**OPEN, **gates}, "max_pairs_per_problem": 9})
    graded = await grade_for_records(
        result, "2", problem_id="carla", config=config, extraction=LAST
    )
    return graded, BuildContext(config, run_id="r")


def _positive_ids(graded: GradedTree, context: BuildContext) -> dict[str, set[int]]:
    """The answered node of every positive-side row, per table."""
    return {
        "sft": {r["node_id"] for r in sft_rows(graded, context).rows},
        "dpo": {r["chosen_node_id"] for r in dpo_rows(graded, context).rows},
        "step_dpo": {r["chosen_node_id"] for r in step_dpo_rows(graded, context).rows},
        "kto": {r["node_id"] for r in kto_rows(graded, context).rows if r["label"]},
    }


async def test_a_right_answer_through_a_false_equation_leaves_every_positive_side() -> None:
    carla = Carla()
    graded, context = await _graded(carla, false_equation=False)
    assert graded.labels[carla.lucky] is True  # the answer is right: only its step is wrong
    before = _positive_ids(graded, context)
    assert all(carla.lucky in ids for ids in before.values()), before

    graded, context = await _graded(carla)  # the gate is on by default
    after = _positive_ids(graded, context)
    for table, ids in after.items():
        assert carla.lucky not in ids, table
        assert carla.clean in ids or table == "step_dpo", table
    drops = {d["gate"]: d["dropped"] for d in rows_for(graded, context)["trees"][0]["gate_drops"]}
    for key in ("sft", "kto", "dpo.chosen", "step_dpo.chosen"):
        assert drops[f"{key}.false_equation"] == 1, drops
    assert not any(key.endswith("rejected.false_equation") for key in drops), drops


async def test_step_dpo_gates_the_whole_chosen_path_not_only_its_chosen_step() -> None:
    carla = Carla()
    graded, context = await _graded(carla, false_equation=False)
    # the pair that shares "Step 1" takes the lucky path: its own first step (step 2) is the
    # false one here, but the gate would drop it wherever on the path the false step were
    rows = step_dpo_rows(graded, context).rows
    pair = next(r for r in rows if r["chosen_node_id"] == carla.lucky)
    assert pair["shared_steps"] == 1 and "1 + 1 = 2" in pair["full_chosen"]
    graded, context = await _graded(carla)
    assert carla.lucky not in {r["chosen_node_id"] for r in step_dpo_rows(graded, context).rows}


async def test_the_negative_side_keeps_a_wrong_path_with_a_false_equation() -> None:
    carla = Carla()
    graded, context = await _graded(carla)
    assert graded.labels[carla.wrong_false] is False
    pools = GatedPaths(graded, context.config).pools("dpo")
    assert carla.wrong_false in {n.id for n in pools.rejected}
    assert carla.lucky not in {n.id for n in pools.chosen}
    undesirable = {r["node_id"] for r in kto_rows(graded, context).rows if not r["label"]}
    assert carla.wrong_false in undesirable


async def test_prm_relabels_the_false_step_and_every_later_one_and_counts_them() -> None:
    carla = Carla()
    graded, context = await _graded(carla, false_equation=False)
    plain = {r["node_id"]: r for r in prm_rows(graded, context).rows}
    assert plain[carla.lucky]["labels"] == [True, True, True]
    built = prm_rows(graded, (await _graded(carla))[1])
    row = next(r for r in built.rows if r["node_id"] == carla.lucky)
    assert row["completions"][1] == "Step 2: Carla has 7 - 9 = 1 sticker."
    assert row["labels"] == [True, False, False]
    assert row["values"][1:] == [0.0, 0.0] and row["values"][0] == plain[carla.lucky]["values"][0]
    # the row stays (its first step is a good example), and a wrong path's labels were bad
    # already: only the two steps of the lucky path went from good to bad
    assert built.relabelled_steps == {"prm.false_equation": 2} and not built.dropped_paths
    assert {r["node_id"] for r in built.rows} == set(plain)
    wrong = next(r for r in built.rows if r["node_id"] == carla.wrong_false)
    assert wrong["labels"] == plain[carla.wrong_false]["labels"] == [False]


async def test_min_step_value_drops_a_right_path_through_a_low_q_step() -> None:
    carla = Carla()
    graded, context = await _graded(carla)
    assert all(carla.low_q in ids for ids in _positive_ids(graded, context).values())
    graded, context = await _graded(carla, min_step_value=0.5)
    positive = _positive_ids(graded, context)
    for table, ids in positive.items():
        assert carla.low_q not in ids, table
        assert carla.clean in ids or table == "step_dpo", table
    drops = {d["gate"]: d["dropped"] for d in rows_for(graded, context)["trees"][0]["gate_drops"]}
    for key in ("sft", "kto", "dpo.chosen", "step_dpo.chosen"):
        assert drops[f"{key}.low_step_value"] == 1, drops
    # the negative side keeps its low-Q paths, and prm labels do not read the PRM's own Q
    undesirable = {r["node_id"] for r in kto_rows(graded, context).rows if not r["label"]}
    assert {carla.wrong_false, carla.wrong_after_step1} <= undesirable
    plain = prm_rows(*(await _graded(carla)))
    assert prm_rows(graded, context).rows == plain.rows
    assert not any("low_step_value" in key for key in prm_rows(graded, context).dropped_paths)


def test_defaults_and_clear_errors() -> None:
    gates = GatesConfig()
    assert gates.false_equation is True and gates.min_step_value is None
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="min_step_value"):
            RecordsConfig.model_validate({"gates": {"min_step_value": bad}})
    with pytest.raises(ValueError, match="false_equation"):
        RecordsConfig.model_validate({"gates": {"false_equation": "sometimes"}})
    with pytest.raises(ValueError, match="false_equations"):
        RecordsConfig.model_validate({"gates": {"false_equations": True}})  # a typo: forbidden
