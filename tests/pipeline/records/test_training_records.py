"""The prm, kto and tree_nodes records and decontamination, from real searches (scripted
policy and scorer: a fake LLM, the only fake), real math-verify grading and real pyarrow."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from pipeline.config import ConfigError, parse_run_config
from pipeline.problems.decontamination import (
    DecontaminationConfig,
    Decontaminator,
    build_decontaminator,
    bundled_benchmark,
)
from pipeline.records import (
    SCHEMAS,
    TREE_NODES_SCHEMA,
    BuildContext,
    GatesConfig,
    GradedTree,
    RecordsConfig,
    RecordsSpec,
    grade_result,
    kto_rows,
    node_rows,
    prm_rows,
    records_for,
    to_table,
    tree_node_rows,
)
from search import SearchResult, parse_search_config, run_search
from search.scripted import ScriptedPolicy, ScriptedScorer

PROBLEM = "Tom has 5 apples and buys 7 more. How many apples does he have?"
# Every gate open (the scripted texts are near duplicates of each other): the builders' rules.
OPEN = GatesConfig(
    min_edit_distance=0, sft_top_k=0, near_duplicate=1.0, rejected_states_reference=False
)


def _ctx(**records: Any) -> BuildContext:
    """Run "r" under the records config `records` (everything else its default)."""
    return BuildContext(RecordsConfig.model_validate(records), run_id="r")


async def _search(seed: int) -> SearchResult:
    config = parse_search_config({"algorithm": "bg_mcts"})
    policy = ScriptedPolicy(seed=seed, p_answer=0.5)
    return await run_search(PROBLEM, config, policy, ScriptedScorer(seed=seed), 4000, seed)


async def _graded(reference: str | None = "12") -> list[GradedTree]:
    return [
        await grade_result(await _search(s), reference, problem_id=f"p{s}", timeout_s=10)
        for s in range(3)
    ]


def _below(graded: GradedTree, node_id: int) -> list[int]:
    """Answered node ids in the subtree of `node_id` (itself included), by parent walks."""
    tree = graded.result.tree
    out = []
    for n in tree.answered_nodes():
        current: int | None = n.id
        while current is not None:
            if current == node_id:
                out.append(n.id)
                break
            current = tree[current].parent_id
    return out


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


async def test_prm_rows_label_each_step_from_the_tree_below_it() -> None:
    good_and_bad_steps = [0, 0]
    for graded in await _graded("12"):
        nodes = {r["node_id"]: r for r in node_rows(graded, BuildContext(run_id="r"))}
        rows = prm_rows(graded, _ctx()).rows
        assert {r["node_id"] for r in rows} <= set(nodes) and rows
        texts = {nodes[r["node_id"]]["trajectory"] for r in rows}
        assert len(texts) == len(rows)  # distinct trajectories only
        for row in rows:
            steps, labels, values = row["completions"], row["labels"], row["values"]
            assert len(steps) == len(labels) == len(values) == len(row["step_node_ids"])
            assert row["prompt"] == PROBLEM and steps[0].startswith("Step 1:")
            assert _squash(" ".join(steps)) == _squash(nodes[row["node_id"]]["trajectory"])
            assert row["step_node_ids"][-1] == row["node_id"]
            for step_id, label, value in zip(row["step_node_ids"], labels, values, strict=True):
                node = graded.result.tree[step_id]
                if node.answered:
                    assert label is graded.labels[step_id] and value == float(label)
                else:
                    below = _below(graded, step_id)
                    correct = [i for i in below if nodes[i]["correct"]]
                    assert label is bool(correct)
                    assert value == pytest.approx(len(correct) / len(below))
                good_and_bad_steps[label] += 1
            assert labels[-1] is nodes[row["node_id"]]["correct"]
    assert all(good_and_bad_steps)


async def test_prm_rows_without_a_reference_only_on_request() -> None:
    for graded in await _graded(None):
        assert graded.pseudo
        assert prm_rows(graded, _ctx()).rows == []
        rows = prm_rows(graded, _ctx(prm={"pseudo_labels": True})).rows
        assert rows and all(r["label_source"] == "prm_threshold" for r in rows)


async def test_kto_rows_are_the_distinct_answered_trajectories_with_their_labels() -> None:
    labels_seen = set()
    for graded in await _graded("12"):
        nodes = {r["node_id"]: r for r in node_rows(graded, BuildContext(run_id="r"))}
        everything = kto_rows(graded, _ctx(self_correction="include", gates=OPEN)).rows
        assert len(everything) == len({r["trajectory"] for r in nodes.values()})
        for row in everything:
            node = nodes[row["node_id"]]
            assert row["label"] is node["correct"]
            assert row["completion"] == [{"role": "assistant", "content": node["trajectory"]}]
            assert [m["role"] for m in row["prompt"]] == ["user"]
            labels_seen.add(row["label"])
        clean = kto_rows(graded, _ctx(gates=OPEN)).rows
        assert all(r["answers_in_path"] == 1 for r in clean)
        assert len(clean) == sum(r["answers_in_path"] == 1 for r in everything)
    assert labels_seen == {True, False}


async def test_tree_nodes_rebuild_every_trajectory_and_label_from_parquet_alone(
    tmp_path: Path,
) -> None:
    for graded in await _graded("12"):
        rows = tree_node_rows(graded, BuildContext(run_id="r"))
        assert len(rows) == len(graded.result.tree)
        path = tmp_path / f"{graded.problem_id}.parquet"
        pq.write_table(to_table(rows, TREE_NODES_SCHEMA), path)
        back = {r["node_id"]: r for r in pq.read_table(path).to_pylist()}
        root = back[0]
        assert root["parent_id"] is None and root["text"] == PROBLEM

        def trajectory(node_id: int, back: dict[int, dict[str, object]] = back) -> str:
            parts = []
            current = back[node_id]
            while current["parent_id"] is not None:
                parts.append(f"{current['inserted_text']}{current['text']}")
                current = back[int(str(current["parent_id"]))]
            return str(current["inserted_text"]) + "".join(reversed(parts))

        for node in node_rows(graded, BuildContext(run_id="r")):
            assert trajectory(node["node_id"]) == node["trajectory"]
            row = back[node["node_id"]]
            assert row["label"] is node["label"] and row["answer"] == node["answer"]
            assert row["c_used"] == node["c_used"] and row["iteration"] == node["iteration"]
        unanswered = [r for r in back.values() if not r["answered"]]
        assert unanswered and all(r["label"] is None for r in unanswered)
        assert sum(r["answered"] for r in back.values()) == len(graded.result.answered_nodes)


# --------------------------------------------------------------------------- decontamination
def test_decontamination_finds_benchmark_problems_through_formatting_changes() -> None:
    index = build_decontaminator(DecontaminationConfig())
    assert index is not None and index.names == ["math500", "gsm8k_test"]
    math500 = bundled_benchmark("math500")
    gsm8k = bundled_benchmark("gsm8k_test")
    assert len(math500) == 500 and len(gsm8k) == 1319
    long_one = next(p for p in math500 if len(p.split()) > 30)
    assert index.match(long_one) == "math500"
    # reformatted: case, spacing, LaTeX delimiters, a new preamble
    assert index.match("Problem: " + long_one.upper().replace("$", "\\(").replace(" ", "  "))
    assert index.match(gsm8k[5]) == "gsm8k_test"
    assert index.match(PROBLEM) is None
    assert index.match("What is 2+2?") is None
    words = gsm8k[5].split()
    assert index.match(" ".join(words[:12])) is None  # a quarter of the problem: no match


def test_short_benchmark_problems_match_when_contained_whole() -> None:
    index = Decontaminator([("tiny", ["Compute $\\dbinom{8}{4}$.", "What is 7 times 6?"])], 13)
    assert index.match("Here is a task. Compute $\\dbinom{8}{4}$. Show your work.") == "tiny"
    assert index.match("What is 7 times 6?") == "tiny"
    assert index.match("What is 7 times 8?") is None
    assert index.match("") is None


def test_a_shared_boilerplate_sentence_is_not_contamination() -> None:
    boiler = (
        "The probability can be written as m/n where m and n are relatively prime positive "
        "integers. Find m+n."
    )
    bench = (
        "A bag holds 4 red and 6 blue marbles and two are drawn without replacement. "
        "Find the probability that both are red. " + boiler
    )
    other = (
        "Three fair dice are rolled and the product of the faces is recorded for later. "
        "Find the probability that the product is even. " + boiler
    )
    index = Decontaminator([("b", [bench])], 13)
    assert index.match(other) is None
    assert index.match(bench.replace("4 red", "5 red")) == "b"  # a near-duplicate is caught
    # the rule a single shared n-gram would give
    assert Decontaminator([("b", [bench])], 13, min_overlap=0.01).match(other) == "b"


def test_extra_benchmark_files_and_bad_ones(tmp_path: Path) -> None:
    jsonl = tmp_path / "private.jsonl"
    jsonl.write_text(json.dumps({"question": "A secret question about 17 green llamas?"}) + "\n")
    text = tmp_path / "more.txt"
    text.write_text("\nHow many llamas fit in a 3 by 4 by 5 crate?\n")
    config = DecontaminationConfig(benchmarks=(), extra=(jsonl, text), ngram=5)
    index = build_decontaminator(config)
    assert index is not None and index.names == ["private.jsonl", "more.txt"]
    assert index.match("a secret question about 17 green llamas") == "private.jsonl"
    assert index.match("how many llamas fit in a 3 by 4 by 5 crate") == "more.txt"
    assert build_decontaminator(DecontaminationConfig(enabled=False)) is None

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok one"}\n{"text": "no problem field"}\n')
    with pytest.raises(ValueError, match=r"decontamination.extra: bad.jsonl:line 2: no 'problem'"):
        build_decontaminator(DecontaminationConfig(benchmarks=(), extra=(bad,)))
    with pytest.raises(ConfigError, match=r"records.decontamination.extra: .*file not found"):
        parse_run_config(
            {
                "source": {"kind": "bundled", "dataset": "gsm8k"},
                "search": {"algorithm": "bg_mcts"},
                "records": {"decontamination": {"extra": [str(tmp_path / "missing.jsonl")]}},
            }
        )
    with pytest.raises(ValidationError, match="benchmarks"):
        DecontaminationConfig(benchmarks=("aime",))  # type: ignore[arg-type]


async def test_contaminated_problems_keep_their_tree_but_give_no_training_rows() -> None:
    result = await _search(1)
    clean = await records_for(result, "12", RecordsSpec(problem_id="p", run_id="r"))
    marked = await records_for(
        result,
        "12",
        RecordsSpec(problem_id="p", run_id="r", contamination="math500", config=RecordsConfig()),
    )
    for kind in ("sft", "dpo", "prm", "kto"):
        assert clean[kind], kind
        assert kind not in marked
    for kind in ("nodes", "tree_nodes"):
        assert marked[kind] == clean[kind]
    assert clean["trees"][0]["contaminated"] is None
    assert marked["trees"][0]["contaminated"] == "math500"
    for kind, rows in marked.items():
        to_table(rows, SCHEMAS[kind])


async def test_run_summary_counts_decontaminated_problems(tmp_path: Path) -> None:
    from pipeline.run.summary import RunSummary

    summary = RunSummary("r", tmp_path)
    result = await _search(0)
    for contamination in ("math500", None, "gsm8k_test", "math500"):
        summary.account(
            await records_for(
                result, "12", RecordsSpec(problem_id="p", run_id="r", contamination=contamination)
            )
        )
    assert summary.searched == 4
    assert summary.contaminated == {"math500": 2, "gsm8k_test": 1}
