"""Fenced writers: a lease holder that stalls past its TTL and is overtaken neither
commits again nor doubles a problem.

Everything runs on a real S3 HTTP API (moto's server mode, tests/s3_server.py) or a real
local folder.  The stall is simulated deterministically rather than with SIGSTOP: the
stalled holder ("A") is this test process holding a real `ObjectLease` with a 1 s TTL
whose renewal thread is stopped (all a SIGSTOP does to a holder, as far as the bucket
can tell), and the test waits until that lease has expired.  A's rows are real records:
SmolLM2 trees from tests/fixtures replayed through `records_for`.  The holder overtaken by
a whole job on a bucket is the fenced-writers scenario (tests/scenarios.py); the tests of
the commit and of the readers stay in the landing gate.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.exits import BAD_INPUT, OK, guarded
from pipeline.problems.sources import JsonlSource, load_problems
from pipeline.records import RECORD_TYPES, SCHEMAS, RecordsConfig, error_row, records_for, to_table
from pipeline.records.rebuild import rebuild_result
from pipeline.records.spec import RecordsSpec
from pipeline.run.nightly import run_spent
from pipeline.run.summary import summarize_run_dir
from pipeline.store.lease import FlockLease, LeaseLost
from pipeline.store.object_lease import ObjectLease
from pipeline.store.resume import Done, pending
from pipeline.store.run_folder import MARKERS, Batch, RunFolder, local_run_dir
from pipeline.store.sink import ParquetSink, commit_batch
from search.answers import AnswerExtraction
from tests.deadlines import JOB_DEADLINE_S
from tests.hub_server import HubServer
from tests.s3_server import S3Server
from tests.tiny_run import COLUMNS, run_config, start_synthesize_job

BUCKET = "bgmcts-fenced"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "smollm2_trees.jsonl"
PROBLEMS = [f"p{i}" for i in range(8)]


def _records(problem_id: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every record type's rows of one real SmolLM2 tree, as `problem_id`."""
    entries = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    entry = entries[int(problem_id.removeprefix("p")) % len(entries)]
    result = rebuild_result(entry["nodes"], entry["tree"])
    return asyncio.run(
        records_for(
            result,
            entry["tree"]["reference"],
            RecordsSpec(
                problem_id=problem_id,
                run_id=run_id,
                config=RecordsConfig(),
                extraction=AnswerExtraction.LAST_NUMBER,
            ),
        )
    )


def _tables(records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {kind: to_table(rows, SCHEMAS[kind]) for kind, rows in records.items()}


def _rows_by_problem(folder: RunFolder) -> dict[str, Counter[str]]:
    """What readers count: rows per problem id, for every record type."""
    return {
        kind: Counter(folder.read(kind).column("problem_id").to_pylist()) for kind in RECORD_TYPES
    }


def _stall(lease: ObjectLease) -> None:
    """A's process stalls: its lease is no longer renewed; wait until it has expired."""
    lease._stop.set()  # the renewal thread ends, as it would under SIGSTOP
    assert lease._thread is not None
    lease._thread.join(timeout=10)
    while time.time() <= float(lease._holder["expires_at"]):
        time.sleep(0.1)


def _source_and_config(tmp_path: Path, root: str, run_id: str) -> tuple[Path, Path]:
    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": p, "question": f"What is {i} + {42 - i}?", "answer": "42"}
        for i, p in enumerate(PROBLEMS)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    slow = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 6.25,
        "decode_per_seq_ms": 0,
    }
    config = run_config(
        problems, Path("unused"), budget=64, engine=slow, run_id=run_id, ray_num_cpus=2
    )
    config["output_root"] = root
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return problems, path


