"""Compaction (`pipeline.store.compaction`): every reader counts the same rows before and
after, a crash at any step leaves the old layout or the new one, and a rerun finishes it.

The rows are real records: SmolLM2 trees from tests/fixtures replayed through
`records_for` (as a run writes them), committed by the real `ParquetSink` /
`commit_batch` on a local folder and on a real S3 HTTP API (moto's server,
tests/s3_server.py).  The folder holds what makes the counting rule per problem: two
holders that committed the same problem (the newer generation counts), a problem whose
failed attempts' error rows and finishing tree are of one generation, a problem never
finished (every attempt's error row counts) and source errors.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from jobs import cli
from jobs.exits import BAD_INPUT, OK
from pipeline.records import RECORD_TYPES, SCHEMAS, RecordsConfig, error_row, records_for, to_table
from pipeline.records.rebuild import rebuild_result
from pipeline.records.spec import RecordsSpec
from pipeline.report.hygiene import hygiene_of_run
from pipeline.store.compacted import COMPACTED, is_shard
from pipeline.store.compaction import Limits, compact_run, count_files
from pipeline.store.filesystem import Store
from pipeline.store.run_folder import MARKERS, RunFolder, local_run_dir
from pipeline.store.sink import ParquetSink, commit_batch
from search.answers import AnswerExtraction

BUCKET = "bgmcts-compaction"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"


class Crash(BaseException):
    """A kill mid-compaction: nothing of the compactor's own cleanup runs after it."""


@functools.cache
def _tree_records(index: int) -> dict[str, list[dict[str, Any]]]:
    entries = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    entry = entries[index % len(entries)]
    return asyncio.run(
        records_for(
            rebuild_result(entry["nodes"], entry["tree"]),
            entry["tree"]["reference"],
            RecordsSpec(
                problem_id="x",
                run_id="r",
                config=RecordsConfig(),
                extraction=AnswerExtraction.LAST_NUMBER,
            ),
        )
    )


def _records(problem_id: str, tree: int) -> dict[str, list[dict[str, Any]]]:
    """Every record type's rows of one real tree, as `problem_id`."""
    return {
        kind: [dict(row, problem_id=problem_id) for row in rows]
        for kind, rows in _tree_records(tree).items()
    }


def _failed(problem_id: str, message: str) -> dict[str, list[dict[str, Any]]]:
    return {"errors": [dict(error_row(problem_id, "search", message, run_id="r"))]}


def _source_errors(*keys: str) -> dict[str, list[dict[str, Any]]]:
    return {"errors": [dict(error_row(k, "source", "bad row", run_id="r")) for k in keys]}


def _write(folder: RunFolder, records: dict[str, list[dict[str, Any]]], generation: int) -> str:
    tables = {kind: to_table(rows, SCHEMAS[kind]) for kind, rows in records.items()}
    return commit_batch(folder.store, tables, generation=generation)


def _night(folder: RunFolder) -> None:
    """Batches of two holders, in the order a stalled holder's late commits arrive."""
    ParquetSink(folder)  # the layout
    for _ in range(2):  # the lease's generation counts the two holders
        with folder.lease():
            pass
    _write(folder, _records("p1", 0), 2)  # the newer holder finishes p1 ...
    _write(folder, _failed("p2", "engine down"), 1)  # p2: never finished, two attempts
    _write(folder, _failed("p2", "engine down again"), 2)
    _write(folder, _failed("p3", "timed out"), 2)  # p3: failed, then finished, generation 2
    _write(folder, _records("p3", 1), 2)
    _write(folder, _source_errors("line 3", "line 9"), 2)
    _write(folder, _records("p1", 2), 1)  # ... the stale holder's late p1: does not count
    _write(folder, _records("p0", 3), 1)  # only the stale holder did p0: counts
    _write(folder, _source_errors("line 9", "line 12"), 1)


