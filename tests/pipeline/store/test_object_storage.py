"""Output on object storage: the sink, the lease, the nightly ledger and a whole run on a
real S3 HTTP API (moto's server mode on 127.0.0.1, started per module by
tests/s3_server.py), talked to through s3fs/botocore exactly as a cluster talks to S3.

The end-to-end test runs `python -m jobs.synthesize` as a subprocess on its own local Ray
cluster with the model-free load model, SIGKILLs the process group after the first
committed batch, reruns it, and checks every problem exactly once in the bucket; then
`bgmcts report` and `bgmcts publish` read the run from the bucket (the Hub is
tests/hub_server.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipeline.errors import OutputLocationError
from pipeline.records import error_row
from pipeline.run.night_ledger import LedgerError
from pipeline.run.nightly import Ledger, NightSlice
from pipeline.store.filesystem import check_reachable, open_store
from pipeline.store.lease import RunFolderBusy
from pipeline.store.object_lease import LEASE_FOLDER, ObjectLease
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from tests.deadlines import JOB_DEADLINE_S
from tests.hub_server import HubServer
from tests.s3_server import S3Server
from tests.tiny_run import REPO, run_config, start_synthesize_job

BUCKET = "bgmcts-runs"


def _error(problem_id: str, stage: str = "search") -> dict[str, object]:
    return dict(error_row(problem_id, stage, "boom", run_id="r1"))


def test_sink_on_a_bucket_commits_by_marker_and_cleans_orphans(s3: S3Server) -> None:
    root = f"s3://{BUCKET}/synth"
    sink = ParquetSink(RunFolder.open(root, "r1"))
    assert sink.run_dir == f"{root}/run=r1"
    sink.write_batch({"errors": [_error("a", "source"), _error("b")]})
    keys = s3.keys(BUCKET)
    assert [k for k in keys if "/errors/" in k] and [k for k in keys if "/_committed/" in k]
    assert not [k for k in keys if k.endswith(".tmp")]  # no rename dance on a bucket
    # A crash after a part's PUT but before its marker: a part no reader counts.
    part = next(k for k in keys if "/errors/" in k)
    s3.client().copy_object(
        Bucket=BUCKET,
        Key=part.replace(part.rsplit("/", 1)[1], "part-orphan.parquet"),
        CopySource={"Bucket": BUCKET, "Key": part},
    )
    reader = RunFolder.open(root, "r1")
    assert reader.read("errors").num_rows == 2  # the orphan is invisible to readers
    assert any("part-orphan" in k for k in s3.keys(BUCKET))  # and a reader never cleans
    assert reader.done_problem_ids() == {"a"}
    reopened = ParquetSink(RunFolder.open(root, "r1"))
    assert reopened.removed_uncommitted == 1
    assert not any("part-orphan" in k for k in s3.keys(BUCKET))
    assert reopened.folder.read("errors").num_rows == 2


def test_lease_on_a_bucket_admits_one_writer_and_takes_over_dead_ones(s3: S3Server) -> None:
    root = f"s3://{BUCKET}/synth"
    first = RunFolder.open(root, "r1").lease()
    assert isinstance(first, ObjectLease)
    with first, pytest.raises(RunFolderBusy, match="in use by pid"):
        RunFolder.open(root, "r1").lease().acquire()
    with RunFolder.open(root, "r1").lease():  # released: taken at once
        pass
    # A SIGKILLed holder on this host: its pid is gone, its lease is taken over at once.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    store = open_store(root).child("run=r1")
    stale = ObjectLease(store)
    gen = max(stale._generations()) + 1
    holder = {
        "host": os.uname().nodename,
        "pid": int(dead.stdout),
        "since": "x",
        "expires_at": time.time() + 3600,
        "released": False,
    }
    assert store.create_exclusive(json.dumps(holder).encode(), LEASE_FOLDER, f"{gen:08d}.json")
    with RunFolder.open(root, "r1").lease() as taken:
        assert taken.generation == gen + 1
    # A live holder on another machine blocks until its lease expires.
    gen += 2
    other = {**holder, "host": "another-pod", "pid": 1}
    assert store.create_exclusive(json.dumps(other).encode(), LEASE_FOLDER, f"{gen:08d}.json")
    with pytest.raises(RunFolderBusy, match="another-pod"):
        RunFolder.open(root, "r1").lease().acquire()
    expired = {**other, "expires_at": time.time() - 1}
    assert store.create_exclusive(json.dumps(expired).encode(), LEASE_FOLDER, f"{gen + 1:08d}.json")
    with RunFolder.open(root, "r1").lease():
        pass
    # Racing writers: exactly one of many concurrent acquirers gets the lease.
    won: list[ObjectLease] = []
    busy: list[Exception] = []

    def grab() -> None:
        lease = ObjectLease(store)
        try:
            won.append(lease.acquire())
        except RunFolderBusy as exc:
            busy.append(exc)

    threads = [threading.Thread(target=grab) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(busy) == 5
    won[0].release()


def test_nightly_ledger_on_a_bucket_never_hands_a_slice_out_twice(s3: S3Server) -> None:
    root = f"s3://{BUCKET}/nightly"
    ledger = Ledger(root)
    assert ledger.store.remote
    first = ledger.plan("2026-11-20", "n-2026-11-20", base_skip=3, per_night=5)
    assert (first.skip, first.limit) == (3, 5)
    # Eight nights race (threads, each with its own ledger object) for the next slices.
    slices: dict[str, tuple[int, int]] = {}

    def night(day: int) -> None:
        date = f"2026-12-{day:02d}"
        got = Ledger(root).plan(date, f"n-{date}", base_skip=3, per_night=5)
        slices[date] = (got.skip, got.limit)

    threads = [threading.Thread(target=night, args=(d,)) for d in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    starts = sorted(skip for skip, _ in slices.values())
    assert starts == [8 + 5 * i for i in range(8)]  # disjoint, contiguous, none lost
    again = Ledger(root).plan("2026-11-20", "n-2026-11-20", base_skip=3, per_night=5)
    assert again == first  # a rerun of a date keeps its slice
    # A top-up grows only the last night; an earlier night cannot overlap a later one.
    reread = Ledger(root)
    assert not reread.extend("2026-11-20", 7)
    last = max(slices, key=lambda d: slices[d][0])
    assert reread.extend(last, 7)
    reread.mark(last, "done", spent=12.0)
    final = {n["date"]: n for n in Ledger(root).nights}
    assert final[last]["limit"] == 7 and final[last]["status"] == "done"
    assert final["2026-11-20"]["status"] == "running"
    assert sorted(n["date"] for n in Ledger(root).unfinished("2026-12-31")) == sorted(
        d for d in final if d != last
    )


def test_nightly_ledger_on_a_bucket_is_checked_whole_and_ends_at_the_source(
    s3: S3Server,
) -> None:
    """The ledger's one reading on a bucket: a bad object is one line naming its URI and
    is left as it was; a night whose source ended inside its slice ends there; a running
    night whose run prefix holds nothing, claimed by nobody named, is failed."""
    root = f"s3://{BUCKET}/nightly"
    client = s3.client()
    ledger = Ledger(root)
    first = ledger.plan("2026-11-20", "n-2026-11-20", base_skip=0, per_night=5)
    assert ledger.end_at(first.date, 3) == NightSlice(first.date, first.run_id, 0, 3)
    assert Ledger(root).preview("2026-11-21", "n-2026-11-21", 0, 5).skip == 3
    # a night left running by hand: no host, no pid, nothing under run=n-2026-11-21/
    body = {"date": "2026-11-21", "run_id": "n-2026-11-21", "skip": 3, "limit": 5}
    key = "nightly/nightly-ledger/00000002.json"
    client.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(body | {"status": "running"}))
    ledger = Ledger(root)
    assert ledger.settle() == ["2026-11-21"]
    assert Ledger(root).find("2026-11-21")["status"] == "failed"  # type: ignore[index]

    bad = json.dumps(body | {"limit": "5"}).encode()
    client.put_object(Bucket=BUCKET, Key=key, Body=bad)
    with pytest.raises(LedgerError) as error:
        Ledger(root).plan("2026-11-22", "n-2026-11-22", base_skip=0, per_night=5)
    assert str(error.value).startswith(
        f"{root}/nightly-ledger/00000002.json: bad nightly ledger: limit"
    )
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == bad
    assert s3.keys(BUCKET, "nightly/nightly-ledger/") == [
        "nightly/nightly-ledger/00000001.json",
        key,
    ]


def test_missing_bucket_and_denied_credentials_are_one_line(s3: S3Server, tmp_path: Path) -> None:
    with pytest.raises(OutputLocationError, match=r"^output_root s3://no-such-bucket/x: bucket"):
        check_reachable(open_store("s3://no-such-bucket/x"))
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"id": "p1", "question": "1+1?", "answer": "2"}) + "\n")
    config = run_config(problems, Path("unused"), budget=40, engine=_LOAD_MODEL)
    config["output_root"] = "s3://no-such-bucket/x"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = _synthesize(path)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: output_root s3://no-such-bucket/x: bucket does not exist"
    with S3Server(auth=True) as denied:
        done = _synthesize(
            path,
            {**denied.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret"},
            output_root=f"s3://{BUCKET}/x",
        )
    assert done.returncode == 2
    assert "access denied" in done.stderr and "Traceback" not in done.stderr
    assert "wrong-secret" not in done.stderr
    assert s3.keys(BUCKET) == []  # nothing was written anywhere


_LOAD_MODEL = {
    "kind": "load_model",
    "output_tokens": 8,
    "decode_base_ms": 6.25,
    "decode_per_seq_ms": 0,
}


def _synthesize(
    config: Path, env: dict[str, str] | None = None, output_root: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "jobs.synthesize", "--config", str(config)]
    if output_root:
        command += ["--output-root", output_root]
    return subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
    )


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_run_on_a_bucket_killed_and_resumed_exactly_once_then_reported_and_published(
    s3: S3Server, hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.cli import main as bgmcts

    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {42 - i}?", "answer": "42"} for i in range(8)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    root = f"s3://{BUCKET}/synth"
    slow = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 18.75,
        "decode_per_seq_ms": 0,
    }
    config = run_config(
        problems, Path("unused"), budget=64, engine=slow, run_id="killed", ray_num_cpus=2
    )
    config["output_root"] = root
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    def committed_trees() -> list[str]:
        return RunFolder.open(root, "killed").read("trees").column("problem_id").to_pylist()

    log = (tmp_path / "first.log").open("wb")
    job = start_synthesize_job(path, stderr=log.fileno())
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not committed_trees():
            assert job.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"no batch committed within {JOB_DEADLINE_S} s"
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    before = committed_trees()
    assert 0 < len(before) < 8, "the kill must land midway"

    rerun = start_synthesize_job(path, stderr=subprocess.PIPE)
    _, err = rerun.communicate(timeout=JOB_DEADLINE_S)
    assert rerun.returncode == 0, err.decode()[-2000:]
    trees = committed_trees()
    assert Counter(trees) == Counter(f"p{i}" for i in range(8))  # each exactly once
    assert set(before) <= set(trees)
    nodes = RunFolder.open(root, "killed").read("nodes")
    keys = list(zip(*(nodes.column(c).to_pylist() for c in ("problem_id", "node_id")), strict=True))
    assert len(keys) == len(set(keys))
    run_keys = s3.keys(BUCKET, "synth/run=killed/")
    manifest = s3.client().get_object(Bucket=BUCKET, Key="synth/run=killed/run.json")
    text = manifest["Body"].read().decode()
    assert json.loads(text)["config"]["output_root"] == root
    assert "moto-secret" not in text and "AKIAMOTO" not in text
    assert "synth/run=killed/report.md" in run_keys

    # `bgmcts report` and `bgmcts publish` read the run from the bucket.
    assert bgmcts(["report", f"{root}/run=killed"]) == 0
    monkeypatch.setenv("HF_TOKEN", "hf_s3_FAKE_token_0123456789")
    repo = "bgmcts/from-s3"
    assert (
        bgmcts(
            [
                "publish",
                "--run-dir",
                f"{root}/run=killed",
                "--repo",
                repo,
                "--endpoint",
                hub.endpoint,
            ]
        )
        == 0
    )
    published = hub.files(repo)
    assert any(p.startswith("data/trees/run=killed/") for p in published), published
    card = published["README.md"].decode()
    assert "moto-secret" not in card and "AKIAMOTO" not in card


def test_a_bucket_failing_mid_run_is_one_line_and_keeps_what_was_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pipeline.store.filesystem import describe_os_error, is_storage_error

    root = f"s3://{BUCKET}/dying"
    with S3Server() as dying:
        for key, value in {**dying.env(), "AWS_MAX_ATTEMPTS": "2"}.items():
            monkeypatch.setenv(key, value)
        dying.client().create_bucket(Bucket=BUCKET)
        sink = ParquetSink(RunFolder.open(root, "r1"))
        lease = RunFolder.open(root, "r1").lease().acquire()
        sink.write_batch({"errors": [_error("a")]})
        committed = dying.keys(BUCKET)
    # The endpoint is gone (connection refused after botocore's retries).
    with pytest.raises(Exception) as failed:
        sink.write_batch({"errors": [_error("b")]})
    assert is_storage_error(failed.value)  # what synthesize() turns into OutputLocationError
    line = describe_os_error(root, failed.value)
    assert line.startswith(f"output_root {root}: ") and "\n" not in line
    lease.release()  # warns, never raises: it must not hide the error that ended the run
    assert len([k for k in committed if "/_committed/" in k]) == 1


def test_gs_without_gcsfs_is_one_clear_error() -> None:
    """gs:// needs gcsfs, which the project does not install: the user is told so."""
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    from pipeline.errors import OutputLocationError
    from pipeline.store.filesystem import open_store

    with pytest.raises(OutputLocationError, match=r"gs://.*needs the gcsfs package"):
        open_store("gs://some-bucket/prefix")
