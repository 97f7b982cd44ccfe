"""Deterministic scripted Policy and Scorer: no model, same output for the same seed.

A token is a whitespace-separated word, so `count_tokens` is exact and tests
can check every charge.  A sequential request writes one step and stops at the
boundary (the boundary costs one token, as a real engine generates it); a
step is the final one with probability `p_answer`, ending with the paper's
answer sentence and a natural end of sequence.  A full-generation request
writes steps until a final one or the length limit.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest


def _rng(*parts: object) -> random.Random:
    from search.driver import derive_seed

    return random.Random(derive_seed(0, *parts))


def count_words(text: str) -> int:
    return len(text.split())


@dataclass
class ScriptedPolicy:
    """A fake LLM: this runs where no model can (unit tests of the search core)."""

    seed: int = 0
    step_tokens: tuple[int, int] = (20, 80)
    p_answer: float = 0.3
    answers: Sequence[str] = ("12", "7", "\\frac{1}{2}")
    p_error: float = 0.0
    p_overflow: float = 0.0
    max_steps_full: int = 12
    name: str = "scripted"

    async def count_tokens(self, text: str) -> int:
        return count_words(text)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        prompt_tokens = count_words(request.problem) + count_words(request.assistant_prefix)
        return [self._choice(request, i, prompt_tokens) for i in range(request.n)]

    def _step_words(self, rng: random.Random, index: int) -> tuple[list[str], bool]:
        words = [f"w{index}.{j}" for j in range(rng.randint(*self.step_tokens))]
        if rng.random() < self.p_answer:
            answer = rng.choice(list(self.answers))
            words += ["so", "the", "final", "answer", "is", f"$\\boxed{{{answer}}}$."]
            return words, True
        return words, False

    def _choice(self, request: GenerationRequest, index: int, prompt_tokens: int) -> Generation:
        rng = _rng(self.seed, request.assistant_prefix, request.seed, index)
        roll = rng.random()
        if roll < self.p_error:
            return Generation("", 0, FinishReason.ERROR, prompt_tokens, error="scripted failure")
        if roll < self.p_error + self.p_overflow:
            return Generation("", 0, FinishReason.CONTEXT_OVERFLOW, prompt_tokens)
        sequential = bool(request.stop)
        words: list[str] = []
        final = False
        for step in range(1 if sequential else self.max_steps_full):
            if step:
                words += ["\nStep", f"{step + 1}:"]
            step_words, final = self._step_words(rng, step)
            words += step_words
            if final:
                break
        boundary = 0 if final or not sequential else 1
        if len(words) + boundary > request.max_tokens:
            text = " " + " ".join(words[: request.max_tokens])
            return Generation(text, request.max_tokens, FinishReason.LENGTH, prompt_tokens)
        text = " " + " ".join(words)
        if final or not sequential:
            finish = FinishReason.EOS if final else FinishReason.LENGTH
            return Generation(text, len(words), finish, prompt_tokens)
        return Generation(text, len(words) + 1, FinishReason.STOP_STRING, prompt_tokens)


@dataclass
class ScriptedScorer:
    """A fake PRM: Q drawn from one distribution at every depth, fixed per path.

    `uniform` draws Q ~ U(0, 1).  `near_binary` mimics GenPRM's saturated
    scores (paper, App. K): near 1 with probability `p_high`, else near 0.
    """

    seed: int = 0
    distribution: str = "uniform"
    p_high: float = 0.5
    answered_bonus: float = 0.0
    output_tokens: int = 8
    name: str = "scripted-prm"

    def _draw(self, rng: random.Random) -> float:
        if self.distribution == "near_binary":
            centre = 0.98 if rng.random() < self.p_high else 0.02
            return min(1.0, max(0.0, centre + rng.uniform(-0.02, 0.02)))
        if self.distribution == "uniform":
            return rng.random()
        raise ValueError(f"unknown score distribution {self.distribution!r}")

    async def score(self, request: ScoreRequest) -> Score:
        rng = _rng(self.seed, request.problem, request.path)
        value = min(1.0, self._draw(rng) + (self.answered_bonus if request.answered else 0.0))
        depth = 1 if request.parent_context is None else int(request.parent_context) + 1
        return Score(
            value=value,
            context=depth,
            input_tokens=sum(count_words(s) for s in request.path),
            output_tokens=self.output_tokens,
        )