def _rows(table: Any) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def _view(root: str | Path, tmp_path: Path) -> dict[str, Any]:
    """What every reader of the run sees, from a fresh `RunFolder`."""
    folder = RunFolder.open(root, "r")
    view: dict[str, Any] = {kind: _rows(folder.read(kind)) for kind in RECORD_TYPES}
    view["counts"] = folder.counts()
    view["done"] = sorted(folder.done_problem_ids())
    view["missing"] = folder.missing_parts()
    view["parts"] = {
        kind: _rows(pa.concat_tables([folder.read_part(p) for p in folder.parts(kind)]))
        if folder.parts(kind)
        else []
        for kind in RECORD_TYPES
    }
    with local_run_dir(f"{root}/run=r") as local:
        copy = RunFolder.at(local)
        view["copy"] = {kind: _rows(copy.read(kind)) for kind in RECORD_TYPES}
        into = tmp_path / f"counted-{len(list(tmp_path.iterdir()))}"
        view["published"] = {
            kind: sum(pq.read_metadata(f).num_rows for f in copy.counted_files(kind, into))
            for kind in RECORD_TYPES
        }
    return view


def _root(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> str | Path:
    if where == "bucket":
        request.getfixturevalue("s3")
        return f"s3://{BUCKET}/night"
    return tmp_path / "out"


def _raw_rows(folder: RunFolder) -> dict[str, int]:
    """Rows in every Parquet file of the folder, whether it counts or not."""
    store = folder.store
    return {
        kind: sum(
            pq.read_metadata(store.join(kind, n), filesystem=store.fs).num_rows
            for n in store.names(kind)
        )
        for kind in RECORD_TYPES
    }


# The bucket cases run against the moto server (tens of seconds on 2 cores): the
# integration tier's, so the fast tier stays fast.
ON_A_BUCKET = pytest.mark.integration


@pytest.mark.parametrize("where", ["local", pytest.param("bucket", marks=ON_A_BUCKET)])
def test_every_reader_counts_the_same_rows_after_compaction(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = _root(where, tmp_path, request)
    _night(RunFolder.open(root, "r"))
    before = _view(root, tmp_path)
    assert before["counts"]["trees"] == 3 and before["done"] == [
        "line 12",
        "line 3",
        "line 9",
        "p0",
        "p1",
        "p3",
    ]
    # p2's two attempts, p3's failed attempt of the generation that finished it, three
    # source errors
    assert before["counts"]["errors"] == 6

    result = compact_run(RunFolder.open(root, "r"))
    assert _view(root, tmp_path) == before
    assert result.replaced == 9 and result.rows == before["counts"]
    assert result.files_before > result.files_after == count_files(RunFolder.open(root, "r"))
    # the shards hold exactly the rows that count: the stale p1 is gone from the files
    folder = RunFolder.open(root, "r")
    assert _raw_rows(folder) == before["counts"]
    assert all(is_shard(b) for b in folder.committed_batches())
    # compacting again finds nothing to do and changes nothing
    again = compact_run(RunFolder.open(root, "r"))
    assert again.replaced == 0 and again.files_after == result.files_after
    assert _view(root, tmp_path) == before


def test_a_run_of_one_generation_reads_in_the_same_order_and_checks_clean(
    tmp_path: Path,
) -> None:
    """A run as a night writes it (one holder, one batch per tree): the compacted tables
    are the same tables, rows in the same order, and `bgmcts check`'s reading of them
    (`hygiene_of_run`) finds the same, no dirty row; a shard of a small limit rolls over."""
    folder = RunFolder.open(tmp_path / "out", "r")
    with folder.lease() as lease:
        sink = ParquetSink(folder, lease)
        for i in range(8):
            sink.write_batch(_records(f"p{i}", i))
    before = {kind: folder.read(kind) for kind in RECORD_TYPES}
    hygiene = hygiene_of_run(RunFolder.open(tmp_path / "out", "r"))
    assert hygiene.dirty_rows == 0
    result = compact_run(folder, limits=Limits(shard_rows=25, row_group_rows=10))
    after = RunFolder.open(tmp_path / "out", "r")
    for kind in RECORD_TYPES:
        assert after.read(kind).equals(before[kind]), kind
    assert max(pq.read_metadata(p).num_rows for p in after.parts("nodes")) <= 25
    assert len(after.parts("nodes")) > 1 and result.shards > len(RECORD_TYPES) - 1
    assert all(
        pq.read_metadata(p).row_group(i).num_rows <= 10
        for p in after.parts("nodes")
        for i in range(pq.read_metadata(p).num_row_groups)
    )
    checked = hygiene_of_run(after)
    assert checked.dirty_rows == 0 and checked.markdown() == hygiene.markdown()


def _crash_at(step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kill the compactor at `step`: after some shards (no record), right after its record,
    after deleting some replaced markers, after deleting some replaced parts."""
    write, create, delete = Store.write_bytes, Store.create_exclusive, Store.delete_many
    shards: list[str] = []

    def write_bytes(self: Store, data: bytes, *sub: str) -> None:
        write(self, data, *sub)
        if step == "shards" and sub[0] == MARKERS and is_shard(sub[-1]):
            shards.append(sub[-1])
            if len(shards) == 3:
                raise Crash

    def create_exclusive(self: Store, data: bytes, *sub: str) -> bool:
        made = create(self, data, *sub)
        if step == "record" and sub[0] == COMPACTED:
            raise Crash
        return made

    def delete_many(self: Store, paths: list[str]) -> None:
        markers = bool(paths) and all(f"/{MARKERS}/" in p for p in paths)
        if paths and step == ("markers" if markers else "parts"):
            delete(self, paths[: len(paths) // 2])
            raise Crash
        delete(self, paths)

    monkeypatch.setattr(Store, "write_bytes", write_bytes)
    monkeypatch.setattr(Store, "create_exclusive", create_exclusive)
    monkeypatch.setattr(Store, "delete_many", delete_many)


@pytest.mark.parametrize(
    ("where", "step"),
    [
        ("local", "shards"),
        ("local", "record"),
        ("local", "markers"),
        ("local", "parts"),
        pytest.param("bucket", "markers", marks=ON_A_BUCKET),
    ],
)
def test_a_crash_at_any_step_leaves_one_layout_and_a_rerun_finishes(
    where: str,
    step: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = _root(where, tmp_path, request)
    _night(RunFolder.open(root, "r"))
    before = _view(root, tmp_path)
    with monkeypatch.context() as patched:
        _crash_at(step, patched)
        with pytest.raises(Crash):
            compact_run(RunFolder.open(root, "r"))
    assert _view(root, tmp_path) == before
    folder = RunFolder.open(root, "r")
    switched = bool(folder.compactions())
    assert switched == (step != "shards")
    # a resumed run's sink opens on it without deleting a shard or a row that counts
    with folder.lease() as lease:
        ParquetSink(folder, lease)
    assert _view(root, tmp_path) == before

    compact_run(RunFolder.open(root, "r"))
    assert _view(root, tmp_path) == before
    done = RunFolder.open(root, "r")
    assert all(is_shard(b) for b in done.committed_batches())
    assert len(done.compactions()) == 1 and _raw_rows(done) == before["counts"]
    assert len(done.store.names(COMPACTED)) == 1


def test_a_run_resumed_after_compaction_then_compacted_again_counts_as_one_never_compacted(
    tmp_path: Path,
) -> None:
    """Twin folders get the same batches; one is compacted between the two runs and after.
    The resumed run finishes the problem the first never did (p2): its earlier attempts'
    error rows, now in a shard, stop counting, as they would have in the batches."""
    roots = (tmp_path / "compacted", tmp_path / "plain")
    for root in roots:
        _night(RunFolder.open(root, "r"))
    compact_run(RunFolder.open(roots[0], "r"))
    for root in roots:
        folder = RunFolder.open(root, "r")
        with folder.lease() as lease:  # the resumed run: a newer generation
            sink = ParquetSink(folder, lease)  # cleans nothing that counts
            sink.write_batch(_failed("p2", "engine down a third time"))
            sink.write_batch(_records("p2", 4))
            sink.write_batch(_records("p5", 5))
    resumed = _view(roots[1], tmp_path)
    assert {"p2", "p5"} <= set(resumed["done"]) and resumed["counts"]["trees"] == 5
    assert resumed["counts"]["errors"] == 5  # p2's attempts of before stop counting
    assert _view(roots[0], tmp_path) == resumed
    second = compact_run(RunFolder.open(roots[0], "r"))
    assert second.replaced > 3 and _view(roots[0], tmp_path) == resumed
    folder = RunFolder.open(roots[0], "r")
    assert len(folder.compactions()) == 1 and _raw_rows(folder) == resumed["counts"]
    compact_run(RunFolder.open(roots[1], "r"))
    assert _view(roots[1], tmp_path) == resumed


def test_a_folder_with_markers_from_before_fencing_compacts_to_the_same_rows(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "out" / "run=r"
    old = ParquetSink(RunFolder.open(tmp_path / "out", "r"))
    old.write_batch(_source_errors("line 3"))
    old.write_batch(_failed("p1", "failed"))
    old.write_batch(_records("p4", 0))
    for marker in (run_dir / MARKERS).iterdir():
        marker.write_bytes(b"")  # the markers as the code before fencing wrote them
    folder = RunFolder.open(tmp_path / "out", "r")
    _write(folder, _records("p1", 1), 1)  # a new holder finishes what the old one failed
    before = _view(tmp_path / "out", tmp_path)
    assert before["counts"]["errors"] == 1 and before["counts"]["trees"] == 2
    compact_run(folder)
    assert _view(tmp_path / "out", tmp_path) == before
    # and a later generation finishing p4 again still drops the old one's p4 rows
    _write(RunFolder.open(tmp_path / "out", "r"), _records("p4", 2), 3)
    assert RunFolder.open(tmp_path / "out", "r").count("trees") == 2


def test_a_damaged_batch_is_left_as_it_is_and_still_reported(tmp_path: Path) -> None:
    folder = RunFolder.open(tmp_path / "out", "r")
    _night(folder)
    stale = _write(folder, _records("p7", 0), 1)
    folder.store.delete("nodes", f"part-{stale}.parquet")
    before = _view(tmp_path / "out", tmp_path)
    assert before["missing"] == {"nodes": [f"part-{stale}.parquet"]}
    compact_run(RunFolder.open(tmp_path / "out", "r"))
    assert _view(tmp_path / "out", tmp_path) == before


def test_the_command_compacts_once_and_refuses_a_folder_in_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = RunFolder.open(tmp_path / "out", "r")
    _night(folder)
    run_dir = str(tmp_path / "out" / "run=r")
    assert cli.main(["compact", "--run-dir", run_dir]) == OK
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"compacted {run_dir}: 9 batches into ") and "files " in line
    assert cli.main(["compact", "--run-dir", run_dir]) == OK
    assert "nothing to compact" in capsys.readouterr().out
    with folder.lease():
        assert cli.main(["compact", "--run-dir", run_dir]) == BAD_INPUT
    assert "is in use by" in capsys.readouterr().err
    assert cli.main(["compact", "--run-dir", str(tmp_path / "nowhere" / "run=x")]) == BAD_INPUT


def test_markers_and_compaction_records_are_read_once_per_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `RunFolder` reads a commit marker or a compaction record once (neither changes
    once written), and later reads only the new ones: what the real store's `read_many`
    is asked for, recorded on its way through."""
    root = tmp_path / "out"
    written = RunFolder.open(root, "r")
    ParquetSink(written)
    for problem in ("p1", "p2", "p3"):
        _write(written, _failed(problem, "engine down"), 1)
    compact_run(RunFolder.open(root, "r"))
    folder = RunFolder.open(root, "r")
    asked: list[str] = []
    read_many = Store.read_many

    def recording(store: Store, paths: list[str]) -> dict[str, bytes]:
        asked.extend(paths)
        return read_many(store, paths)

    monkeypatch.setattr(Store, "read_many", recording)
    first = folder.batches()
    assert folder.compactions() and first
    read = len(asked)
    assert folder.batches() == first and len(asked) == read  # nothing read again
    _write(folder, _failed("p9", "late"), 1)
    later = folder.batches()
    assert set(first) < set(later)
    assert len(asked) == read + 1 and asked[-1].endswith(next(iter(set(later) - set(first))))
    assert len(asked) == len(set(asked))
    assert any(p.split("/")[-2] == COMPACTED for p in asked)
    assert any(p.split("/")[-2] == MARKERS for p in asked)
