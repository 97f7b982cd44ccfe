"""A killed run's unfinished trees are rebuilt from their request logs, node for node.

The first run is a real `python -m jobs.synthesize` process on its own local Ray cluster,
SIGKILLed (process group: driver, raylet, actors, replicas) once a tree is committed and
others are half way.  The rerun (same run id, in this process) replays what the request
log holds and asks the engines only for the rest; a reference run of the unfinished
problems alone, with no log, builds them from scratch.  The engines are the model-free
load model (deterministic answers from prompt and seed, a GPU engine's timing), so the
trees can be compared row for row and the engines' request counters read exactly.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import parse_run_config
from pipeline.run.synthesis import synthesize
from pipeline.store.request_log import FOLDER, tree_name
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import run_config, start_synthesize_job

pytestmark = pytest.mark.e2e

ENGINE = {"kind": "load_model", "output_tokens": 16, "answer_every": 4, "time_scale": 1.0}
# What a rerun may change without changing a tree: when and how fast it ran, and what the
# engines read from their prefix caches (their cache state is the rerun's own: a request
# the log did not hold is computed again and may find more or less of it cached).
VOLATILE = {
    "run_id",
    "created_at",
    "written_at",
    "wall_time_s",
    "search_time_s",
    "policy_prompt_cached_tokens",
    "prm_prompt_cached_tokens",
}


def _problems(path: Path, ids: list[str]) -> Path:
    rows = [
        {"id": i, "question": f"What is {n} + {n + 3}?", "answer": str(2 * n + 3)}
        for n, i in enumerate(ids)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(problems: Path, out: Path, run_id: str, **extra: Any) -> dict[str, Any]:
    return run_config(
        problems,
        out,
        budget=480,
        engine=ENGINE,
        step_max_tokens=32,
        analysis_tokens=16,
        run_id=run_id,
        ray_num_cpus=2,
        trees_per_actor=3,
        records={"decontamination": {"enabled": False}},
        **extra,
    )


def _logged_requests(run_dir: Path) -> int:
    """Generations and scores in the request logs, once no writer is left: Ray's workers
    notice their raylet is gone a moment after the kill and may write until then."""
    count, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 3:
        now = 0
        for path in (run_dir / FOLDER).glob("*/*.jsonl"):
            for line in path.read_bytes().splitlines():
                try:
                    _, value = json.loads(line)
                except ValueError:  # a line cut by the kill: not replayable
                    continue
                now += isinstance(value, list)  # generations and scores, not token counts
        if now != count:
            count, stable_since = now, time.monotonic()
        time.sleep(0.2)
    return count


def _killed_run(tmp_path: Path, ids: list[str], run_id: str) -> tuple[Path, dict[str, Any]]:
    """Problems `ids` run as a job (run folder tmp_path/out/run=<run_id>), SIGKILLed once
    a tree is committed and two trees have logged more than 2,000 bytes each; returns the
    problem file and the run config."""
    problems = _problems(tmp_path / "problems.jsonl", ids)
    config = _config(problems, tmp_path / "out", run_id)
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "out" / f"run={run_id}"
    job = start_synthesize_job(path)
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while True:
            assert job.poll() is None, "the job ended before it could be killed mid-run"
            assert time.monotonic() < deadline, f"no tree committed within {JOB_DEADLINE_S} s"
            if _committed_and_logged(run_dir):
                break
            time.sleep(0.1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    return problems, config


def _committed_and_logged(run_dir: Path) -> bool:
    """A tree is committed and two trees have logged more than 2,000 bytes each.  The job
    deletes a tree's request log once the tree is committed, so a folder or file seen a
    moment ago may be gone: that look is simply taken again."""
    try:
        committed = any((run_dir / "trees").glob("part-*.parquet"))
        logs = list((run_dir / FOLDER).glob("*/*.jsonl"))
        return committed and sum(1 for p in logs if p.stat().st_size > 2000) >= 2
    except FileNotFoundError:
        return False


IDS = [f"p{i}" for i in range(9)]


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job over IDS, killed mid-run, once no killed writer is left (its problems and
    run folder under the returned folder): each test reruns a copy of its own, since the
    kill is the slow part and a rerun changes the folder."""
    work = tmp_path_factory.mktemp("killed")
    _killed_run(work, IDS, "killed")
    _logged_requests(work / "out" / "run=killed")
    return work


