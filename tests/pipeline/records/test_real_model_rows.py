"""Training rows built from real SmolLM2 text, not scripted text.

`tests/fixtures/smollm2_trees.jsonl` holds the `trees` and `tree_nodes` rows of a real
run of the embedded default (SmolLM2-135M on llama.cpp, the few-shot arithmetic
prompt; regenerate with `scripts/record_real_trees.py`).  Each tree is rebuilt
(`pipeline.records.rebuild`) through today's `records_for` with the default records
config, and the rows are checked as a person about to train on them would: nothing
after the answer, one answer, nothing truncated, one prompt per problem, no rejected
text stating the reference, prm steps that rebuild the completion, kto labels that
agree with grading (`pipeline.report.hygiene`).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pipeline.records import SCHEMAS, RecordsConfig, RecordsSpec, records_for, to_table
from pipeline.records.rebuild import rebuild_result
from pipeline.report.hygiene import after_answer, hygiene
from search.answers import AnswerExtraction

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"


def _fixture() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


async def _records() -> dict[str, list[dict[str, Any]]]:
    out: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in _fixture():
        tree = entry["tree"]
        result = rebuild_result(entry["nodes"], tree)
        records = await records_for(
            result,
            tree["reference"],
            RecordsSpec(
                problem_id=tree["problem_id"],
                run_id="fixture",
                config=RecordsConfig(),
                extraction=AnswerExtraction.LAST_NUMBER,
            ),
        )
        for name, rows in records.items():
            out[name] += rows
    return dict(out)


@pytest.fixture(scope="module")
def records() -> dict[str, list[dict[str, Any]]]:
    return asyncio.run(_records())


def test_the_fixture_is_real_model_text_that_runs_past_its_answers() -> None:
    entries = _fixture()
    assert len(entries) >= 10
    texts = [n["text"] for e in entries for n in e["nodes"] if n["node_id"]]
    assert sum("answer is" in t for t in texts) >= 20
    for entry in entries:  # the rebuild gives back the tree node for node
        result = rebuild_result(entry["nodes"], entry["tree"])
        assert len(result.tree) == len(entry["nodes"])
        for row in entry["nodes"][1:]:
            node = result.tree[row["node_id"]]
            assert (node.text, node.answered, node.answer) == (
                row["text"],
                row["answered"],
                row["answer"],
            )


async def test_real_rows_are_clean(records: dict[str, list[dict[str, Any]]]) -> None:
    for name, rows in records.items():
        to_table(rows, SCHEMAS[name])
    report = await hygiene(records, records["nodes"], records["trees"])
    assert report.dirty_rows == 0, report.markdown()
    assert report.tables["sft"].rows >= 5 and report.tables["dpo"].rows, report.markdown()
    assert report.tables["prm"].rows and report.tables["kto"].rows


async def test_every_training_text_ends_at_its_answer(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    texts = [r["completion"][0]["content"] for t in ("sft", "kto") for r in records[t]]
    texts += [r[side][0]["content"] for r in records["dpo"] for side in ("chosen", "rejected")]
    texts += [r["full_chosen"] for r in records["step_dpo"]]
    assert texts
    for text in texts:
        assert not after_answer(text), text
        assert "Problem:" not in text and "\n\n" not in text, text


async def test_one_prompt_per_problem_and_it_is_the_bare_problem(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    problems = {e["tree"]["problem_id"]: e["nodes"][0]["text"] for e in _fixture()}
    for table in ("sft", "dpo", "kto"):
        for row in records[table]:
            assert row["prompt"] == [{"role": "user", "content": problems[row["problem_id"]]}]
    for table in ("prm", "step_dpo"):
        for row in records[table]:
            assert row["prompt"] == problems[row["problem_id"]]


async def test_prm_rows_rebuild_and_kto_labels_match_grading(
    records: dict[str, list[dict[str, Any]]],
) -> None:
    labels = {(n["problem_id"], n["node_id"]): n["label"] for n in records["nodes"]}
    completions = {
        (r["problem_id"], r["node_id"]): r["completion"][0]["content"] for r in records["kto"]
    }
    for row in records["kto"]:
        assert row["label"] is labels[(row["problem_id"], row["node_id"])]
    rebuilt = 0
    for row in records["prm"]:
        key = (row["problem_id"], row["node_id"])
        assert all(row["separator"] not in step and step for step in row["completions"])
        if key in completions:
            assert row["separator"].join(row["completions"]) == completions[key]
            rebuilt += 1
    assert rebuilt
