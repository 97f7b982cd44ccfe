"""The row builders one by one, on a small hand-built tree graded by real math-verify:
each takes (graded tree, BuildContext) and gives back its rows and its gates' counts,
each in its own unit (paths dropped, pairs dropped, steps relabelled)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import pipeline.records.build as build
from pipeline.records import (
    PRM_SCHEMA,
    SCHEMAS,
    TREE_NODES_SCHEMA,
    BuildContext,
    GradedTree,
    RecordsConfig,
    grade_for_records,
    to_table,
)
from pipeline.records.build import rows_for
from pipeline.records.context import gate_counts, gate_unit
from pipeline.records.dpo import dpo_rows
from pipeline.records.kto import kto_rows
from pipeline.records.paths import GatedPaths
from pipeline.records.prm import prm_rows
from pipeline.records.sft import sft_candidates, sft_rows
from pipeline.records.step_dpo import step_dpo_rows
from pipeline.records.yields import counts, yield_counts
from search.answers import AnswerExtraction, extract_answer
from search.driver import SearchResult
from search.protocols import FinishReason, TokenCounts
from search.tree import Tree

LAST = AnswerExtraction.LAST_NUMBER
PROBLEM = "Mia has 14 shells. She gets 5 more. How many shells does she have?"
# three distinct correct answers, one wrong, one the token cap cut, one step without an
# answer below a scored leaf that never answered
TEXTS = [
    (" Mia has 14 + 5 = 19 shells. The answer is 19.", 0.9, FinishReason.EOS),
    (" She had 14 and got 5 more, so 14 + 5 = 19 in all. The answer is 19.", 0.6, FinishReason.EOS),
    (
        " Adding five to fourteen gives nineteen shells altogether. The answer is 19.",
        0.3,
        FinishReason.EOS,
    ),
    (
        " Mia has 14 - 5 = 9 shells left after giving some away. The answer is 9.",
        0.2,
        FinishReason.EOS,
    ),
    (" Mia has 14 + 5 = 19. The answer is 19 shel", 0.8, FinishReason.LENGTH),
]


def _tree() -> Tree:
    tree = Tree(PROBLEM)

    def add(parent: int, text: str, q: float, finish: FinishReason, answered: bool) -> int:
        answer = extract_answer(text, LAST) if answered else None
        node = tree.add_child(
            tree[parent],
            text=text,
            q=q,
            answered=answered,
            answer=answer,
            finish=finish,
            output_tokens=len(text.split()),
        )
        return node.id

    for text, q, finish in TEXTS:
        add(0, text, q, finish, answered=True)
    step = add(0, " Mia starts with 14.", 0.7, FinishReason.STOP_STRING, answered=False)
    add(step, " 2: She counts.", 0.6, FinishReason.STOP_STRING, answered=False)
    return tree


async def _graded(reference: str | None = "19", **records: Any) -> tuple[GradedTree, BuildContext]:
    tree = _tree()
    result = SearchResult(
        PROBLEM, "bg_mcts", 0, 300, 100, tree, None, None, TokenCounts(), [], "x", 1, 0
    )
    context = BuildContext(RecordsConfig.model_validate(records), run_id="run-1")
    graded = await grade_for_records(
        result, reference, problem_id="mia", config=context.config, extraction=LAST
    )
    return graded, context


async def test_sft_caps_its_table_but_the_yield_counts_every_candidate() -> None:
    graded, context = await _graded(gates={"sft_top_k": 1, "near_duplicate": 1.0})
    candidates = sft_candidates(graded, context)
    table = sft_rows(graded, context)
    assert [r["node_id"] for r in candidates.rows] == [1, 2, 3]  # best Q first
    assert [r["node_id"] for r in table.rows] == [1]
    assert table.dropped_paths["sft.top_k"] == 2 and "sft.top_k" not in candidates.dropped_paths
    assert yield_counts(graded, context.config)["correct_trajectories"] == 3
    records = rows_for(graded, context)
    assert len(records["sft"]) == 1 and records["trees"][0]["correct_trajectories"] == 3


async def test_every_gate_counts_what_it_drops() -> None:
    graded, context = await _graded(gates={"min_q_margin": 0.99})
    assert sft_rows(graded, context).dropped_paths["sft.truncated"] == 1  # node 5, cut by the cap
    assert kto_rows(graded, context).dropped_paths["kto.truncated"] == 1
    dpo = dpo_rows(graded, context)
    assert dpo.rows == [] and dpo.dropped_pairs["dpo.q_margin"] >= 1
    assert dpo.dropped_paths["dpo.chosen.truncated"] == 1
    steps = step_dpo_rows(graded, context)
    assert steps.rows == [] and steps.dropped_paths["step_dpo.chosen.truncated"] == 1
    drops = {d["gate"]: d["dropped"] for d in rows_for(graded, context)["trees"][0]["gate_drops"]}
    assert drops["sft.truncated"] == drops["kto.truncated"] == 1
    assert drops["dpo.q_margin"] == dpo.dropped_pairs["dpo.q_margin"]


async def test_kto_from_mixed_problems_only_counts_the_rest() -> None:
    graded, context = await _graded("9", gates={"unpaired_from": "mixed"})
    assert graded.difficulty == "mixed" and kto_rows(graded, context).rows
    graded, context = await _graded("42", gates={"unpaired_from": "mixed"})
    built = kto_rows(graded, context)
    assert graded.difficulty == "none_correct"
    assert built.rows == [] and built.dropped_paths == {"kto.not_mixed": len(TEXTS)}


async def test_every_row_carries_the_shared_columns_its_schema_has() -> None:
    graded, context = await _graded(gates={"min_edit_distance": 0}, test_fraction=0.0)
    records = rows_for(graded, context)
    for name, rows in records.items():
        assert rows, name
        to_table(rows, SCHEMAS[name])  # no column missing, none extra
        for row in rows:
            assert row["problem_id"] == "mia" and row["run_id"] == "run-1", name
            assert row["split"] == "train", name
    for name in ("sft", "dpo", "kto", "trees", "step_dpo"):
        assert {r["difficulty"] for r in records[name]} == {"mixed"}, name
    assert "label_source" not in context.shared_columns(graded, TREE_NODES_SCHEMA)
    assert "difficulty" not in context.shared_columns(graded, PRM_SCHEMA)
    assert context.shared_columns(graded, PRM_SCHEMA)["reference"] == "19"


async def test_prm_yield_leaves_out_the_branches_that_never_answered() -> None:
    graded, context = await _graded()
    answered_only = prm_rows(graded, context)
    graded, branches = await _graded(prm={"unanswered_branches": True})
    with_branches = prm_rows(graded, branches)
    extra = [r for r in with_branches.rows if not r["ends_in_answer"]]
    assert len(extra) == 1 and extra[0]["node_id"] == 7
    assert len(with_branches.rows) == len(answered_only.rows) + 1
    empty = sft_candidates(graded, BuildContext(RecordsConfig(min_sft_score=1.0)))
    assert counts(empty, empty, empty, with_branches)["prm_steps"] == sum(
        len(r["labels"]) for r in answered_only.rows
    )


async def test_pools_sort_both_sides_and_name_their_record() -> None:
    graded, context = await _graded()
    paths = GatedPaths(graded, context.config)
    pools = paths.pools("dpo")
    assert [n.id for n in pools.chosen] == [1, 2, 3]  # best Q first, node 5 truncated
    assert [n.id for n in pools.rejected] == [4]  # worst Q first
    assert pools.dropped_paths == {"dpo.chosen.truncated": 1}
    pools.chosen.reverse()  # a table may reorder its own candidates (random pairing does)
    again = paths.pools("step_dpo")
    assert again.dropped_paths == {"step_dpo.chosen.truncated": 1}
    assert [n.id for n in again.chosen] == [1, 2, 3]


async def test_rows_for_runs_every_builder_once_on_paths_judged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    for name in ("sft_candidates", "dpo_rows", "step_dpo_rows", "prm_rows", "kto_rows"):
        real = getattr(build, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            assert isinstance(args[-1], GatedPaths)  # the paths rows_for judged
            return _real(*args)

        monkeypatch.setattr(build, name, counted)
    judged: list[int] = []
    real_judge = GatedPaths._judge

    def judge(self: GatedPaths, node: Any) -> Any:
        judged.append(node.id)
        return real_judge(self, node)

    monkeypatch.setattr(GatedPaths, "_judge", judge)
    graded, context = await _graded()
    rows_for(graded, context)
    assert sorted(calls) == ["dpo_rows", "kto_rows", "prm_rows", "sft_candidates", "step_dpo_rows"]
    # every answered path judged by the gates once, for all five tables
    assert sorted(judged) == sorted(n.id for n in graded.answered())


async def test_every_count_has_one_unit_and_the_trees_row_keeps_each_apart() -> None:
    graded, context = await _graded(gates={"min_q_margin": 0.99})
    paths = GatedPaths(graded, context.config)
    built = [
        sft_rows(graded, context, paths),
        dpo_rows(graded, context, paths),
        step_dpo_rows(graded, context, paths),
        prm_rows(graded, context, paths),
        kto_rows(graded, context, paths),
    ]
    units: dict[str, set[str]] = {"paths": set(), "pairs": set(), "steps": set()}
    for b in built:
        units["paths"] |= set(b.dropped_paths)
        units["pairs"] |= set(b.dropped_pairs)
        units["steps"] |= set(b.relabelled_steps)
    assert units["paths"] and units["pairs"], units
    for unit, keys in units.items():
        assert {gate_unit(key) for key in keys} <= {unit}, (unit, keys)
    assert gate_unit("prm.false_equation") == "steps"
    assert gate_unit("dpo.chosen.q_margin") == "paths"  # no such gate, but a path's key
    trees = rows_for(graded, context)["trees"][0]
    assert {d["gate"]: d["dropped"] for d in trees["gate_drops"]} == gate_counts(built)


async def test_paths_judged_for_another_tree_or_config_are_refused() -> None:
    graded, context = await _graded()
    other, _ = await _graded()
    with pytest.raises(ValueError, match="another tree"):
        sft_rows(graded, context, GatedPaths(other, context.config))
    with pytest.raises(ValueError, match="another records config"):
        kto_rows(graded, context, GatedPaths(graded, RecordsConfig(dedupe=False)))
    with pytest.raises(ValueError, match="can be left open"):
        GatedPaths(graded, context.config).select(
            graded.answered(), "x", open_gates=frozenset({"truncated"})
        )


def test_the_old_self_correction_key_still_works_with_a_warning() -> None:
    with pytest.warns(FutureWarning, match=r"records\.sft\.self_correction is deprecated"):
        config = RecordsConfig.model_validate({"sft": {"self_correction": "include"}})
    assert config.self_correction == "include"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RecordsConfig(self_correction="only").self_correction == "only"
    with pytest.raises(ValueError, match="disagree"):
        RecordsConfig.model_validate(
            {"self_correction": "only", "sft": {"self_correction": "include"}}
        )
    with pytest.raises(ValueError, match=r"records\.sft: only the deprecated key"):
        RecordsConfig.model_validate({"sft": {"top_k": 2}})