def _copy_of(killed: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The killed run copied to tmp_path: its problem file and its config there."""
    shutil.copytree(killed, tmp_path, dirs_exist_ok=True)
    problems = tmp_path / "problems.jsonl"
    return problems, _config(problems, tmp_path / "out", "killed")


def _rows(folder: RunFolder, kind: str, ids: set[str]) -> list[dict[str, Any]]:
    rows = [
        {k: v for k, v in row.items() if k not in VOLATILE}
        for row in folder.read(kind).to_pylist()
        if row["problem_id"] in ids
    ]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _served() -> dict[str, tuple[str, int, int]]:
    """Each deployment's (replica, search requests served, engine output tokens)."""
    from ray import serve

    out = {}
    for app in ("policy", "scorer"):
        stats = serve.get_app_handle(app).stats.remote().result()
        out[app] = (stats["replica"], stats["requests"], stats["engine_output_tokens"])
    return out


def _delta(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int]:
    """Requests and tokens served between two readings (a new replica counts from zero)."""
    requests = tokens = 0
    for app, (replica, served, generated) in after.items():
        old = before.get(app)
        same = old is not None and old[0] == replica
        requests += served - (old[1] if same else 0)
        tokens += generated - (old[2] if same else 0)
    return requests, tokens


def test_rerun_replays_the_killed_trees_requests_and_rebuilds_them_node_for_node(
    ray_cluster: None, killed: Path, tmp_path: Path
) -> None:
    ids = IDS
    problems, config = _copy_of(killed, tmp_path)
    out = tmp_path / "out"
    run_dir = out / "run=killed"
    folder = RunFolder.open(out, "killed")
    done = set(folder.read("trees").column("problem_id").to_pylist())
    unfinished = sorted(set(ids) - done)
    assert done and unfinished, "the kill must land mid-run"
    logged = _logged_requests(run_dir)
    assert logged > 0
    summary = synthesize(parse_run_config(config), progress=None)
    after_rerun = _served()
    rerun_requests, rerun_tokens = _delta({}, after_rerun)
    # the same unfinished problems from scratch: no log, nothing to replay
    alone = tmp_path / "alone.jsonl"
    alone.write_text(
        "".join(
            line + "\n"
            for line in problems.read_text().splitlines()
            if json.loads(line)["id"] in unfinished
        )
    )
    reference = synthesize(parse_run_config(_config(alone, out, "reference")), progress=None)
    ref_requests, ref_tokens = _delta(after_rerun, _served())
    rerun = RunFolder.open(out, "killed")
    ref = RunFolder.open(out, "reference")
    trees = rerun.read("trees").column("problem_id").to_pylist()
    assert sorted(trees) == ids  # every problem exactly once
    nodes = rerun.read("nodes")
    keys = list(zip(*(nodes.column(c).to_pylist() for c in ("problem_id", "node_id")), strict=True))
    assert len(keys) == len(set(keys))  # no node row twice
    assert summary.errors == 0 and reference.errors == 0
    # the rebuilt trees are the trees built from scratch, node for node
    for kind in ("trees", "tree_nodes", "nodes"):
        assert _rows(rerun, kind, set(unfinished)) == _rows(ref, kind, set(unfinished)), kind
    # every logged request was replayed, and only the rest reached the engines
    assert summary.replayed_requests == logged
    assert rerun_requests + summary.replayed_requests == ref_requests
    assert rerun_tokens + summary.replayed_tokens == ref_tokens
    assert rerun_tokens < ref_tokens
    # committed trees' logs are cleaned
    assert not (run_dir / FOLDER).exists()


def test_a_folder_where_a_segment_was_does_not_stop_the_rerun(
    ray_cluster: None, killed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The request log is a saving, not a record: a folder left where a killed tree's
    segment file was (as object stores and FUSE mounts leave them) is skipped with a
    warning naming it, the tree is searched afresh and the rerun completes, every
    problem once; the folder is left where it is, the rest of the log cleaned."""
    ids = IDS
    _, config = _copy_of(killed, tmp_path)
    out = tmp_path / "out"
    run_dir = out / "run=killed"
    done = set(RunFolder.open(out, "killed").read("trees").column("problem_id").to_pylist())
    logged = [
        segment
        for problem in sorted(set(ids) - done)
        for segment in sorted((run_dir / FOLDER / tree_name(problem)).glob("*.jsonl"))
    ]
    assert done and logged, "the kill must land while unfinished trees are logged"
    planted = logged[0]
    planted.unlink()
    planted.mkdir()
    with caplog.at_level(logging.WARNING, logger="pipeline.store.request_log"):
        summary = synthesize(parse_run_config(config), progress=None)
    trees = RunFolder.open(out, "killed").read("trees").column("problem_id").to_pylist()
    assert sorted(trees) == ids and summary.errors == 0  # every problem exactly once
    assert f"{planted} cannot be deleted (IsADirectoryError" in caplog.text
    assert planted.is_dir()
    assert [p.relative_to(run_dir / FOLDER) for p in (run_dir / FOLDER).glob("*/*")] == [
        planted.relative_to(run_dir / FOLDER)
    ]
