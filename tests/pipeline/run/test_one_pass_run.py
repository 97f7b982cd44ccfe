"""The embedded one-pass default (configs/local-prm.yaml) made small, on a real local Ray.

Ray Data, the search actor, the policy (llama.cpp, SmolLM2) and the one-pass scorer
(the `transformers_prm` engine in its Serve replica) all run for real; the scorer's
checkpoint is the session's tiny random PRM (`tests/prm_checkpoint.py`) in place of
`checkpoints/local-prm`, which `make prm` trains in minutes.  Every node's Q in the
Parquet is checked against the same engine scoring that node's path in this process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actors.engines.transformers_prm import TransformersPRMConfig, TransformersPRMEngine
from actors.one_pass import OnePassScorer
from pipeline.config import parse_run_config
from pipeline.run.synthesis import synthesize
from pipeline.store.run_folder import RunFolder
from search.answers import AnswerExtraction, answer_span
from search.protocols import ScoreRequest
from tests.tiny_run import local_prm_config

pytestmark = pytest.mark.e2e

# The replica batches paths, this check scores them one at a time: float sums in another
# order, the same values to float32 rounding.
TOLERANCE = 1e-5


def _requests(tree_nodes: list[dict[str, Any]]) -> list[tuple[dict[str, Any], ScoreRequest]]:
    """Each scored node of one tree with the request the search sent for it: its path
    from the root's first child, and where an answered node's answer statement ends."""
    by_id = {n["node_id"]: n for n in tree_nodes}
    root = next(n for n in tree_nodes if n["parent_id"] is None)
    out = []
    for node in tree_nodes:
        if node["parent_id"] is None or node["error"] is not None:
            continue
        path, cursor = [], node
        while cursor["parent_id"] is not None:
            path.append(cursor["inserted_text"] + cursor["text"])
            cursor = by_id[cursor["parent_id"]]
        span = answer_span(node["text"], AnswerExtraction.LAST_NUMBER)
        end = None
        if node["answered"] and span is not None:
            end = len(node["inserted_text"]) + span.end
        request = ScoreRequest(
            root["text"],
            tuple(reversed(path)),
            None,
            node["answered"],
            node["answer"],
            node["full_generation"],
            1e9,
            answer_end=end,
        )
        out.append((node, request))
    return out


def _one_pass_q(checkpoint: Path, requests: list[ScoreRequest]) -> list[float]:
    """Q of each request from the scorer and engine in this process, one path at a time."""
    scorer = OnePassScorer(
        TransformersPRMEngine(TransformersPRMConfig(model=str(checkpoint)), step_separator="\n")
    )

    async def score(request: ScoreRequest) -> float:
        result = await scorer.score(request)
        assert result.error is None, result.error
        return result.value

    return [asyncio.run(score(r)) for r in requests]


def test_local_prm_config_runs_with_one_pass_scores(
    ray_cluster: None, tmp_path: Path, tiny_prm: Path
) -> None:

    config = parse_run_config(
        local_prm_config(tmp_path / "out", tiny_prm, problems=3, budget=96, run_id="prm")
    )
    assert config.scorer.kind == "one_pass"
    summary = synthesize(config, progress=None)
    assert (summary.searched, summary.errors) == (3, 0)
    folder = RunFolder.open(tmp_path / "out", "prm")
    trees = folder.read("trees").to_pylist()
    assert len(trees) == 3
    assert all(t["prm_input_tokens"] > 0 and t["prm_output_tokens"] == 0 for t in trees)
    counts = folder.counts()
    assert counts["nodes"] > 0 and counts["prm"] > 0, counts
    tree_nodes = folder.read("tree_nodes").to_pylist()
    scored = [
        pair
        for tree in trees
        for pair in _requests([n for n in tree_nodes if n["problem_id"] == tree["problem_id"]])
    ]
    assert len(scored) >= 3
    expected = _one_pass_q(tiny_prm, [request for _, request in scored])
    for (node, _), q in zip(scored, expected, strict=True):
        assert node["q"] == pytest.approx(q, abs=TOLERANCE)
    assert len({round(n["q"], 6) for n, _ in scored}) > 1  # not one constant (0.5) for all
    report = (Path(summary.run_dir) / "report.md").read_text()
    assert "| scorer | one_pass (a one-pass PRM" in report
    assert "(a one-pass PRM decodes nothing)" in report
