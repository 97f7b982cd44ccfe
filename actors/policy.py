"""`search.Policy` on top of any engine: prompt rendering, n samples, token counts."""

from __future__ import annotations

import asyncio

from actors.engines.base import Completion, Engine, Sampling
from actors.prompts import POLICY_INSTRUCTION, policy_messages
from search.protocols import ClampedCounts, FinishReason, Generation, GenerationRequest


class EnginePolicy:
    """The policy LLM: continues the search's assistant text for a problem.

    The n choices of a request are n engine requests with seeds seed, seed+1, ...
    (the same seed gives the same text); their shared prompt is served from the
    engine's prefix cache.  A path too long for the context comes back as a
    `context_overflow` choice, a failed request as an `error` choice: neither raises.
    A completion with no text but white space that the engine ended on its own (an
    engine that answers with nothing, `completion_tokens` 0) is a failed request too: it
    holds no step, and as an `error` choice it is retried by `actors.serve.ServePolicy`
    and never spends the budget.  A white-space start that `max_tokens` cut (a request
    near the end of the budget may ask for 1 or 2 tokens) is an answer, not a failure:
    retrying it with the same seed gives it again, and it is charged like any step (the
    records never train on an empty step).
    """

    def __init__(
        self,
        engine: Engine,
        name: str | None = None,
        instruction: str = POLICY_INSTRUCTION,
        solution_stops: tuple[str, ...] = (),
    ) -> None:
        self.engine = engine
        self.name = name or engine.name
        self.instruction = instruction  # the user turn's template (`PromptConfig`)
        # `PromptConfig.policy_stop`: what the prompt's format writes after a solution
        self.solution_stops = tuple(solution_stops)

    async def render(self, problem: str, assistant_prefix: str) -> str:
        return await self.engine.render_chat(
            policy_messages(problem, assistant_prefix, self.instruction), continue_final=True
        )

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        prompt = await self.render(request.problem, request.assistant_prefix)
        stop = tuple(dict.fromkeys((*request.stop, *self.solution_stops)))
        completions = await asyncio.gather(
            *(
                self.engine.complete(
                    prompt,
                    Sampling(
                        max_tokens=request.max_tokens,
                        stop=stop,
                        temperature=request.temperature,
                        seed=(request.seed + i) & 0x7FFFFFFF,
                    ),
                )
                for i in range(request.n)
            )
        )
        ends = frozenset(self.solution_stops) - frozenset(request.stop)
        asked = request.max_tokens >= 1  # max_tokens 0 asks for nothing: empty is the answer
        return [_generation(c, ends, empty_fails=asked) for c in completions]

    async def count_tokens(self, text: str) -> int:
        return len(await self.engine.tokenize(text))

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        return len(await self.engine.tokenize(await self.render(problem, assistant_prefix)))


def _generation(
    completion: Completion, solution_ends: frozenset[str], *, empty_fails: bool = True
) -> Generation:
    # counts the engine reported wrong (clamped as they entered): the run counts them
    clamped = ClampedCounts.of(completion.count_faults)
    if completion.finish is FinishReason.ERROR:
        return Generation(
            "",
            0,
            FinishReason.ERROR,
            completion.input_tokens,
            completion.error,
            retryable=completion.retryable,
            clamped=clamped,
        )
    finish = completion.finish
    capped = finish is FinishReason.LENGTH and completion.output_tokens > 0
    if (
        empty_fails
        and finish is not FinishReason.CONTEXT_OVERFLOW
        and not capped
        and not completion.text.strip()
    ):
        return Generation(
            "", 0, FinishReason.ERROR, completion.input_tokens, _empty(completion), clamped=clamped
        )
    if finish is FinishReason.STOP_STRING and completion.stop_string in solution_ends:
        # The model began what the prompt's format puts after a solution (a few-shot
        # prompt's next "Problem:"): its solution ended as at the end of sequence.
        finish = FinishReason.EOS
    return Generation(
        completion.text,
        completion.output_tokens,
        finish,
        completion.input_tokens,
        cached_input_tokens=completion.cached_tokens,
        clamped=clamped,
    )


def _empty(completion: Completion) -> str:
    what = "an empty completion" if not completion.text else "a completion of white space only"
    return (
        f"the engine returned {what} ({completion.output_tokens} tokens, "
        f"finish {completion.finish.value})"
    )
