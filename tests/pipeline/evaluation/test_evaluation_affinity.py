"""The evaluation runner marks each search's requests with its tree key (affinity).

With several replicas the Serve clients route by `current_tree()`; the search actor
sets it per tree, and the evaluation runner must too, or every evaluation request
would be routed at random.  Fake services record the key each request carried.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from actors.affinity import current_tree
from pipeline.evaluation.config import Method, ServicesEnvironment
from pipeline.evaluation.parts import PartStore
from pipeline.evaluation.runner import Task, _run_services_tasks
from pipeline.records.config import RecordsConfig
from search import parse_search_config
from search.protocols import Generation, GenerationRequest, Score, ScoreRequest
from search.simulated import SimPolicy, SimScorer


class _Recording:
    def __init__(self, inner: Any, seen: list[tuple[str, str | None]]) -> None:
        self._inner = inner
        self._seen = seen
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        self._seen.append((request.problem, current_tree()))
        result: list[Generation] = await self._inner.generate(request)
        return result

    async def score(self, request: ScoreRequest) -> Score:
        self._seen.append((request.problem, current_tree()))
        result: Score = await self._inner.score(request)
        return result


def test_every_request_of_an_evaluation_search_carries_its_problem_as_tree_key(
    tmp_path: Path,
) -> None:
    from search.simulated import simulated_problems

    problems = simulated_problems(3, seed=0)
    method = Method(label="bg_mcts", search=parse_search_config({"algorithm": "bg_mcts"}))
    tasks = [Task(method, 2000, 0, p.problem_id, p.problem, None) for p in problems]
    env = ServicesEnvironment.model_validate({"source": {"kind": "bundled", "dataset": "gsm8k"}})
    seen: list[tuple[str, str | None]] = []
    failures = asyncio.run(
        _run_services_tasks(
            tasks,
            _Recording(SimPolicy(), seen),
            _Recording(SimScorer(), seen),
            env,
            lambda done, total: None,
            PartStore(tmp_path),
            RecordsConfig(),
        )
    )
    assert failures == []
    ids = {p.problem: p.problem_id for p in problems}
    assert {problem for problem, _ in seen} == set(ids)
    assert all(tree == ids[problem] for problem, tree in seen), seen[:5]