@pytest.mark.e2e
@pytest.mark.scenario("fenced-writers")
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_a_stalled_holder_overtaken_on_a_bucket_stops_and_every_problem_counts_once(
    s3: S3Server,
    hub: HubServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's scenario: A commits a tree and stalls; B (`python -m jobs.synthesize`)
    takes the expired lease over and finishes; A wakes up and tries to commit.  A stops
    with one line and exit 2, committing nothing; a batch of A that slipped in (A passed
    its check, then stalled before its marker) is not counted; resume, report, publish
    and `run_spent` each count every problem once."""
    from jobs.cli import main as bgmcts

    root, run_id = f"s3://{BUCKET}/synth", "stalled"
    problems, config_path = _source_and_config(tmp_path, root, run_id)

    # A: holds the lease (generation 1), commits its first tree, then stalls.
    a_folder = RunFolder.open(root, run_id)
    a_lease = ObjectLease(a_folder.store, ttl_s=1.0).acquire()
    a_sink = ParquetSink(a_folder, a_lease)
    a_sink.write_batch(_records("p0", run_id))
    _stall(a_lease)

    # B: the real job takes the expired lease over (generation 2) and finishes the run.
    job = start_synthesize_job(config_path, stderr=subprocess.PIPE)
    _, err = job.communicate(timeout=JOB_DEADLINE_S)
    assert job.returncode == 0, err.decode()[-3000:]
    reader = RunFolder.open(root, run_id)
    after_b = _rows_by_problem(reader)
    assert after_b["trees"] == Counter(PROBLEMS)  # B skipped A's p0, searched the rest
    markers = len(reader.committed_batches())

    # A wakes up and tries to commit its next tree: one line, exit 2, nothing committed.
    code = guarded(lambda: a_sink.write_batch(_records("p1", run_id)) and OK, verbose=False)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == BAD_INPUT
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"error: run folder {root}/run={run_id}: this run's lease (generation 1) was taken "
        "over by pid "
    ), lines
    assert "(generation 2)" in lines[0]
    assert len(reader.committed_batches()) == markers
    with pytest.raises(LeaseLost):  # and it stays stopped
        a_sink.write_batch(_records("p2", run_id))
    a_lease.release()

    # The window the check cannot close: A passed its check for p3, then stalled before
    # its marker, which lands after B's run (generation 1, a problem B committed too).
    commit_batch(a_folder.store, _tables(_records("p3", run_id)), generation=1)
    assert len(reader.committed_batches()) == markers + 1
    fresh = RunFolder.open(root, run_id)
    assert _rows_by_problem(fresh) == after_b  # every table: no problem's rows twice

    # resume: every problem done, nothing pending
    assert Done.read(fresh).searched == frozenset(PROBLEMS)
    todo, errors = pending(load_problems(JsonlSource(path=problems, columns=COLUMNS)), fresh)
    assert (todo, errors) == ([], [])
    # run_spent (what the nightly spend cap counts): each tree's spend once
    config = yaml.safe_load(config_path.read_text())
    from pipeline.config import parse_run_config

    spent = sum(fresh.read("trees").column("c_used").to_pylist())
    assert run_spent(parse_run_config(config), run_id) == pytest.approx(spent)
    # report: the summary and report.json count each problem once
    summary = summarize_run_dir(f"{root}/run={run_id}")
    assert summary.searched == len(PROBLEMS)
    assert summary.rows == {kind: sum(c.values()) for kind, c in after_b.items()}
    assert bgmcts(["report", f"{root}/run={run_id}"]) == 0
    report = json.loads(fresh.store.read_text("report.json"))
    assert report["trees"] == len(PROBLEMS)
    # publish: the dataset holds each problem's rows once
    monkeypatch.setenv("HF_TOKEN", "hf_fenced_FAKE_token_0123456789")
    repo = "bgmcts/fenced"
    publish = ["publish", "--run-dir", f"{root}/run={run_id}", "--repo", repo]
    assert bgmcts([*publish, "--endpoint", hub.endpoint]) == 0
    published = hub.files(repo)
    for kind in ("trees", "nodes", "sft", "tree_nodes"):
        files = [b for p, b in published.items() if p.startswith(f"data/{kind}/run={run_id}/")]
        ids = [
            pid
            for data in files
            for pid in pq.read_table(io.BytesIO(data)).column("problem_id").to_pylist()
        ]
        assert Counter(ids) == after_b[kind], kind


def test_an_overtaken_holder_stops_at_its_next_commit_without_committing(
    s3: S3Server,
) -> None:
    """Without a cluster: A stalls past its TTL, B takes over; A's next commit raises
    `LeaseLost` (an `InputError`: exit 2) before its marker, so nothing of it counts."""
    root = f"s3://{BUCKET}/quick"
    a_lease = ObjectLease(RunFolder.open(root, "r").store, ttl_s=1.0).acquire()
    a_sink = ParquetSink(RunFolder.open(root, "r"), a_lease)
    a_sink.write_batch({"errors": [dict(error_row("a", "source", "bad", run_id="r"))]})
    _stall(a_lease)
    with RunFolder.open(root, "r").lease() as b_lease:
        assert b_lease.generation == 2
        b_sink = ParquetSink(RunFolder.open(root, "r"), b_lease)
        b_sink.write_batch(_records("p1", "r"))
        with pytest.raises(
            LeaseLost, match=r"generation 1\) was taken over by pid .* \(generation 2\)"
        ):
            a_sink.write_batch(_records("p1", "r"))
    reader = RunFolder.open(root, "r")
    assert len(reader.committed_batches()) == 2
    assert reader.read("trees").column("problem_id").to_pylist() == ["p1"]
    assert {b.generation for b in reader.batches().values()} == {1, 2}
    a_lease.release()  # a lost lease writes nothing: B's generation stays the only one
    assert reader.store.names("_lease") == ["00000002.json"]


def _write(folder: RunFolder, records: dict[str, list[dict[str, Any]]], generation: int) -> str:
    return commit_batch(folder.store, _tables(records), generation=generation)


def _source_errors(keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {"errors": [dict(error_row(k, "source", "bad row", run_id="r")) for k in keys]}


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_readers_count_each_problem_from_one_generation(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The rule itself, on a local folder and on a bucket: for a problem, only the rows of
    the newest generation that finished it count, whatever order the batches came in; a
    problem never finished keeps every failed attempt's error row; a marker whose parts
    were cleaned away counts for nothing.  Publishing's files and a bucket's local copy
    hold the same rows."""
    if where == "bucket":
        request.getfixturevalue("s3")
        root: str | Path = f"s3://{BUCKET}/rule"
    else:
        root = tmp_path / "out"
    folder = RunFolder.open(root, "r")
    ParquetSink(folder)  # creates the layout
    # generation 2 (the newer holder) commits first ...
    _write(folder, _records("p1", "r"), 2)
    _write(folder, _source_errors(["line 3", "line 9"]), 2)
    _write(folder, {"errors": [dict(error_row("p2", "search", "failed", run_id="r"))]}, 1)
    _write(folder, {"errors": [dict(error_row("p2", "search", "again", run_id="r"))]}, 2)
    # ... then the stale holder's late batches (generation 1) arrive
    _write(folder, _records("p1", "r"), 1)  # a problem both searched
    _write(folder, _records("p0", "r"), 1)  # only it did: counts
    _write(folder, _source_errors(["line 9", "line 12"]), 1)  # overlaps in one key
    # a late marker whose parts the next holder's sink had already cleaned away
    stale = _write(folder, _records("p3", "r"), 1)
    for kind in ("trees", "nodes"):
        folder.store.delete(kind, f"part-{stale}.parquet")

    reader = RunFolder.open(root, "r")
    counted = _rows_by_problem(reader)
    assert counted["trees"] == Counter(["p0", "p1"])
    one_tree = len(_records("p1", "r")["nodes"])
    assert counted["nodes"]["p1"] == one_tree and "p3" not in counted["nodes"]
    errors = Counter(
        zip(
            *(reader.read("errors").column(c).to_pylist() for c in ("problem_id", "message")),
            strict=True,
        )
    )
    assert errors == Counter(
        {
            ("line 3", "bad row"): 1,
            ("line 9", "bad row"): 1,
            ("line 12", "bad row"): 1,
            ("p2", "failed"): 1,
            ("p2", "again"): 1,
        }
    )
    assert reader.count("errors") == 5 and reader.count("nodes") == sum(counted["nodes"].values())
    assert reader.done_problem_ids() == {"p0", "p1", "line 3", "line 9", "line 12"}
    # a bucket's local copy (what report and publish read) counts the same rows, and the
    # files publishing uploads hold exactly them (the overlapping tally part filtered)
    with local_run_dir(f"{root}/run=r") as local:
        copy = RunFolder.at(local)
        assert _rows_by_problem(copy) == counted
        files = copy.counted_files("errors", tmp_path / "counted")
        assert sum(pq.read_metadata(f).num_rows for f in files) == 5
        assert any(f.is_relative_to(tmp_path / "counted") for f in files)


def test_local_markers_carry_growing_generations_and_old_folders_still_read(
    tmp_path: Path,
) -> None:
    """flock cannot be taken over, but its generation still grows per holder (kept in the
    lock file) and every marker carries it.  A folder with the empty markers of before
    reads as it always did (generation 0), its first new holder is generation 1, and a
    problem an old attempt failed and a new holder finished counts once, as searched."""
    run_dir = tmp_path / "out" / "run=r"
    old = ParquetSink(RunFolder.open(tmp_path / "out", "r"))
    old.write_batch(_source_errors(["line 3"]))
    old.write_batch({"errors": [dict(error_row("p1", "search", "failed", run_id="r"))]})
    for marker in (run_dir / MARKERS).iterdir():
        marker.write_bytes(b"")  # the markers as the code before fencing wrote them
    (run_dir / "_lease").write_bytes(b"")  # and its lock file
    legacy = RunFolder.open(tmp_path / "out", "r")
    assert set(legacy.batches().values()) == {Batch()}
    assert legacy.count("errors") == 2 and legacy.done_problem_ids() == {"line 3"}
    for expected in (1, 2):
        with FlockLease(run_dir) as lease:
            assert lease.generation == expected
            sink = ParquetSink(RunFolder.open(tmp_path / "out", "r"), lease)
            sink.write_batch(_source_errors([f"line {10 + expected}"]))
    with FlockLease(run_dir) as lease:
        ParquetSink(RunFolder.open(tmp_path / "out", "r"), lease).write_batch(_records("p1", "r"))
    reader = RunFolder.open(tmp_path / "out", "r")
    assert sorted(b.generation for b in reader.batches().values()) == [0, 0, 1, 2, 3]
    assert reader.final_error_keys() == {"line 3", "line 11", "line 12"}
    assert reader.count("errors") == 3  # p1's failed attempt gave way to its tree
    assert reader.read("trees").column("problem_id").to_pylist() == ["p1"]
