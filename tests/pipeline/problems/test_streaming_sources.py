"""The streamed selection equals `load_records`: every source kind, bad rows, duplicates,
filters, seeded shuffle + skip + limit; then the same through Ray Data's read path
(`pipeline.run.stream`, a real local Ray) and the resume filter against a real Parquet sink.

No fakes: real files, the bundled MATH500/GSM8K data, a local folder loaded by
`datasets.load_dataset`, a real Ray cluster.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.problems.sources import (
    AnySource,
    ArithmeticSource,
    BundledSource,
    HFSource,
    JsonlSource,
    ParquetSource,
    SourceConfigError,
    check_source,
    is_error,
    iter_records,
    load_records,
)
from pipeline.records import NO_YIELD, error_row
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

COLUMNS = {"problem": "q", "reference": "a", "id": "uid"}


def _jsonl(path: Path) -> Path:
    """12 rows: bad JSON, a non-object, a missing problem, ids duplicated (near and far),
    a blank line, a reference of the wrong type, and a `level` column to filter on."""
    rows: list[str] = []
    for i in range(12):
        rows.append(
            json.dumps(
                {"q": f"What is {i} + {i}?", "a": str(2 * i), "uid": f"u{i % 9}"} | {"level": i % 3}
            )
        )
    rows[2] = '{"q": "unterminated'
    rows[5] = json.dumps(["a", "list"])
    rows[7] = json.dumps({"a": "1", "uid": "nq", "level": 1})
    rows[9] = json.dumps({"q": "bad ref", "a": [1], "uid": "br", "level": 0})
    rows.insert(4, "")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _slices() -> Iterator[dict[str, Any]]:
    for seed, skip, limit in itertools.product((None, 0, 3), (0, 2, 11, 20), (None, 0, 1, 4)):
        yield {"shuffle_seed": seed, "skip": skip, "limit": limit}


def _configs(tmp_path: Path) -> list[AnySource]:
    jsonl = _jsonl(tmp_path / "p.jsonl")
    table = pa.Table.from_pylist(
        [
            {
                "question": f"Add {i % 5} and {i % 5}.",
                "final": None if i == 3 else str(i),
                "d": i % 2,
            }
            for i in range(9)
        ]
        + [{"question": None, "final": "0", "d": 1}]
    )
    parquet = tmp_path / "p.parquet"
    pq.write_table(table, parquet, row_group_size=4)
    folder = tmp_path / "hf"
    (folder / "data").mkdir(parents=True)
    pq.write_table(table.slice(0, 6), folder / "data" / "train-00000.parquet")
    pq.write_table(table.slice(6), folder / "data" / "train-00001.parquet")
    configs: list[AnySource] = []
    for extra in _slices():
        configs.append(JsonlSource(path=jsonl, columns=COLUMNS, **extra))
        configs.append(
            ParquetSource(
                path=parquet, columns={"problem": "question", "reference": "final"}, **extra
            )
        )
    configs += [
        JsonlSource(path=jsonl, columns=COLUMNS, filters={"level": [0, 2]}),
        JsonlSource(
            path=jsonl, columns=COLUMNS, filters={"level": 1}, shuffle_seed=5, skip=1, limit=2
        ),
        JsonlSource(path=jsonl, columns={"problem": "q"}, shuffle_seed=7),  # hash ids
        ParquetSource(
            path=parquet, columns={"problem": "question"}, filters={"d": 0}, shuffle_seed=1
        ),
        HFSource(
            name=str(folder),
            cache_dir=tmp_path / "cache",
            columns={"problem": "question", "reference": "final"},
        ),
        HFSource(
            name=str(folder),
            cache_dir=tmp_path / "cache",
            columns={"problem": "question"},
            shuffle_seed=2,
            skip=1,
            limit=5,
        ),
        ArithmeticSource(count=30, seed=4, shuffle_seed=9, skip=5, limit=10),
        ArithmeticSource(count=30, seed=4, filters={"steps": 1}),
        BundledSource(dataset="math500", filters={"level": 5}, shuffle_seed=3, skip=10, limit=20),
        BundledSource(dataset="math500", limit=7),
        BundledSource(dataset="gsm8k", split="test", shuffle_seed=0, skip=100, limit=15),
    ]
    return configs


def test_streamed_records_equal_load_records_for_every_source_kind(tmp_path: Path) -> None:
    configs = _configs(tmp_path)
    kinds_with_errors = set()
    for cfg in configs:
        expected = load_records(cfg)
        assert list(iter_records(cfg)) == expected, cfg
        assert check_source(cfg) == len(expected), cfg
        if any(is_error(r) for r in expected):
            kinds_with_errors.add(cfg.kind)
    assert {"jsonl", "parquet", "hf"} <= kinds_with_errors  # the bad rows were really exercised
    dupes = [r for r in load_records(configs[0]) if "duplicate problem_id" in r.get("message", "")]
    assert dupes, "the fixture has duplicate ids"


def test_a_shuffled_slice_marks_a_duplicate_whose_first_row_is_outside_the_slice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"uid": "same", "q": f"text {i}"}) + "\n" for i in range(6)))
    for seed, skip in itertools.product(range(6), range(6)):
        cfg = JsonlSource(
            path=path, columns={"problem": "q", "id": "uid"}, shuffle_seed=seed, skip=skip, limit=1
        )
        assert list(iter_records(cfg)) == load_records(cfg)


def test_check_source_raises_what_load_records_raises(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    # the reference column appears only in the last row: still a known column
    path.write_text(
        json.dumps({"question": "q"}) + "\n" + json.dumps({"question": "r", "ans": "1"}) + "\n"
    )
    assert (
        check_source(JsonlSource(path=path, columns={"problem": "question", "reference": "ans"}))
        == 2
    )
    bad: list[AnySource] = [
        JsonlSource(path=tmp_path / "nope.jsonl"),
        ParquetSource(path=tmp_path / "nope.parquet"),
        JsonlSource(path=path),
        JsonlSource(path=path, columns={"problem": "question", "reference": "answer"}),
        JsonlSource(path=path, columns={"problem": "question"}, filters={"levl": 1}),
        BundledSource(dataset="math500", filters={"levl": 5}),
        HFSource(name=str(tmp_path / "no-such-dataset"), cache_dir=tmp_path / "c"),
    ]
    for cfg in bad:
        with pytest.raises(SourceConfigError) as expected:
            load_records(cfg)
        with pytest.raises(SourceConfigError) as got:
            check_source(cfg)
        assert str(got.value) == str(expected.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert check_source(JsonlSource(path=empty)) == 0
    assert check_source(JsonlSource(path=path, columns={"problem": "question"}, skip=5)) == 0


# --------------------------------------------------------------------------- through Ray


def test_ray_read_path_and_resume_filter(ray_cluster: None, tmp_path: Path) -> None:
    from pipeline.run.stream import problem_stream, read_records

    configs = _configs(tmp_path)
    picked = [configs[0], configs[5], configs[1], configs[-5], configs[-1], configs[-7]]
    for cfg in picked:
        rows = read_records(cfg).take_all()
        # the stream carries what the search needs: id, problem, reference or error message
        assert [_as_streamed(r) for r in rows] == [_as_streamed(r) for r in load_records(cfg)]

    # The resume filter: a run that committed one tree and one source error already.
    cfg = JsonlSource(path=tmp_path / "p.jsonl", columns=COLUMNS)
    records = load_records(cfg)
    problems = [r for r in records if not is_error(r)]
    errors = [r for r in records if is_error(r)]
    sink = ParquetSink(RunFolder.open(tmp_path / "out", "r"))
    sink.write_batch(
        {"errors": [dict(error_row(errors[0]["problem_id"], "source", "x", run_id="r"))]}
    )
    # a failed search is not done: the problem is searched again
    sink.write_batch(
        {"errors": [dict(error_row(problems[1]["problem_id"], "search", "x", run_id="r"))]}
    )
    _commit_tree(sink, problems[0]["problem_id"])

    stream = problem_stream(cfg, str(tmp_path / "out"), "r")
    blocks = list(stream.iter_internal_ref_bundles())
    sizes = [bundle.num_rows() for bundle in blocks]
    assert sizes and all(n == 1 for n in sizes), sizes  # one row per block: one per search call
    rows = stream.take_all()
    tallies = [r for r in rows if r["kind"] == "tally"]
    searched = [r["problem_id"] for r in rows if r["kind"] == "problem"]
    assert searched == [p["problem_id"] for p in problems[1:]]
    assert sum(t["skipped"] for t in tallies) == 2
    written = [e for t in tallies if t["records"] for e in json.loads(t["records"])["errors"]]
    assert [e["problem_id"] for e in written] == [e["problem_id"] for e in errors[1:]]
    assert all(e["stage"] == "source" and e["run_id"] == "r" for e in written)


def _as_streamed(row: Any) -> tuple[Any, ...]:
    """A source record or a streamed source row, as the stream carries it."""
    if "message" in row or row.get("error") is not None:
        return (row["problem_id"], None, None, row.get("message", row.get("error")))
    return (row["problem_id"], row["problem"], row["reference"], None)


def _commit_tree(sink: ParquetSink, problem_id: str) -> None:
    """Commit a minimal `trees` row for `problem_id` (resume reads only its problem_id)."""
    tree = {
        "run_id": sink.folder.run_id,
        "problem_id": problem_id,
        "label_source": "reference",
        "policy_output_tokens": 1,
        "policy_input_tokens": 0,
        "inserted_prompt_tokens": 0,
        "prm_input_tokens": 0,
        "prm_output_tokens": 0,
        "c_used": 1.0,
        "n_nodes": 1,
        "n_answered": 0,
        "n_correct": 0,
        "max_depth": 1,
        "max_width": 1,
        "wall_time_s": 0.1,
        "stop_reason": "early_stop",
        "iterations": 1,
        "grade_timeouts": 0,
        "method": "bg_mcts",
        "budget": 100.0,
        "seed": 0,
        "difficulty": "unanswered",
        "gate_drops": [],
        "split": "train",
        **NO_YIELD,
        "node_scores": [],
        "trace": [],
    }
    sink.write_batch({"trees": [tree]})
