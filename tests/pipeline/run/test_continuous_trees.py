"""Continuous trees through the real pipeline, on the model-free load model.

Real local Ray cluster, Ray Data, Serve deployments, GenPRM protocol, grading and
Parquet sink; only the model is replaced by the engine-shaped load model
(`actors/engines/load_model.py`), which is what lets one problem be made slow on purpose.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import RunConfig, load_run_config, parse_run_config
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import synthesize
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import REPO, run_config, tiny_run_config

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# synthesize() joins the test process's shared cluster (tests/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("ray_cluster")]

SLOW = "(this one is slow)"


def test_smoke_config_runs_the_whole_pipeline(tmp_path: Path) -> None:
    config = load_run_config(REPO / "configs" / "smoke-sleep.yaml", output_root=str(tmp_path))
    config = config.model_copy(update={"source": config.source.model_copy(update={"count": 6})})
    start = time.perf_counter()
    summary = synthesize(config, progress=None)
    elapsed = time.perf_counter() - start
    assert summary.errors == 0 and summary.searched == 6
    assert summary.rows["trees"] == 6 and summary.rows["tree_nodes"] > 6
    assert summary.answered_nodes > 0  # the load model answers every 4th step
    assert (summary.run_dir / "report.md").is_file()
    print(f"smoke run of 6 problems: {elapsed:.1f}s")


def test_a_slow_tree_does_not_hold_back_the_others(tmp_path: Path) -> None:
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {i}?{' ' + SLOW if i == 1 else ''}"}
        | {"answer": str(2 * i)}
        for i in range(6)
    ]
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # Every request of problem p1 (its prompts carry the marker) stays 100 times as many
    # steps in the batch: a tree of 4 steps takes about 50 s instead of half a second.
    engine = {"kind": "load_model", "output_tokens": 8, "slow_marker": SLOW, "slow_factor": 100}
    config = parse_run_config(
        run_config(
            problems,
            tmp_path / "out",
            budget=64,
            engine=engine,
            run_id="slow-tree",
            trees_per_actor=6,  # all at once: a batch barrier would hold all five back
            records={"decontamination": {"enabled": False}},
        )
    )
    summaries: list[RunSummary] = []
    worker = threading.Thread(target=lambda: summaries.append(synthesize(config, progress=None)))
    worker.start()
    fast = {f"p{i}" for i in range(6) if i != 1}
    committed: set[str] = set()
    deadline = time.monotonic() + JOB_DEADLINE_S
    while not fast <= committed and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
        run_dir = tmp_path / "out" / "run=slow-tree"
        if (run_dir / "_committed").is_dir():
            committed = RunFolder.open(tmp_path / "out", "slow-tree").searched_problem_ids()
    assert fast <= committed, f"the fast trees were not all committed: {sorted(committed)}"
    assert "p1" not in committed, "the slow tree finished first: the test proves nothing"
    worker.join(timeout=JOB_DEADLINE_S)
    assert summaries and summaries[0].errors == 0
    trees = RunFolder.open(tmp_path / "out", "slow-tree").read("trees")
    assert Counter(trees.column("problem_id").to_pylist()) == Counter(f"p{i}" for i in range(6))


ADMISSION_BUDGET = 96


def _admission_config(tmp_path: Path, problems: int, run_id: str, **extra: Any) -> RunConfig:
    """`problems` sums on the load model (4 slots per engine), admission on, two
    expansions of each tree in flight."""
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
        for i in range(problems)
    ]
    engine = {"kind": "load_model", "output_tokens": 8, "max_seqs": 4, "time_scale": 0.5}
    return parse_run_config(
        tiny_run_config(
            tmp_path,
            rows,
            budget=ADMISSION_BUDGET,
            engine=engine,
            run_id=run_id,
            admission=True,
            search={"algorithm": "bg_mcts", "step_max_tokens": 16, "max_inflight_expansions": 2},
            records={"decontamination": {"enabled": False}},
            **extra,
        )
    )


def test_admission_sizes_the_trees_in_flight_from_the_engines(tmp_path: Path) -> None:
    """`admission: true` through real Serve: each actor runs as many trees at once as the
    engines' `capacity()` calls for, not `trees_per_actor` (a cap), with two expansions
    of each tree in flight (the in-flight driver against real deployments)."""
    # 4 slots per engine; a tree keeps inflight (2) x k (2) sequences in flight, half of
    # its time at each engine: 2 per engine, so ceil(4 / 2) = 2 trees fill the batch.
    # The KV cache (400k tokens by default) holds thousands of these short contexts, so
    # "full", not "warm", decides: 2 trees per actor, well under the cap of 8.
    budget = ADMISSION_BUDGET
    config = _admission_config(
        tmp_path,
        8,
        "admission",
        trees_per_actor=8,
        admission_interval_s=3600,  # the start only: steering has its own test below
    )
    summary = synthesize(config, progress=None)
    assert summary.errors == 0 and summary.searched == 8
    assert summary.admitted_per_actor == 2, summary.admitted_per_actor
    # the gate is what ran: 8 problems offered at once, never more than 2 trees searched
    assert summary.peak_in_flight_per_actor == 2, summary.peak_in_flight_per_actor
    trees = RunFolder.open(tmp_path / "out", "admission").read("trees").to_pylist()
    assert Counter(t["problem_id"] for t in trees) == Counter(f"p{i}" for i in range(8))
    for tree in trees:
        assert tree["budget"] == budget
        assert 0 < tree["c_used"] <= tree["budget"], tree


def test_admission_grows_the_trees_in_flight_while_the_batch_has_room(tmp_path: Path) -> None:
    """`admission: true` steers at run time: the static rule starts at 2 trees per actor
    (the test above), but the engines' `load()` says their 4-slot batches have room most
    of the time (a tree spends much of its life outside the engine: Serve round trips,
    grading), so every `admission_interval_s` the controller adds trees, up to the cap."""
    cap = 6
    config = _admission_config(
        tmp_path, 24, "steered", trees_per_actor=cap, admission_interval_s=0.2
    )
    summary = synthesize(config, progress=None)
    assert summary.errors == 0 and summary.searched == 24
    static_start = 2  # what `capacity()` calls for (the test above)
    assert summary.admitted_per_actor is not None and summary.peak_in_flight_per_actor is not None
    assert static_start < summary.admitted_per_actor <= cap, summary.admitted_per_actor
    assert static_start < summary.peak_in_flight_per_actor <= cap, summary
    trees = RunFolder.open(tmp_path / "out", "steered").read("trees").to_pylist()
    assert Counter(t["problem_id"] for t in trees) == Counter(f"p{i}" for i in range(24))
