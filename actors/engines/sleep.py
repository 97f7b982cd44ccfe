"""A model-free engine for load tests: every call sleeps a fixed latency, then answers.

`SleepEngine` implements the `Engine` contract without any model, so the whole
pipeline (Ray Data, search actors, Serve handles, GenPRM, grading, the sink)
can be timed with a known, constant service time per request:

* `complete` awaits `asyncio.sleep(latency_s)` (so one replica serves any
  number of requests concurrently, like an ideal batching engine) and returns
  `output_tokens` whitespace tokens.
* With a stop string the completion ends on it (finish `stop_string`; the stop
  string counts as one generated token and is excluded from the text), except
  every `answer_every`-th request (chosen by a hash of the engine seed, the
  request seed and the prompt, so the same request always gets the same
  answer) ends with "so the final answer is $\\boxed{42}$." and finish `eos`,
  which the search counts as an answered node.  Without a stop string (a full
  generation) the completion always ends with that answer and `eos`.
* A completion that would need more than `max_tokens` is cut at `max_tokens`
  (finish `length`), never longer: the search's budget invariant holds.
* With `top_logprobs > 0` every generated token carries a top list that holds
  "Yes" and "No" (probabilities derived from the same hash), so GenPRM's
  `judgement_score` gives a score strictly inside (0, 1); the one-token
  judgement's own text is the more likely label.
* A prompt of `context_length` tokens or more comes back as `context_overflow`.
* `render_chat` joins the messages as "role: content" lines; `tokenize`
  splits on whitespace (token ids are positions).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from actors.engines.base import Completion, Sampling, TopLogprobs
from search.protocols import FinishReason

if TYPE_CHECKING:
    from actors.config import SleepConfig

ANSWER_TEXT = "so the final answer is $\\boxed{42}$."
_FILLER = "word"


def _unit(*parts: object) -> float:
    """A stable number in [0, 1) from `parts` (no Python hash salt)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


# eq=False: an engine is one service whose `calls` count its requests, not a value
@dataclass(eq=False, kw_only=True)
class SleepEngine:
    """Sleeps `latency_s` per `complete` call and returns a fixed-length completion."""

    latency_s: float = 0.05
    output_tokens: int = 16
    context_length: int = 4096
    answer_every: int = 4
    seed: int = 0
    name: str = "sleep"
    # None: every completion has `output_tokens`; else a length drawn per request in
    # [output_tokens, output_tokens_max] (trees of varied length, steps up to the max)
    output_tokens_max: int | None = None
    calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {self.latency_s}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if self.output_tokens_max is not None and self.output_tokens_max < self.output_tokens:
            raise ValueError(
                f"output_tokens_max ({self.output_tokens_max}) must be >= output_tokens "
                f"({self.output_tokens})"
            )

    @classmethod
    def from_config(cls, config: SleepConfig) -> SleepEngine:
        """From the `engine:` block of a service config (`kind: sleep`): every field but
        `kind` is a keyword of the constructor, `model` under the name `name`."""
        return cls(name=config.model, **config.model_dump(exclude={"kind", "model"}))

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        self.calls += 1
        await asyncio.sleep(self.latency_s)
        return self.respond(prompt, sampling)

    def respond(self, prompt: str, sampling: Sampling) -> Completion:
        """The completion for a request, computed at once (no waiting): deterministic.

        Temperature, top_p and top_k change nothing (there is no model to sample).
        """
        max_tokens, stop, top_logprobs = sampling.max_tokens, sampling.stop, sampling.top_logprobs
        input_tokens = len(prompt.split())
        if input_tokens >= self.context_length:
            return Completion("", 0, FinishReason.CONTEXT_OVERFLOW, input_tokens)
        draw = _unit(self.seed, sampling.seed, prompt)
        answer = not stop or (self.answer_every > 0 and int(draw * 2**32) % self.answer_every == 0)
        tail = ANSWER_TEXT.split() if answer else []
        # The last generated token is the stop string or the end-of-sequence token.
        length = self.output_tokens
        if self.output_tokens_max is not None:
            spread = self.output_tokens_max - self.output_tokens + 1
            length += int(_unit(self.seed, sampling.seed, prompt, "length") * spread)
        needed = max(length, len(tail) + 1)
        if max_tokens < needed:
            words = [_FILLER] * max_tokens
            finish, stop_string = FinishReason.LENGTH, ""
        else:
            words = [_FILLER] * (needed - 1 - len(tail)) + tail
            finish = FinishReason.EOS if answer else FinishReason.STOP_STRING
            stop_string = "" if answer else stop[0]
        generated = max_tokens if finish is FinishReason.LENGTH else needed
        logprobs: tuple[TopLogprobs, ...] = ()
        if top_logprobs > 0:
            yes = 0.05 + 0.9 * draw  # P(Yes) in [0.05, 0.95)
            if yes >= 0.5:
                words = ["Yes", *words[1:]] if words else words
            elif words:
                words = ["No", *words[1:]]
            top = _top(yes, top_logprobs)
            logprobs = tuple(top for _ in range(generated))
        return Completion(
            text=" ".join(words),
            output_tokens=generated,
            finish=finish,
            input_tokens=input_tokens,
            stop_string=stop_string,
            top_logprobs=logprobs,
        )

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        return plain_chat(messages, continue_final=continue_final)

    async def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    async def close(self) -> None:
        return None


def plain_chat(messages: Sequence[Mapping[str, str]], *, continue_final: bool) -> str:
    """The chat of an engine without a model: "role: content" lines, and an open assistant
    line unless the last message is to be continued."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    if not continue_final:
        lines.append("assistant: ")
    return "\n".join(lines)


def _top(yes: float, k: int) -> TopLogprobs:
    """The k best alternatives: Yes and No share 0.98 of the mass, fillers the rest."""
    entries = [("Yes", 0.98 * yes), ("No", 0.98 * (1 - yes))]
    entries += [(f"tok{i}", 0.02 / max(k - 2, 1)) for i in range(max(k - 2, 0))]
    entries.sort(key=lambda e: e[1], reverse=True)
    return tuple((token, math.log(p)) for token, p in entries[:k])


__all__ = ["ANSWER_TEXT", "SleepEngine", "plain_chat"]
