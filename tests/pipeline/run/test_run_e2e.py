"""The whole synthesis job on a real local Ray cluster with the real SmolLM2 model.

Ray Data, the search actor, both Serve deployments, llama.cpp, math-verify and the
Parquet files are all real; only the budget is tiny so the test takes about a minute.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pipeline.config import parse_run_config
from pipeline.records import SCHEMAS
from pipeline.run.synthesis import synthesize
from tests.tiny_run import tiny_run_config

pytestmark = pytest.mark.e2e

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def test_end_to_end_writes_every_record_type_and_resumes(ray_cluster: None, tmp_path: Path) -> None:

    rows = [
        {"id": "p1", "question": "What is 12 times 3?", "answer": "36"},
        {"id": "p2", "question": "What is 2 + 2?", "answer": "4"},
        {"id": "bad", "question": "", "answer": "1"},
    ]
    engine = {"kind": "llamacpp", "context_length": 2048, "threads": 1, "parallel": 4}
    config = parse_run_config(
        tiny_run_config(
            tmp_path,
            rows,
            budget=64,
            engine=engine,
            step_max_tokens=24,
            analysis_tokens=8,
            run_id="e2e",
            ray_num_cpus=2,
        )
    )
    summary = synthesize(config, progress=None)
    run_dir = tmp_path / "out" / "run=e2e"
    assert summary.searched == 2 and summary.errors == 1
    for kind, schema in SCHEMAS.items():
        for part in sorted((run_dir / kind).glob("*.parquet")):
            assert pq.read_schema(part).equals(schema, check_metadata=False), kind
    trees = pq.read_table(run_dir / "trees").to_pylist()
    assert sorted(t["problem_id"] for t in trees) == ["p1", "p2"]
    assert all(t["c_used"] <= 64 for t in trees)
    # every node of every real tree, the root included, is in tree_nodes
    tree_nodes = pq.read_table(run_dir / "tree_nodes").to_pylist()
    for tree in trees:
        mine = [n for n in tree_nodes if n["problem_id"] == tree["problem_id"]]
        assert len(mine) == tree["n_nodes"] + 1
        assert sum(n["answered"] for n in mine) == tree["n_answered"]
        assert tree["contaminated"] is None  # not a MATH500 or GSM8K test problem
    errors = pq.read_table(run_dir / "errors").to_pylist()
    assert len(errors) == 1 and errors[0]["stage"] == "source"
    assert "problem" in errors[0]["message"]
    # rerunning the same run id skips everything already written: no row twice
    again = synthesize(config, progress=None)
    assert again.searched == 0 and again.skipped == 3
    assert len(pq.read_table(run_dir / "trees")) == 2
    assert len(pq.read_table(run_dir / "errors")) == 1
