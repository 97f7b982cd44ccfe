"""How much of GenPRM's prompt llama.cpp actually computes (its prompt cache at work).

`prm_input_tokens` in the run's Parquet counts every prompt in full (llama.cpp's
`tokens_evaluated`).  The llama.cpp engine sends `cache_prompt: true`, and llama.cpp picks
the slot whose cached prompt shares the longest prefix (and keeps older prompts in host
memory), so a step's judgement call (the analysis prompt + the analysis) and the next
step's analysis call (the conversation so far + one turn) mostly hit the cache.  This
scores 8 paths of 3 steps at once on 4 slots, like the search actor's concurrent trees,
and prints the prompt tokens sent against those computed (`timings.prompt_n`).

    .venv/bin/python -m benchmarks.genprm_prompt_cache
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from actors.engines.llamacpp import LlamaCppEngine
from actors.genprm import GenPRMScorer
from search.protocols import ScoreRequest

STEPS = ("Step 1: Ana has some apples.", "\nStep 2: She gets 5 more.", "\nStep 3: The answer is 9.")


async def main() -> None:
    engine = LlamaCppEngine("embedded", threads=1, parallel=4)
    sent = computed = 0
    post = engine._post

    async def counting_post(path: str, body: Any) -> httpx.Response:
        nonlocal sent, computed
        response = await post(path, body)
        if path == "/completion" and response.status_code == 200:
            data = response.json()
            sent += int(data.get("tokens_evaluated", 0))
            computed += int(data["timings"]["prompt_n"])
        return response

    engine._post = counting_post  # type: ignore[method-assign]
    scorer = GenPRMScorer(engine, max_analysis_tokens=16)

    async def one_path(problem: str) -> None:
        context: Any = None
        for depth in range(1, len(STEPS) + 1):
            request = ScoreRequest(
                problem=problem,
                path=STEPS[:depth],
                parent_context=context,
                answered=False,
                answer=None,
                full_generation=False,
                max_cost=1e9,
            )
            context = (await scorer.score(request)).context

    problems = [f"Ana has {n} apples. Then Ana gets 5 more apples. How many now?" for n in range(8)]
    await asyncio.gather(*(one_path(p) for p in problems))
    print(
        f"{len(problems)} paths x {len(STEPS)} steps, {scorer.calls} calls: prompt tokens sent "
        f"{sent}, computed {computed} ({computed / sent:.0%})"
    )
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main())
