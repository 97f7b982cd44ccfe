"""The Parquet sink: real files, crash leftovers cleaned, resume never duplicates rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.records import error_row
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink


def _error(problem_id: str, stage: str = "search") -> dict[str, object]:
    return dict(error_row(problem_id, stage, "boom", run_id="r1"))


def test_committed_batches_are_read_back_and_counted_done(tmp_path: Path) -> None:
    sink = ParquetSink(RunFolder.open(tmp_path, "r1"))
    sink.write_batch({"errors": [_error("a", "source"), _error("b", "source")]})
    sink.write_batch({"errors": [_error("c")]})
    assert sink.folder.read("errors").num_rows == 3
    # A bad source row is final; a failed search is retried by the next run.
    assert sink.folder.done_problem_ids() == {"a", "b"}
    assert RunFolder.open(tmp_path, "r1").done_problem_ids() == {"a", "b"}
    assert sink.folder.read("nodes").num_rows == 0


def test_uncommitted_parts_from_a_crash_are_removed_on_reopen(tmp_path: Path) -> None:
    sink = ParquetSink(RunFolder.open(tmp_path, "r1"))
    sink.write_batch({"errors": [_error("a")]})
    # a crash after a part was renamed into place but before its batch was committed
    orphan = sink.run_dir / "errors" / "part-deadbeef.parquet"
    orphan.write_bytes((sink.folder.parts("errors")[0]).read_bytes())
    (sink.run_dir / "nodes" / "part-cafe.tmp").write_bytes(b"half")
    reopened = ParquetSink(RunFolder.open(tmp_path, "r1"))
    assert reopened.removed_uncommitted == 2
    assert reopened.folder.read("errors").num_rows == 1


def test_bad_rows_and_names_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run_id must be a plain folder name"):
        ParquetSink(RunFolder.open(tmp_path, "../x"))
    sink = ParquetSink(RunFolder.open(tmp_path, "r1"))
    with pytest.raises(ValueError, match="unknown record types"):
        sink.write_batch({"bogus": []})
    with pytest.raises(ValueError, match="message"):
        sink.write_batch({"errors": [{**_error("a"), "message": 3}]})
    assert sink.folder.done_problem_ids() == set()
