"""The search actor called directly, in this process, against real Serve deployments.

The end-to-end tests reach `SearchActor` only through Ray Data; here a reader sees what one
call does: a batch of stream rows in, the same rows out with each problem's records (every
record type of a searched tree, or an ``errors`` row), a tally passed through untouched.
Real local Ray and Serve with the model-free load model (no model to load, so it is quick).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from actors.serve import deploy_policy, deploy_scorer
from pipeline.config import RunConfig
from pipeline.run.search_actor import SearchActor
from pipeline.run.stream_rows import Problem, decode_records, problem_row, tally_row
from tests.tiny_run import tiny_run_config

pytestmark = pytest.mark.integration

ENGINE = {"kind": "load_model", "output_tokens": 8, "answer_every": 2, "time_scale": 0.01}


@pytest.fixture(scope="module")
def serve_apps(
    ray_cluster: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("actor")
    config = tiny_run_config(
        tmp, [{"id": "x", "question": "1+1?", "answer": "2"}], budget=64, engine=ENGINE
    )
    config["replay"] = {"enabled": False}
    run = RunConfig.model_validate(config)
    deploy_policy(run.policy)
    deploy_scorer(run.scorer)
    yield config


def _batch(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {key: [row[key] for row in rows] for key in rows[0]}


def test_one_call_returns_each_problems_records_and_passes_a_tally_through(
    serve_apps: dict[str, Any],
) -> None:
    actor = SearchActor(serve_apps)
    rows = [
        problem_row({"problem_id": "p/0", "problem": "What is 2 + 3?", "reference": "5"}),
        tally_row([{"problem_id": "bad", "message": "no problem text"}], skipped=3),
        problem_row({"problem_id": "p/1", "problem": "What is 4 + 4?", "reference": "8"}),
    ]
    out = asyncio.run(actor(_batch(rows)))

    assert out["kind"] == ["problem", "tally", "problem"]
    assert out["skipped"] == [0, 3, 0]
    assert decode_records(out["records"][1]) == {
        "errors": [{"problem_id": "bad", "message": "no problem text"}]
    }
    for index, problem_id in ((0, "p/0"), (2, "p/1")):
        records = decode_records(out["records"][index])
        assert not records.get("errors"), records.get("errors")
        (tree,) = records["trees"]
        assert tree["problem_id"] == problem_id
        assert tree["policy_output_tokens"] > 0
        # every node of the tree is recorded, the root included
        assert len(records["tree_nodes"]) == tree["n_nodes"] + 1
        assert {row["problem_id"] for row in records["tree_nodes"]} == {problem_id}


def test_a_problem_longer_than_the_context_is_an_errors_row_not_a_failed_call(
    serve_apps: dict[str, Any],
) -> None:
    actor = SearchActor(serve_apps)
    # the load model counts whitespace tokens; its context is 4,096 of them
    too_long = Problem("p/long", "word " * 5000, None)
    fits = Problem("p/fits", "What is 1 + 2?", "3")
    long_records, fits_records = asyncio.run(actor.solve_all([too_long, fits]))
    (error,) = long_records["errors"]
    assert error["problem_id"] == "p/long"
    assert "trees" not in long_records
    assert fits_records["trees"][0]["problem_id"] == "p/fits"
