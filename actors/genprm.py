"""GenPRM as a `search.Scorer` on any engine (the paper's reward-model protocol, App. E).

The reward model reads one conversation per path: the system prompt, the
problem with the first step as the first user turn, every later step as its own
user turn, and its own critique of each earlier step as the assistant turns::

    system:    PRM_SYSTEM
    user:      "Question: {problem}\\n\\nStep 1: ..."
    assistant: "<analyze>\\nLet's analyze the Paragraph 1 step by step: ...</analyze>
                \\n<output>\\n**Judgement**: $\\\\boxed{Yes}$\\n</output>\\n"
    user:      "Step 2: ..."
    assistant: (critique of step 2)
    ...

Scoring one step is two engine calls: the analysis (opened with
"<analyze>..Paragraph i..", stopped at "</analyze>") and a forced one-token
judgement after "**Judgement**: $\\boxed{" whose top-20 log-probabilities give
P(Yes) / (P(Yes) + P(No)) (`judgement_score`).  The paper runs GenPRM-7B on
GPUs; on CPU the same code path runs on SmolLM2, whose scores mean little.

Where the analysis is written (`analysis_turn`):

* `user` (default, GenPRM's training format, as the released code sends it:
  src/bg_mcts/llm/PRM/gen_prm_evaluate_func.py appends the opening to the last
  message and asks for no generation prompt): the opening continues the last
  user turn, with no assistant header.  The prompt is the chat template's
  rendering cut right after the user's text, so it works with any template.
* `assistant`: an assistant turn prefilled with the opening.

Either way the finished critique is stored as the next assistant turn, and a
child's prompt extends its parent's judgement prompt byte for byte, so the engine's
prefix cache serves the parent's whole conversation: in `assistant` mode the stored
turns render as they were sent; in `user` mode each earlier critique is rendered at the
end of its step's user turn, where it was written (rendering it as an assistant turn
would break the prefix right after the parent's step and prefill the critique again).  A prompt
that does not fit the engine's context is trimmed for that call, oldest
critiques first (each keeps its judgement, its analysis becomes "..."), then
the oldest steps' text; the stored conversation keeps everything.  After an
answered node (`prm_after_answer: restart`, the released code's rule) the
conversation starts again from the system prompt and the problem, with the
continued text as the first step; `continue` (default) goes on in one
conversation.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.config import GenPRMSettings
from actors.engines.base import Completion, Engine, Sampling, TopLogprobs
from actors.errors import EngineError
from actors.prompts import (
    PRM_ANALYSIS_END,
    PRM_ANALYSIS_PREFIX,
    PRM_JUDGEMENT_PREFIX,
    PRM_JUDGEMENT_SUFFIX,
    PRM_SYSTEM,
)
from search import derive_seed
from search.protocols import ClampedCounts, FinishReason, Score, ScoreRequest
from search.step_text import split_steps

Message = dict[str, str]
Conversation = tuple[Message, ...]

YES, NO = "Yes", "No"
# Cut point in a rendered chat: no template adds or escapes these characters.
_OPEN_TURN = "\u2063\u2063genprm-open-turn\u2063\u2063"
_TRIMMED_ANALYSIS = "..."


def judgement_score(top: TopLogprobs) -> float:
    """P(Yes) / (P(Yes) + P(No)) from the top log-probabilities of the judgement token.

    Tokens are matched after stripping whitespace (" Yes" counts as "Yes"; several
    spellings of one label add up).  A label missing from the list is given the
    smallest probability in the list, the most it could have had while staying
    out of it; when neither label appears the judgement says nothing: 0.5.

    Example: top = [("Yes", ln 0.6), ("The", ln 0.3), ("A", ln 0.1)] has no "No",
    so P(No) := 0.1 and the score is 0.6 / (0.6 + 0.1) = 0.857.
    """
    probs = [(token.strip(), math.exp(logprob)) for token, logprob in top]
    yes = sum(p for token, p in probs if token == YES)
    no = sum(p for token, p in probs if token == NO)
    has_yes = any(token == YES for token, _ in probs)
    has_no = any(token == NO for token, _ in probs)
    if not has_yes and not has_no:
        return 0.5
    floor = min(p for _, p in probs)
    yes = yes if has_yes else floor
    no = no if has_no else floor
    total = yes + no
    return 0.5 if total <= 0.0 else yes / total


class _Failed(Exception):
    """A PRM engine call failed; the node's score carries the message."""


