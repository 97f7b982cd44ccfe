"""Records from real searches (scripted policy and scorer), real math-verify, real pyarrow."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from math_verify import parse, verify
from pydantic import ValidationError

from pipeline.records import (
    DPO_SCHEMA,
    ERRORS_SCHEMA,
    NODES_SCHEMA,
    SCHEMAS,
    SFT_SCHEMA,
    TREES_SCHEMA,
    BuildContext,
    GatesConfig,
    GradedTree,
    RecordsConfig,
    RecordsSpec,
    RecordValidationError,
    dpo_rows,
    error_row,
    grade_result,
    kto_rows,
    node_rows,
    prm_rows,
    records_for,
    schema_markdown,
    sft_rows,
    step_dpo_rows,
    to_table,
    tree_node_rows,
    tree_row,
)
from search import SearchResult, parse_search_config, run_search
from search.answer_choice import normalize_answer
from search.protocols import FinishReason
from search.scripted import ScriptedPolicy, ScriptedScorer

PROBLEM = "What is the value of the expression?"
# Every gate open: the builders' own rules (pairing, dedupe, self-correction) alone.  The
# scripted texts are near duplicates of each other ("w0.0 w0.1 ..."); the gates have their
# own tests in test_training_records.py.
OPEN = GatesConfig(
    min_edit_distance=0, sft_top_k=0, near_duplicate=1.0, rejected_states_reference=False
)


def _ctx(**records: Any) -> BuildContext:
    """Run "r" under the records config `records` (everything else its default)."""
    return BuildContext(RecordsConfig.model_validate(records), run_id="r")


async def _search(
    seed: int,
    algorithm: str = "bg_mcts",
    budget: float = 4000,
    answers: tuple[str, ...] = ("12", "7", "\\frac{1}{2}"),
) -> SearchResult:
    config = parse_search_config({"algorithm": algorithm})
    policy = ScriptedPolicy(seed=seed, p_answer=0.5, answers=answers)
    return await run_search(PROBLEM, config, policy, ScriptedScorer(seed=seed), budget, seed)


async def _results() -> list[SearchResult]:
    results = [await _search(s) for s in range(3)]
    results.append(await _search(7, algorithm="repeated_sampling", budget=3000))
    assert all(r.answered_nodes for r in results)
    return results


def _mv(answer: str | None, reference: str) -> bool:
    """math-verify straight, as the ground truth for the grader."""
    if answer is None:
        return False
    return bool(verify(parse(f"${reference}$"), parse(f"${answer}$")))


@pytest.mark.parametrize("reference", ["12", "0.5"])
async def test_every_answered_node_is_one_row_and_correct_agrees_with_math_verify(
    reference: str,
) -> None:
    seen_correct = seen_wrong = 0
    for i, result in enumerate(await _results()):
        graded = await grade_result(result, reference, problem_id=f"p{i}", timeout_s=10)
        rows = node_rows(graded, BuildContext(run_id="r", policy_model="pol", prm_model="prm"))
        assert [r["node_id"] for r in rows] == [n.id for n in result.answered_nodes]
        assert len({r["node_id"] for r in rows}) == len(rows)
        distinct = {normalize_answer(n.answer) for n in result.answered_nodes if n.answer}
        assert set(graded.verified) == distinct  # each distinct answer verified once
        for row in rows:
            assert row["correct"] is _mv(row["answer"], reference)
            assert row["label"] is row["correct"] and row["pseudo_label"] is False
            assert row["label_source"] == "reference" and row["problem_id"] == f"p{i}"
            node = result.tree[row["node_id"]]
            assert row["trajectory"] == result.tree.assistant_text(node)
            assert row["trajectory"].startswith("Step 1:") and row["c_used"] == node.c_used
            seen_correct += row["correct"]
            seen_wrong += not row["correct"]
        tree = tree_row(graded, BuildContext(run_id="r"))
        assert tree["correct"] is _mv(result.chosen_answer, reference)
        assert tree["n_answered"] == len(rows)
        assert tree["n_correct"] == sum(r["correct"] for r in rows)
    assert seen_correct and seen_wrong
    if reference == "0.5":  # \frac{1}{2} is 0.5 only by math-verify, not by string
        assert any(r["answer"] == "\\frac{1}{2}" and r["correct"] for r in rows)


async def _graded(reference: str | None = "12", **kwargs: Any) -> list[GradedTree]:
    return [
        await grade_result(r, reference, problem_id=f"p{i}", **kwargs)
        for i, r in enumerate(await _results())
    ]


def _path_ids(graded: GradedTree, node_id: int) -> list[int]:
    """Root-to-node ids by walking parent ids (independent of pipeline.records.tree_paths)."""
    tree = graded.result.tree
    ids = []
    current: int | None = node_id
    while current is not None and current != 0:
        ids.append(current)
        current = tree[current].parent_id
    return ids[::-1]


def _expected_pair_type(graded: GradedTree, a: int, b: int) -> tuple[str, int]:
    pa_, pb = _path_ids(graded, a), _path_ids(graded, b)
    shared = 0
    while shared < min(len(pa_), len(pb)) and pa_[shared] == pb[shared]:
        shared += 1
    if shared in (len(pa_), len(pb)):
        return "prefix", shared
    if shared == 0:
        return "root", 0
    if len(pa_) == len(pb) == shared + 1:
        return "siblings", shared
    return "cousins", shared


@pytest.mark.parametrize("cap", [0, 1, 2, 100])
@pytest.mark.parametrize("pairing", ["shared_prefix", "best_vs_worst", "random"])
async def test_dpo_pairs_join_correct_and_incorrect_trajectories_that_diverge(
    cap: int, pairing: Any
) -> None:
    types_seen: Counter[str] = Counter()
    for graded in await _graded("12"):
        labels = {r["node_id"]: r for r in node_rows(graded, BuildContext(run_id="r"))}
        rule = _ctx(
            max_pairs_per_problem=cap,
            pairing=pairing,
            seed=3,
            gates=OPEN,
            self_correction="include",
        )
        pairs = dpo_rows(graded, rule).rows
        assert len(pairs) <= cap
        for pair in pairs:
            assert pair["problem_id"] == graded.problem_id
            chosen, rejected = labels[pair["chosen_node_id"]], labels[pair["rejected_node_id"]]
            assert chosen["correct"] is True and rejected["correct"] is False
            assert pair["chosen"] == [{"role": "assistant", "content": chosen["trajectory"]}]
            assert pair["rejected"] == [{"role": "assistant", "content": rejected["trajectory"]}]
            assert pair["score_chosen"] == chosen["score"]
            assert pair["score_rejected"] == rejected["score"]
            assert [m["role"] for m in pair["prompt"]] == ["user"]
            assert PROBLEM in pair["prompt"][0]["content"]
            kind, shared = _expected_pair_type(graded, chosen["node_id"], rejected["node_id"])
            assert (pair["pair_type"], pair["shared_steps"]) == (kind, shared)
            assert kind != "prefix"  # dropped by default: neither extends the other
            assert not rejected["trajectory"].startswith(chosen["trajectory"])
            assert not chosen["trajectory"].startswith(rejected["trajectory"])
            k = pair["shared_prefix_chars"]
            assert chosen["trajectory"][:k] == rejected["trajectory"][:k]
            assert chosen["trajectory"][k:] != rejected["trajectory"][k:]
            for side in ("chosen", "rejected"):
                text = pair[side][0]["content"]
                assert pair[f"{side}_answers_in_path"] == text.count("\\boxed{")
            types_seen[kind] += 1
        # every node (and trajectory) is used at most once
        used = [p["chosen_node_id"] for p in pairs] + [p["rejected_node_id"] for p in pairs]
        assert len(set(used)) == len(used)
        if len(pairs) < cap:  # greedy: no allowed pair of two unused nodes is left over
            for c in (i for i in labels if labels[i]["correct"] and i not in used):
                for r in (i for i in labels if not labels[i]["correct"] and i not in used):
                    kind, _ = _expected_pair_type(graded, c, r)
                    same_text = {labels[c]["trajectory"], labels[r]["trajectory"]} & {
                        labels[u]["trajectory"] for u in used
                    }
                    assert kind == "prefix" or same_text, (c, r)
        if pairing == "shared_prefix":
            shared = [p["shared_steps"] for p in pairs]
            assert shared == sorted(shared, reverse=True)
        elif pairing == "best_vs_worst":
            gaps = [p["score_chosen"] - p["score_rejected"] for p in pairs]
            assert gaps == sorted(gaps, reverse=True)
        else:
            assert dpo_rows(graded, rule).rows == pairs
    if cap >= 2:
        assert types_seen["siblings"] + types_seen["cousins"] > 0, types_seen


async def test_dpo_prefix_pairs_only_when_asked_for() -> None:
    prefix_pairs = 0
    for graded in await _graded("12"):
        everything = ("siblings", "cousins", "root", "prefix")
        pairs = dpo_rows(
            graded,
            _ctx(
                max_pairs_per_problem=100,
                dpo={"pair_types": everything},
                gates=OPEN,
                self_correction="include",
            ),
        ).rows
        only_prefix = dpo_rows(
            graded,
            _ctx(
                max_pairs_per_problem=100,
                dpo={"pair_types": ("prefix",)},
                gates=OPEN,
                self_correction="include",
            ),
        ).rows
        for pair in only_prefix:
            chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
            assert chosen.startswith(rejected) or rejected.startswith(chosen)
            assert pair["pair_type"] == "prefix"
        prefix_pairs += len(only_prefix)
        assert {p["pair_type"] for p in pairs} <= set(everything)
    assert prefix_pairs  # the scripted trees do hold trajectories that extend others


async def test_sft_rows_only_from_correct_nodes_above_min_score_without_duplicates() -> None:
    graded_trees = await _graded("12")
    # a duplicate trajectory: the best correct node's text again, under the same parent
    graded = graded_trees[0]
    tree = graded.result.tree
    original = max((n for n in tree.answered_nodes() if graded.labels[n.id]), key=lambda n: n.q)
    copy = tree.add_child(
        tree[original.parent_id or 0],
        text=original.text,
        inserted_text=original.inserted_text,
        q=original.q / 2,
        answered=True,
        answer=original.answer,
        finish=FinishReason.EOS,
        output_tokens=original.output_tokens,
    )
    regraded = await grade_result(graded.result, "12", problem_id="p0")
    assert regraded.labels[copy.id]
    with_dupes = sft_rows(regraded, _ctx(dedupe=False, self_correction="include", gates=OPEN)).rows
    deduped = sft_rows(regraded, _ctx(self_correction="include", gates=OPEN)).rows
    assert len(with_dupes) == len(deduped) + 1
    assert copy.id not in {r["node_id"] for r in deduped}  # the best-Q copy is kept

    for g in [regraded, *graded_trees[1:]]:
        nodes = {r["node_id"]: r for r in node_rows(g, BuildContext(run_id="r"))}
        for min_score in (0.0, 0.5, 0.9):
            rows = sft_rows(
                g, _ctx(min_sft_score=min_score, self_correction="include", gates=OPEN)
            ).rows
            expected = {
                r["trajectory"] for r in nodes.values() if r["correct"] and r["score"] >= min_score
            }
            texts = [r["completion"][0]["content"] for r in rows]
            assert sorted(texts) == sorted(expected)  # no duplicates, nothing missing
            for row in rows:
                node = nodes[row["node_id"]]
                assert node["correct"] and row["score"] == node["score"] >= min_score
                [user], [assistant] = row["prompt"], row["completion"]
                assert user == {"role": "user", "content": PROBLEM}  # the bare problem
                assert assistant == {"role": "assistant", "content": node["trajectory"]}
            assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)


async def test_sft_keeps_clean_paths_by_default_and_self_corrections_on_request() -> None:
    clean = corrections = 0
    for g in await _graded("12"):
        every = sft_rows(g, _ctx(self_correction="include", gates=OPEN)).rows
        default = sft_rows(g, _ctx(gates=OPEN)).rows
        only = sft_rows(g, _ctx(self_correction="only", gates=OPEN)).rows
        for row in every:  # the count agrees with the answers the text states
            assert row["answers_in_path"] == row["completion"][0]["content"].count("\\boxed{")
        assert all(r["answers_in_path"] == 1 for r in default)
        assert all(r["answers_in_path"] > 1 for r in only)
        assert sorted(r["node_id"] for r in every) == sorted(
            r["node_id"] for r in [*default, *only]
        )
        clean += len(default)
        corrections += len(only)
    assert clean and corrections  # the scripted trees hold both kinds
    with pytest.raises(ValueError, match="self_correction"):
        sft_rows(g, _ctx(self_correction="sometimes"))


async def test_no_reference_prm_threshold_pseudo_labels_are_marked() -> None:
    for graded in await _graded(None, pseudo_label="prm_threshold", threshold=0.6):
        assert graded.label_source == "prm_threshold" and not graded.verified
        rows = node_rows(graded, BuildContext(run_id="r"))
        for row in rows:
            assert row["correct"] is None and row["pseudo_label"] is True
            assert row["label_source"] == "prm_threshold"
            assert row["label"] is (row["score"] >= 0.6)
        tree = tree_row(graded, BuildContext(run_id="r"))
        assert tree["correct"] is None and tree["reference"] is None
        assert tree["label_source"] == "prm_threshold"
        for sft in sft_rows(graded, _ctx()).rows:
            assert sft["score"] >= 0.6 and sft["label_source"] == "prm_threshold"
        for pair in dpo_rows(graded, _ctx()).rows:
            assert pair["score_chosen"] >= 0.6 > pair["score_rejected"]


async def test_no_reference_majority_groups_equivalent_answers() -> None:
    # "0.5" and "\frac{1}{2}" are one answer to math-verify: together they outvote "7"
    answers = ("0.5", "\\frac{1}{2}", "7", "7")
    checked = 0
    for seed in range(4):
        result = await _search(seed, algorithm="repeated_sampling", budget=3000, answers=answers)
        graded = await grade_result(result, None, problem_id="p", pseudo_label="majority")
        counts = Counter(n.answer for n in result.answered_nodes)
        half = counts["0.5"] + counts["\\frac{1}{2}"]
        if half == counts["7"]:
            continue
        winners = {"0.5", "\\frac{1}{2}"} if half > counts["7"] else {"7"}
        rows = node_rows(graded, BuildContext(run_id="r"))
        for row in rows:
            assert row["label"] is (row["answer"] in winners)
            assert row["pseudo_label"] is True and row["label_source"] == "majority"
            assert row["correct"] is None
        checked += 1
    assert checked


def _all_rows(graded: list[GradedTree]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
    for g in graded:
        out["nodes"] += node_rows(g, BuildContext(run_id="r", policy_model="pol", prm_model=None))
        out["trees"].append(tree_row(g, BuildContext(run_id="r", policy_model="pol")))
        out["sft"] += sft_rows(g, _ctx(gates=OPEN)).rows
        out["dpo"] += dpo_rows(g, _ctx(max_pairs_per_problem=2, gates=OPEN)).rows
        out["step_dpo"] += step_dpo_rows(g, _ctx(max_pairs_per_problem=2, gates=OPEN)).rows
        out["prm"] += prm_rows(g, _ctx(prm={"pseudo_labels": True})).rows
        out["kto"] += kto_rows(g, _ctx(gates=OPEN)).rows
        out["tree_nodes"] += tree_node_rows(g, BuildContext(run_id="r"))
    out["errors"] += [
        error_row("p9", "search", RuntimeError("engine down"), run_id="r"),
        error_row(None, "source", "bad line 3", run_id="r"),
    ]
    return out


async def test_tables_round_trip_through_parquet(tmp_path: Path) -> None:
    graded = [*await _graded("0.5"), *await _graded(None, pseudo_label="majority")]
    for name, rows in _all_rows(graded).items():
        assert rows, name
        schema = SCHEMAS[name]
        table = to_table(rows, schema)
        assert table.schema.equals(schema, check_metadata=True)
        assert table.num_rows == len(rows)
        path = tmp_path / f"{name}.parquet"
        pq.write_table(table, path)
        back = pq.read_table(path)
        assert back.equals(table)
        assert back.schema.equals(schema, check_metadata=True)
        assert back.to_pylist() == [{f: row.get(f) for f in schema.names} for row in rows]


def test_error_rows() -> None:
    row = error_row("p1", "grade", ValueError("bad latex"), run_id="r")
    assert row == {
        "problem_id": "p1",
        "stage": "grade",
        "error_type": "ValueError",
        "message": "bad latex",
        "run_id": "r",
    }
    assert to_table([row], ERRORS_SCHEMA).num_rows == 1


async def test_bad_rows_raise_errors_naming_the_field() -> None:
    graded = (await _graded("12"))[0]
    good = node_rows(graded, BuildContext(run_id="r"))[0]
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({**good, "score": "high"}, "score", "not double"),
        ({**good, "node_id": 1.5}, "node_id", "not int64"),
        ({**good, "correct": "yes"}, "correct", "not bool"),
        ({**good, "trajectory": None}, "trajectory", "null in a non-nullable"),
        ({k: v for k, v in good.items() if k != "run_id"}, "run_id", "missing"),
        ({**good, "colour": "red"}, "colour", "not in the schema"),
    ]
    for bad, field_name, reason in cases:
        with pytest.raises(RecordValidationError) as info:
            to_table([good, bad], NODES_SCHEMA)
        assert info.value.field == field_name and info.value.row == 1
        assert f"field {field_name!r} (row 1)" in str(info.value)
        assert reason in str(info.value) and "nodes record" in str(info.value)
    sft = sft_rows(graded, _ctx(self_correction="include")).rows[0]
    with pytest.raises(RecordValidationError, match="'completion'"):
        to_table([{**sft, "completion": "not a list"}], SFT_SCHEMA)
    # a missing nullable field is simply null
    table = to_table([{k: v for k, v in good.items() if k != "prm_model"}], NODES_SCHEMA)
    assert table.column("prm_model").to_pylist() == [None]


def test_schemas_are_documented_field_by_field() -> None:
    for name, schema in SCHEMAS.items():
        assert schema.metadata[b"record"] == name.encode()
        markdown = schema_markdown(schema)
        for field in schema:
            assert field.metadata[b"description"], (name, field.name)
            assert f"`{field.name}`" in markdown
    message = pa.struct(
        [pa.field("role", pa.string(), False), pa.field("content", pa.string(), False)]
    )
    for column in ("prompt", "chosen", "rejected"):
        assert DPO_SCHEMA.field(column).type.value_type.equals(message)
    for column in ("prompt", "completion"):
        assert SFT_SCHEMA.field(column).type.value_type.equals(message)
    assert "messages" not in SFT_SCHEMA.names
    assert {"policy_output_tokens", "prm_output_tokens", "seed"} <= set(TREES_SCHEMA.names)


def _user_texts(records: dict[str, list[dict[str, Any]]]) -> set[str]:
    """The user turn of every training row, whatever its table's shape."""
    texts = set()
    for kind in ("sft", "dpo", "kto", "prm", "step_dpo"):
        for row in records[kind]:
            prompt = row["prompt"]
            texts.add(prompt if isinstance(prompt, str) else prompt[0]["content"])
            if not isinstance(prompt, str):
                assert [m["role"] for m in prompt] == ["user"]
    return texts


