"""Hostile source rows (built to crash a parser): each is one error row, never a failed read.

A JSONL line of 100,000 nested arrays (json raises RecursionError), a line whose id is a
5,000-digit integer (Python's int-to-str limit raises ValueError), nesting that parses
but is past the bound, a lone surrogate (no Parquet file can hold it), an id past the
id bound, and a Parquet row that pyarrow cannot convert.  Real files through the real
reading code: `load_records`, the streamed `iter_records` / `check_source` that the Ray
read task runs, and a whole run (`jobs.synthesize` on the session's local Ray with the sleep
engine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from pipeline.problems.sources import (
    MAX_DEPTH,
    MAX_ID_CHARS,
    MAX_NUMBER_DIGITS,
    JsonlSource,
    ParquetSource,
    check_source,
    is_error,
    iter_records,
    load_records,
)
from pipeline.store.run_folder import RunFolder
from tests.tiny_run import COLUMNS, run_config

GOOD = [{"id": f"good{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)]


def _hostile_jsonl(path: Path) -> tuple[Path, dict[str, str]]:
    """Good rows around the hostile lines; returns the file and {locator: what its
    message must say}."""
    lines = [
        json.dumps(GOOD[0]),
        '{"id": "deep", "question": "q", "answer": "1", "x": '
        + "[" * 100_000
        + "]" * 100_000
        + "}",
        '{"id": ' + "7" * 5_000 + ', "question": "q", "answer": "1"}',
        json.dumps(GOOD[1]),
        '{"id": "nest", "question": "q", "answer": "1", "x": ' + "[" * 200 + "]" * 200 + "}",
        '{"id": "sur", "question": "bad \\ud800 text", "answer": "1"}',
        json.dumps({"id": "i" * 5_000, "question": "q", "answer": "1"}),
        json.dumps(GOOD[2]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    name = path.name
    expected = {
        f"{name}:line 2": f"nested deeper than {MAX_DEPTH} levels",
        f"{name}:line 3": f"column 'id' holds an integer of 5,000 digits "
        f"(at most {MAX_NUMBER_DIGITS} per number)",
        f"{name}:line 5": f"nested deeper than {MAX_DEPTH} levels",
        f"{name}:line 6": "problem column 'question' is not valid Unicode",
        f"{name}:line 7": f"id column 'id' is 5,000 characters long (at most {MAX_ID_CHARS})",
    }
    return path, expected


def test_each_hostile_jsonl_line_is_one_error_row_naming_the_line_and_bound(
    tmp_path: Path,
) -> None:
    path, expected = _hostile_jsonl(tmp_path / "hostile.jsonl")
    cfg = JsonlSource(path=path, columns=COLUMNS)
    records = load_records(cfg)
    assert list(iter_records(cfg)) == records  # what the Ray read task streams
    assert check_source(cfg) == len(records) == 8
    problems = [r["problem_id"] for r in records if not is_error(r)]
    assert problems == ["good0", "good1", "good2"]
    errors = {r["problem_id"]: r["message"] for r in records if is_error(r)}
    assert set(errors) == set(expected)
    for locator, says in expected.items():
        assert errors[locator].startswith(f"{locator}: ") and says in errors[locator]
        assert "\n" not in errors[locator] and len(errors[locator]) < 300


def test_hostile_lines_in_a_shuffled_slice(tmp_path: Path) -> None:
    """The three passes of a shuffled stream read the hostile lines three times."""
    path, _ = _hostile_jsonl(tmp_path / "hostile.jsonl")
    cfg = JsonlSource(path=path, columns=COLUMNS, shuffle_seed=3, skip=1, limit=6)
    records = load_records(cfg)
    assert list(iter_records(cfg)) == records and len(records) == 6


def test_parquet_rows_past_the_bounds_are_error_rows(tmp_path: Path) -> None:
    """A string id past the bound, and a timestamp pyarrow cannot turn into a datetime
    (past year 9999): only those rows fail, the rest of their batch loads."""
    when = pa.array([0, 0, 2**62, 0], type=pa.timestamp("us"))
    table = pa.table(
        {
            "id": ["a", "x" * 1_000, "c", "d"],
            "question": ["What is 1 + 1?", "q", "q", "What is 2 + 2?"],
            "answer": ["2", "1", "1", "4"],
            "when": when,
        }
    )
    path = tmp_path / "p.parquet"
    pq.write_table(table, path)
    cfg = ParquetSource(path=path, columns=COLUMNS)
    records = load_records(cfg)
    assert list(iter_records(cfg)) == records
    assert [r["problem_id"] for r in records if not is_error(r)] == ["a", "d"]
    errors = {r["problem_id"]: r["message"] for r in records if is_error(r)}
    assert set(errors) == {"p.parquet:row 1", "p.parquet:row 2"}
    assert f"is 1,000 characters long (at most {MAX_ID_CHARS})" in errors["p.parquet:row 1"]
    assert errors["p.parquet:row 2"].startswith("p.parquet:row 2: cannot convert the row")


# A problem that cannot fit the policy's context (CONTEXT tokens), beside the hostile
# lines: it fails in the search, not in the source, and a rerun tries it again.
CONTEXT = 300
HUGE = {"id": "huge", "question": "word " * 2000, "answer": "2"}


@pytest.mark.e2e
def test_a_run_over_hostile_lines_writes_one_error_row_each_and_searches_the_rest(
    ray_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real job (its command, `jobs.synthesize`'s `main`, in this process on the
    session's cluster), run twice: exit 1 each time, one errors row per bad line (keyed by
    its line) written once, every good row searched once and in trees; the problem past
    the policy's context an errors row of the search each time (a rerun retries it)."""
    from jobs.synthesize import main as synthesize_main

    problems, expected = _hostile_jsonl(tmp_path / "hostile.jsonl")
    with problems.open("a") as lines:
        lines.write(json.dumps(HUGE) + "\n")
    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "context_length": CONTEXT,
        "decode_base_ms": 1.25,
        "decode_per_seq_ms": 0,
    }
    config = run_config(
        problems, tmp_path / "out", budget=32, engine=engine, run_id="hostile", ray_num_cpus=2
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    for _ in range(2):  # the rerun tries the failed search again, and only it
        code = synthesize_main(["--config", str(path)])
        assert code == 1, capsys.readouterr().err[-3000:]
    folder = RunFolder.open(tmp_path / "out", "hostile")
    trees = folder.read("trees").column("problem_id").to_pylist()
    assert sorted(trees) == ["good0", "good1", "good2"]
    errors = folder.read("errors").to_pylist()
    source = [e for e in errors if e["stage"] == "source"]
    assert sorted(e["problem_id"] for e in source) == sorted(expected)
    for e in source:
        assert expected[e["problem_id"]] in e["message"]
    searched = [e for e in errors if e["stage"] != "source"]
    assert [e["problem_id"] for e in searched] == ["huge", "huge"]
    assert f"the policy's context is {CONTEXT}" in searched[0]["message"]
