"""The one-pass scorer: which text the PRM reads, and how its step values become Q.

The central check: for every answered node of a real search, the steps the scorer sends
are exactly the steps of that trajectory's ``prm`` training row (`training_text(...).lines`),
cut after the answer the way the run's answer extraction reads it, so a PRM trained on
the rows is served text laid out as it learned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from actors.config import OnePassSettings
from actors.engines.base import StepScoringEngine, StepValues
from actors.errors import EngineError
from actors.one_pass import OnePassScorer, node_value
from pipeline.records.training_text import training_text
from search import parse_search_config, run_search
from search.answers import AnswerExtraction
from search.protocols import Generation, GenerationRequest, Score, ScoreRequest
from search.scripted import ScriptedPolicy
from search.step_text import split_steps, tidy


@dataclass
class StandInPRM:
    """Stands in for a model, so the layout and Q rules can be checked exactly: a step's
    value is what `value` says of its text, every call is recorded, a sequence is one
    token per word (prompt words, then each step's words and its separator), and a
    sequence longer than `context_length` is refused as a real engine refuses it."""

    value: Callable[[str], float] = lambda step: (len(step) % 10) / 10
    context_length: int = 100_000
    cached: int = 0
    name: str = "stand-in"
    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    renders: int = 0

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        self.calls.append((prompt, list(steps)))
        tokens = len(prompt.split()) + sum(len(s.split()) + 1 for s in steps)
        if tokens > self.context_length:
            return StepValues((), tokens, error=f"{tokens} tokens > context {self.context_length}")
        return StepValues(tuple(self.value(s) for s in steps), tokens, self.cached)

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        self.renders += 1
        turns = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
        return turns + ("" if continue_final else "<assistant>")

    async def tokenize(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]

    async def close(self) -> None:
        return None


def test_the_stand_in_is_a_step_scoring_engine() -> None:
    assert isinstance(StandInPRM(), StepScoringEngine)


TAIL = "\n\n  \nProblem: Tom has 3 apples and eats one. The answer is 2.  "


@dataclass
class TalkativePolicy:
    """The scripted policy, but writing as SmolLM2 does: blank lines holding spaces,
    trailing spaces, and a new problem after its answer (the text training rows cut)."""

    inner: ScriptedPolicy
    name: str = "talkative"

    async def count_tokens(self, text: str) -> int:
        return await self.inner.count_tokens(text)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        out = []
        for g in await self.inner.generate(request):
            text = g.text.replace(" w0.2 ", " w0.2   \n   \n\t\nw0.2b ")
            if "\\boxed" in text:
                text += TAIL
            out.append(Generation(text, g.output_tokens, g.finish, g.input_tokens, g.error))
        return out


@dataclass
class Recording:
    """The scorer under test, with each request it answered kept by its path."""

    inner: OnePassScorer
    name: str = "recording"
    requests: dict[tuple[str, ...], ScoreRequest] = field(default_factory=dict)

    async def score(self, request: ScoreRequest) -> Score:
        self.requests[request.path] = request
        return await self.inner.score(request)


@pytest.mark.parametrize("extraction", ["boxed", "last_number"])
async def test_an_answered_node_is_scored_on_its_prm_rows_steps(extraction: str) -> None:
    engine = StandInPRM()
    scorer = Recording(OnePassScorer(engine, OnePassSettings()))
    config = parse_search_config(
        {"algorithm": "bg_mcts", "answer_extraction": extraction, "step_max_tokens": 60}
    )
    policy = TalkativePolicy(ScriptedPolicy(seed=3, step_tokens=(3, 8), p_answer=0.4))
    result = await run_search("What is 1 + 1?", config, policy, scorer, budget=400, seed=5)
    tree = result.tree
    answered = [n for n in tree.nodes if n.answered]
    unanswered = [n for n in tree.nodes if n.parent_id is not None and not n.answered]
    assert len(answered) >= 3 and unanswered
    assert any(TAIL in n.text for n in answered)  # there is text after an answer to cut
    assert any("w0.2b" in n.text for n in tree.nodes)  # and blank lines with spaces
    for node in answered:
        request = scorer.requests[tree.path_segments(node)]
        steps = scorer.inner.steps(request)
        assert steps == training_text(tree, node, AnswerExtraction(extraction)).lines
        assert not any(line.strip() == "" for line in steps)
        assert "Problem: Tom" not in steps[-1]  # its own tail is cut (an ancestor's stays)
    for node in unanswered:  # the prm rows of unanswered branches: the whole path, tidied
        request = scorer.requests[tree.path_segments(node)]
        assert request.answer_end is None
        assert scorer.inner.steps(request) == tidy(tree.assistant_text(node)).split("\n")
    assert all(prompt == "What is 1 + 1?" for prompt, _ in engine.calls)
    # Q of a node is its own last line's value
    for node in (*answered, *unanswered):
        steps = scorer.inner.steps(scorer.requests[tree.path_segments(node)])
        assert node.q == engine.value(steps[-1])


def _request(*path: str, answered: bool = False, end: int | None = None) -> ScoreRequest:
    return ScoreRequest("p", path, None, answered, None, False, 1e9, answer_end=end)


# a line keeps its own trailing spaces, as the prm rows' steps do; the text's end does not
VALUES = {"Step 1: a ": 0.9, "b": 0.5, "c": 0.2}


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("last", 0.2), ("min", 0.2), ("mean", (0.9 + 0.5 + 0.2) / 3), ("product", 0.9 * 0.5 * 0.2)],
)
async def test_q_is_the_rule_over_the_paths_step_values(rule: str, expected: float) -> None:
    engine = StandInPRM(value=VALUES.__getitem__)
    scorer = OnePassScorer(engine, OnePassSettings(node_value=rule))  # type: ignore[arg-type]
    score = await scorer.score(_request(" a \n\n  \nb", "\nc  \n"))
    assert engine.calls == [("p", ["Step 1: a ", "b", "c"])]
    # input tokens: the prompt (1) and each step with its separator (3 + 1, 1 + 1, 1 + 1)
    assert score == Score(pytest.approx(expected), None, 1 + 4 + 2 + 2, 0)
    assert node_value([0.3], rule) == pytest.approx(0.3)


async def test_an_answered_node_ends_after_its_answer_unless_told_otherwise() -> None:
    segment = "\nStep 2: so it is $\\boxed{2}$. Problem: next one"
    end = segment.index("Problem") - 1
    cut = OnePassScorer(StandInPRM())
    assert cut.steps(_request(" a", segment, answered=True, end=end)) == [
        "Step 1: a",
        "Step 2: so it is $\\boxed{2}$.",
    ]
    assert cut.steps(_request(" a", segment, answered=False, end=end))[-1].endswith("next one")
    keep = OnePassScorer(StandInPRM(), OnePassSettings(cut_after_answer=False))
    assert keep.steps(_request(" a", segment, answered=True, end=end))[-1].endswith("next one")


async def test_step_labels_reads_the_path_as_genprm_does() -> None:
    engine = StandInPRM()
    scorer = OnePassScorer(engine, OnePassSettings(steps="step_labels"))
    full = " 2 + 2 = 4.\nStep 2: 4 x 3 = 12.\n\nStep 3: so 12."
    wait = "\nBut wait, let me think again.\nStep 2: 4 x 3 = 13."
    await scorer.score(_request(full, wait))
    expected = [*split_steps(full, first=True), *split_steps(wait, first=False)]
    assert engine.calls[0][1] == expected
    assert expected == [
        "Step 1: 2 + 2 = 4.",
        "Step 2: 4 x 3 = 12.",
        "Step 3: so 12.",
        "But wait, let me think again.\nStep 2: 4 x 3 = 13.",
    ]


async def test_the_chat_prompt_is_rendered_once_per_problem() -> None:
    engine = StandInPRM()
    settings = OnePassSettings(prompt_format="chat", system_prompt="Be right.")
    scorer = OnePassScorer(engine, settings)
    for problem in ("p", "p", "q", "p"):
        await scorer.score(ScoreRequest(problem, (" a",), None, False, None, False, 1e9))
    assert engine.renders == 2
    assert engine.calls[0][0] == "<system>Be right.</system><user>p</user><assistant>"
    assert engine.calls[2][0] == "<system>Be right.</system><user>q</user><assistant>"


@dataclass
class Raising(StandInPRM):
    """An engine that cannot serve at all (a dead server)."""

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        raise EngineError("the PRM server is gone")


@pytest.mark.parametrize(
    ("engine", "error"),
    [
        (StandInPRM(context_length=3), "tokens > context 3"),
        (StandInPRM(value=lambda s: math.nan), "not a number"),
        (Raising(), "the PRM server is gone"),
    ],
)
async def test_an_engine_failure_is_an_error_score_never_a_crash(
    engine: StandInPRM, error: str
) -> None:
    score = await OnePassScorer(engine).score(_request(" one two three", "\nStep 2: four"))
    assert score.value == 0.0 and score.output_tokens == 0
    assert score.error is not None and error in score.error


async def test_a_wrong_number_of_values_is_an_error() -> None:
    class Short(StandInPRM):
        async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
            return StepValues((0.5,), 9)

    score = await OnePassScorer(Short()).score(_request(" a", "\nb"))
    assert score.error == "one-pass PRM: the engine returned 1 values for 2 steps"
    assert score.input_tokens == 9


async def test_values_outside_0_1_are_clamped() -> None:
    high = await OnePassScorer(StandInPRM(value=lambda s: 1.25)).score(_request(" a"))
    low = await OnePassScorer(StandInPRM(value=lambda s: -0.5)).score(_request(" a"))
    assert (high.value, low.value) == (1.0, 0.0)
    assert high.error is None and low.error is None