async def test_one_training_prompt_in_every_table() -> None:
    """The bare problem by default, whatever the search's prompt; a template or the search's
    own prompt on request; the same user turn in sft, dpo, kto, prm and step_dpo."""
    result = (await _results())[0]
    custom = "Solve this, step by step: {problem}"
    open_gates = RecordsConfig(gates=OPEN)
    records = await records_for(
        result, "12", RecordsSpec(problem_id="p", run_id="r", instruction=custom, config=open_gates)
    )
    assert all(records[k] for k in ("sft", "dpo", "kto", "prm"))
    assert _user_texts(records) == {result.problem}
    templated = open_gates.model_copy(
        update={"prompt": {"template": "Problem: {problem}\nAnswer in a box."}}
    )
    templated = RecordsConfig.model_validate(templated.model_dump())
    records = await records_for(
        result, "12", RecordsSpec(problem_id="p", run_id="r", config=templated)
    )
    assert _user_texts(records) == {f"Problem: {result.problem}\nAnswer in a box."}
    scaffold = RecordsConfig.model_validate(
        {**open_gates.model_dump(), "prompt": {"search_prompt": True}}
    )
    records = await records_for(
        result, "12", RecordsSpec(problem_id="p", run_id="r", instruction=custom, config=scaffold)
    )
    assert _user_texts(records) == {custom.format(problem=result.problem)}
    with pytest.raises(ValidationError, match="template"):
        RecordsConfig.model_validate({"prompt": {"template": "no field here"}})


async def test_records_for_applies_the_config() -> None:
    result = (await _results())[0]
    config = RecordsConfig(min_sft_score=0.3, max_pairs_per_problem=1, pairing="random", seed=5)
    records = await records_for(
        result, "12", RecordsSpec(problem_id="p", run_id="r", config=config)
    )
    assert len(records["trees"]) == 1 and len(records["dpo"]) <= 1
    assert all(r["score"] >= 0.3 for r in records["sft"])
    assert all(p["pairing"] == "random" for p in records["dpo"])
    for name, rows in records.items():
        to_table(rows, SCHEMAS[name])
    with pytest.raises(ValidationError):
        RecordsConfig(pairing="all_pairs")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="self_correction"):
        RecordsConfig.model_validate({"self_correction": "sometimes"})
    with pytest.raises(ValidationError, match="pair_types"):
        RecordsConfig.model_validate({"dpo": {"pair_types": ["uncles"]}})
    with pytest.raises(ValidationError):
        RecordsConfig(min_sft_score=0.5, colour="red")  # type: ignore[call-arg]
