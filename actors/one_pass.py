"""A one-pass (discriminative) PRM as a `search.Scorer`: one forward pass per node.

GenPRM (`actors.genprm`) writes a critique of every step; a one-pass PRM reads the whole
path once and gives every step a value at the token that closes it
(`actors.engines.base.StepScoringEngine`, laid out by `actors.engines.step_layout`).
What this module decides is which text the engine reads, so that it is the text the
model was trained on (`actors.config.OnePassSettings`):

* the assistant text is the search's prefilled first label ("Step 1:", which no node's
  text holds) followed by every node's text on the path, the inserted text included;
* `cut_after_answer`: an answered node's text ends where its answer statement ends
  (`ScoreRequest.answer_end`, which the search driver sets with the run's answer
  extraction), as the training rows end (`pipeline.records.training_text`); what a
  small model writes after its answer is not scored;
* `steps: lines`: the lines of that text in the training rows' form
  (`search.step_text.text_lines`: trailing white space dropped, blank lines folded),
  one step per line, exactly the steps of a ``prm`` record; `step_labels`: its
  "Step N:" paragraphs, as GenPRM reads a path (`search.step_text.split_steps`);
* `prompt_format: plain`: the problem text (a ``prm`` record's prompt); `chat`: the
  model's chat template with the system prompt and the problem as the user turn and
  the assistant header open (Qwen2.5-Math-PRM's format), rendered once per problem.

A node's Q is `node_value` of its path's step values (`last`: its own last step).  The
whole sequence is PRM input; nothing is decoded, so `Score.output_tokens` is 0.  The
engine reports an error (a path longer than its context, a dead server) as an error
`StepValues`; it becomes `Score(0.0, error=...)`, which the driver keeps as a failed
node, never expanded, and never a crash.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from actors.config import OnePassSettings
from actors.engines.base import StepScoringEngine, StepValues
from actors.errors import EngineError
from search.protocols import ClampedCounts, Score, ScoreRequest
from search.step_text import split_steps, text_lines

# Rendered chat prompts kept per scorer: a few thousand problems' prompts are a few MB;
# a search asks for one problem over and over, so a small cache serves nearly every call.
_PROMPTS_CACHED = 1024


def node_value(values: Sequence[float], rule: str) -> float:
    """A node's Q from its path's step values, in path order (`OnePassSettings.node_value`)."""
    if rule == "last":
        return values[-1]
    if rule == "min":
        return min(values)
    if rule == "mean":
        return sum(values) / len(values)
    if rule == "product":
        return math.prod(values)
    raise ValueError(f"scorer.one_pass.node_value: unknown rule {rule!r}")


class OnePassScorer:
    """`search.Scorer` on a `StepScoringEngine` (rules in the module docstring).

    `calls` counts engine `score_steps` calls, `steps_scored` the steps they scored.
    `response_prefix` is the search's prefilled first label (`search.response_prefix`).
    """

    def __init__(
        self,
        engine: StepScoringEngine,
        settings: OnePassSettings | None = None,
        *,
        response_prefix: str = "Step 1:",
        step_boundary: str = "\nStep",
        name: str | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings or OnePassSettings()
        self.response_prefix = response_prefix
        self.step_boundary = step_boundary
        self.name = name or f"one_pass:{engine.name}"
        self.calls = 0
        self.steps_scored = 0
        self._prompts: OrderedDict[str, str] = OrderedDict()

    async def score(self, request: ScoreRequest) -> Score:
        steps = self.steps(request)
        try:
            prompt = await self.prompt(request.problem)
        except EngineError as exc:
            return Score(0.0, error=f"one-pass PRM: the chat template failed: {exc}")
        self.calls += 1
        try:
            result = await self.engine.score_steps(prompt, steps)
        except EngineError as exc:  # the contract says an error result; a dead engine raises
            return Score(0.0, error=f"one-pass PRM: {exc}")
        problem = _problem(result, len(steps))
        # counts the engine reported wrong (clamped as they entered): the run counts them
        clamped = ClampedCounts.of(result.count_faults)
        if problem is not None:
            error = f"one-pass PRM: {problem}"
            return Score(0.0, None, result.input_tokens, 0, error, result.cached_tokens, clamped)
        self.steps_scored += len(steps)
        value = node_value(result.values, self.settings.node_value)
        value = min(max(value, 0.0), 1.0)
        return Score(value, None, result.input_tokens, 0, None, result.cached_tokens, clamped)

    def steps(self, request: ScoreRequest) -> list[str]:
        """The steps the engine reads for `request`'s node (its whole path)."""
        segments = list(request.path)
        cut = request.answer_end
        if self.settings.cut_after_answer and request.answered and cut is not None and segments:
            segments[-1] = segments[-1][:cut]
        if self.settings.steps == "lines":
            return text_lines(self.response_prefix + "".join(segments))
        return [
            step
            for index, segment in enumerate(segments)
            for step in split_steps(
                segment,
                first=index == 0,
                boundary=self.step_boundary,
                first_label=self.response_prefix,
            )
        ]

    async def prompt(self, problem: str) -> str:
        """The text before the steps: the problem, or the chat up to the assistant's turn."""
        if self.settings.prompt_format == "plain":
            return problem
        prompt = self._prompts.get(problem)
        if prompt is None:
            messages = [
                {"role": "system", "content": self.settings.system_prompt},
                {"role": "user", "content": problem},
            ]
            prompt = await self.engine.render_chat(messages, continue_final=False)
            self._prompts[problem] = prompt
            if len(self._prompts) > _PROMPTS_CACHED:
                self._prompts.popitem(last=False)
        else:
            self._prompts.move_to_end(problem)
        return prompt


def _problem(result: StepValues, steps: int) -> str | None:
    """Why `result` gives no Q (None: it does)."""
    if result.error is not None:
        return result.error
    if len(result.values) != steps:
        return f"the engine returned {len(result.values)} values for {steps} steps"
    if not all(math.isfinite(v) for v in result.values):
        return f"the engine returned a value that is not a number: {list(result.values)}"
    return None


__all__ = ["OnePassScorer", "node_value"]