@dataclass(slots=True)
class _Tokens:
    input: int = 0
    output: int = 0
    cached: int = 0  # of `input`, read from the engine's prefix cache
    clamped: ClampedCounts = field(default_factory=ClampedCounts)  # counts reported wrong

    def add(self, completion: Completion) -> None:
        self.input += completion.input_tokens
        self.output += completion.output_tokens
        self.cached += completion.cached_tokens
        self.clamped += ClampedCounts.of(completion.count_faults)


@dataclass(frozen=True, slots=True)
class _Sample:
    analysis: str
    value: float


class GenPRMScorer:
    """The generative process reward model: critiques each step, then judges Yes/No.

    * Q of a node is the judgement score of its (last) step, averaged over
      `samples` independent analyses (sample i of a step uses a seed derived from
      the scorer's seed, the problem, the conversation's steps and i, so the same
      path always gets the same critique).
    * `Score.context` is the whole conversation up to and including this node's
      critique (a tuple of message dicts; picklable).  A child's request carries
      it as `parent_context`, so an ancestor's critique is never regenerated:
      scoring a sequential child costs exactly 2 x `samples` engine calls.
      When `parent_context` is None (or not a conversation) but the path has
      several segments, the conversation is rebuilt by scoring every ancestor
      step in order first; those calls count toward this node's tokens.
    * Full-generation nodes hold a whole solution: it is split into its
      "Step N:" paragraphs, each prefix is scored in one growing conversation,
      and the node's Q is the last step's score (App. E).
    * The stored critique is the first sample's analysis followed by the
      judgement "Yes" when the step's mean score is >= 0.5, else "No".
    * `Score.input_tokens` / `output_tokens` are the prompt and generated tokens
      of every engine call made for this node (the driver charges them with the
      PRM cost weights, zero in the paper's output-token budget).  `max_cost` is
      not enforced here: cap `max_analysis_tokens` so that a score fits the
      driver's PRM reserve when PRM tokens are charged.
    * A failed engine call (an ERROR completion, a conversation that overflows
      the context, a judgement without log-probabilities, a chat template the
      engine cannot apply) is reported as `Score(0.0, error=...)` with the
      tokens spent so far; the driver keeps such a node but never expands it.
    * GenPRM can write Python to check a step; nothing the model writes is ever
      executed, and there is no code-execution mode: code in an analysis is
      just text.

    `calls` counts engine `complete()` calls (tests check reuse with it).
    """

    def __init__(
        self,
        engine: Engine,
        settings: GenPRMSettings | None = None,
        *,
        system_prompt: str = PRM_SYSTEM,
        top_logprobs: int = 20,
        seed: int = 0,
        step_boundary: str = "\nStep",
        response_prefix: str = "Step 1:",
        name: str | None = None,
    ) -> None:
        # the sampling and the conversation's rules are the config's `scorer.genprm`, with
        # its defaults and its checks: nothing here repeats them
        self.settings = settings or GenPRMSettings()
        self.engine = engine
        self.system_prompt = system_prompt
        self.top_logprobs = top_logprobs
        self.seed = seed
        self.step_boundary = step_boundary
        self.response_prefix = response_prefix
        self.name = name or f"genprm:{engine.name}"
        self.calls = 0
        self.steps_scored = 0
        self.trimmed_prompts = 0  # calls whose prompt had to be trimmed to fit the context

    # ------------------------------------------------------------- public API
    async def score(self, request: ScoreRequest) -> Score:
        conversation = _as_conversation(request.parent_context)
        segments: Sequence[str]
        if self.settings.prm_after_answer == "restart" and request.parent_answered:
            # The released rule: a fresh conversation whose first step is the continuation
            # (the continuation prompt stays with it, as in any later segment).
            conversation, segments, first_index = (), request.path[-1:], 1
        elif conversation is None:
            # No usable context: rebuild the whole path, ancestors first.
            conversation = ()
            segments = request.path
            first_index = 0
        else:
            segments = request.path[-1:]
            first_index = len(request.path) - 1
        steps = [
            step
            for offset, segment in enumerate(segments)
            for step in split_steps(
                segment,
                first=first_index + offset == 0,
                boundary=self.step_boundary,
                first_label=self.response_prefix,
            )
        ]
        tokens = _Tokens()
        value = 0.5
        try:
            for step in steps:
                conversation, value = await self._score_step(
                    request.problem, conversation, step, tokens
                )
        except _Failed as exc:
            return Score(
                0.0, None, tokens.input, tokens.output, str(exc), tokens.cached, tokens.clamped
            )
        return Score(
            value, conversation, tokens.input, tokens.output, None, tokens.cached, tokens.clamped
        )

    # -------------------------------------------------------------- internals
    async def _score_step(
        self, problem: str, conversation: Conversation, step: str, tokens: _Tokens
    ) -> tuple[Conversation, float]:
        if not conversation:
            conversation = ({"role": "system", "content": self.system_prompt},)
            user = f"Question: {problem}\n\n{step}"
        else:
            user = step
        conversation = (*conversation, {"role": "user", "content": user})
        index = sum(m["role"] == "user" for m in conversation)
        key = (self.seed, problem, tuple(m["content"] for m in conversation if m["role"] == "user"))
        results = await asyncio.gather(
            *(
                self._sample(conversation, index, derive_seed(*key, i), tokens)
                for i in range(self.settings.samples)
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, _Failed | EngineError):
                    raise _Failed(f"GenPRM step {index}: {result}") from result
                raise result
        samples = [r for r in results if isinstance(r, _Sample)]
        value = sum(s.value for s in samples) / len(samples)
        label = YES if value >= 0.5 else NO
        critique = samples[0].analysis + PRM_JUDGEMENT_PREFIX + label + PRM_JUDGEMENT_SUFFIX
        self.steps_scored += 1
        return (*conversation, {"role": "assistant", "content": critique}), value

    async def _sample(
        self, conversation: Conversation, index: int, seed: int, tokens: _Tokens
    ) -> _Sample:
        opening = PRM_ANALYSIS_PREFIX.format(index=index)
        prompt = await self._fit(conversation, opening, self.settings.max_analysis_tokens)
        analysis = await self._complete(
            prompt,
            Sampling(
                max_tokens=self.settings.max_analysis_tokens,
                stop=(PRM_ANALYSIS_END,),
                temperature=self.settings.temperature,
                seed=seed,
                top_p=self.settings.top_p,
                top_k=self.settings.top_k,
            ),
            tokens=tokens,
            what="analysis",
        )
        text = opening + analysis.text
        prompt = await self._fit(conversation, text + PRM_JUDGEMENT_PREFIX, 1)
        judgement = await self._complete(
            prompt,
            Sampling(
                max_tokens=1,
                stop=(),
                temperature=0.0,
                seed=seed,
                top_logprobs=self.top_logprobs,
            ),
            tokens=tokens,
            what="judgement",
        )
        if not judgement.top_logprobs or not judgement.top_logprobs[0]:
            raise _Failed("the engine returned no log-probabilities for the judgement token")
        return _Sample(text, judgement_score(judgement.top_logprobs[0]))

    async def _render(self, conversation: Conversation, opened: str) -> str:
        """The prompt: `conversation` with `opened` (analysis so far) as the text to continue."""
        if self.settings.analysis_turn == "assistant":
            messages = [*conversation, {"role": "assistant", "content": opened}]
            return await self.engine.render_chat(messages, continue_final=True)
        # GenPRM's format: `opened` continues the last user turn.  Render the chat with a
        # marker at the end of that turn and cut there, so no template has to support it.
        # Each earlier critique is rendered where it was written, at the end of its step's
        # user turn: then this prompt starts with the parent's judgement prompt byte for
        # byte, and the engine's prefix cache serves the whole parent conversation.
        turns = _critiques_in_user_turns(conversation)
        last = turns[-1]
        marked = [*turns[:-1], {**last, "content": last["content"] + _OPEN_TURN}]
        rendered = await self.engine.render_chat(marked, continue_final=False)
        cut = rendered.rfind(_OPEN_TURN)
        if cut < 0:
            raise _Failed("the chat template dropped the end of the last user turn")
        return rendered[:cut] + opened

    async def _fit(self, conversation: Conversation, opened: str, max_tokens: int) -> str:
        """`_render`, trimmed until prompt + `max_tokens` fits the engine's context.

        Oldest critiques first (the judgement stays, the analysis becomes "..."),
        then the oldest steps (the "Step N:" label stays); the last step never.
        """
        prompt = await self._render(conversation, opened)
        limit = self.engine.context_length - max_tokens
        # A token covers at least one byte (+1 for a BOS): short prompts need no tokenizer call.
        if len(prompt.encode()) + 1 <= limit or len(await self.engine.tokenize(prompt)) <= limit:
            return prompt
        trimmed = list(conversation)
        users = [i for i, m in enumerate(trimmed) if m["role"] == "user"]
        candidates = [i for i, m in enumerate(trimmed) if m["role"] == "assistant"]
        candidates += users[1:-1]  # never the question (first turn) nor the step being judged
        for i in candidates:
            trimmed[i] = {**trimmed[i], "content": _shorten(trimmed[i])}
            prompt = await self._render(tuple(trimmed), opened)
            if len(await self.engine.tokenize(prompt)) <= limit:
                self.trimmed_prompts += 1
                return prompt
        return prompt  # still too long: the engine reports the overflow

    async def _complete(
        self, prompt: str, sampling: Sampling, *, tokens: _Tokens, what: str
    ) -> Completion:
        self.calls += 1
        completion = await self.engine.complete(prompt, sampling)
        tokens.add(completion)
        if completion.finish is FinishReason.ERROR:
            raise _Failed(f"{what} call failed: {completion.error or 'engine error'}")
        if completion.finish is FinishReason.CONTEXT_OVERFLOW:
            raise _Failed(
                f"{what} prompt overflows the PRM context "
                f"({completion.input_tokens} prompt tokens, "
                f"context {self.engine.context_length})"
            )
        return completion


def _critiques_in_user_turns(conversation: Conversation) -> list[Message]:
    """The conversation with each critique appended to the user turn before it, as the
    analysis was written when that step was judged (`analysis_turn: user`); the stored
    conversation keeps them as assistant turns."""
    turns: list[Message] = []
    for message in conversation:
        if message["role"] == "assistant" and turns and turns[-1]["role"] == "user":
            turns[-1] = {**turns[-1], "content": turns[-1]["content"] + message["content"]}
        else:
            turns.append(dict(message))
    return turns


def _shorten(message: Message) -> str:
    """A trimmed turn: a critique keeps its judgement, a step its "Step N:" label."""
    content = message["content"]
    if message["role"] == "assistant":
        judgement = content.rfind(PRM_JUDGEMENT_PREFIX)
        opening = content.split(":", 1)[0] + ": " if content.startswith("<analyze>") else ""
        tail = content[judgement:] if judgement >= 0 else ""
        return opening + _TRIMMED_ANALYSIS + " " + tail
    head, _, _ = content.partition(":")
    return (head + ": " if len(head) < 40 else "") + _TRIMMED_ANALYSIS


def _as_conversation(context: Any) -> Conversation | None:
    """`context` if it is a conversation this scorer produced (a list after JSON), else None."""
    if not isinstance(context, tuple | list) or not context:
        return None
    if not all(isinstance(m, Mapping) and {"role", "content"} <= m.keys() for m in context):
        return None
    return tuple(dict(m) for m in context)


__all__ = ["GenPRMScorer", "judgement_score", "split_steps"]
