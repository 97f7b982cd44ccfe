"""The GenPRM scorer on the real embedded SmolLM2 engine (llama.cpp on CPU).

The 135M model's judgements mean little; what is checked is the protocol: the
conversation, the number of engine calls (reuse of ancestor critiques), the
token accounting and errors.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
import pytest_asyncio

from actors.config import GenPRMSettings, ScorerConfig, ServiceConfig
from actors.engines.base import Completion, Sampling, TopLogprobs
from actors.engines.llamacpp import LlamaCppConfig, LlamaCppEngine
from actors.genprm import GenPRMScorer, judgement_score, split_steps
from actors.policy import EnginePolicy
from actors.prompts import PRM_ANALYSIS_PREFIX, PRM_JUDGEMENT_PREFIX, PRM_SYSTEM, PromptConfig
from common.grading import answers_match
from search import parse_search_config, run_search
from search.protocols import FinishReason, Score, ScoreRequest

pytestmark = pytest.mark.integration

# One engine (and one event loop, which its HTTP client is bound to) per module.
on_module_loop = pytest.mark.asyncio(loop_scope="module")

PROBLEM = "What is 12 times 3?"
PROMPTS = Path(__file__).resolve().parents[2] / "configs" / "prompts"
ANALYSIS_TOKENS = 48
# llama.cpp rounds a prompt read in one batch and one read after a cached prefix a little
# differently (its 8-bit activations are quantized per batch): the judgement moved by up
# to 0.033 here between the two, so the bound leaves room for that and no more.
JUDGEMENT_TOLERANCE = 0.05


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[LlamaCppEngine]:
    engine = LlamaCppEngine(LlamaCppConfig(context_length=2048, threads=1, parallel=4))
    yield engine
    await engine.close()


class Recording:
    """The real engine, with every prompt sent to `complete` recorded."""

    def __init__(self, engine: LlamaCppEngine, fail: bool = False) -> None:
        self.engine = engine
        self.name = engine.name
        self.context_length = engine.context_length
        self.prompts: list[str] = []
        self.options: list[Sampling] = []
        self.completions: list[Completion] = []
        self.fail = fail

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        self.prompts.append(prompt)
        self.options.append(sampling)
        if self.fail:
            return Completion("", 0, FinishReason.ERROR, error="injected failure")
        completion = await self.engine.complete(prompt, sampling)
        self.completions.append(completion)
        return completion

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        return await self.engine.render_chat(messages, continue_final=continue_final)

    async def tokenize(self, text: str) -> list[int]:
        return await self.engine.tokenize(text)

    async def close(self) -> None:
        pass


def _request(
    path: tuple[str, ...], context: Any = None, *, full: bool = False, after_answer: bool = False
) -> ScoreRequest:
    return ScoreRequest(PROBLEM, path, context, False, None, full, 0.0, after_answer)


def _roles(score: Score) -> list[str]:
    return [m["role"] for m in score.context]


# ------------------------------------------------------------- pure functions
def test_judgement_score_from_top_logprobs() -> None:
    ln = math.log
    # both labels present: 0.6 / (0.6 + 0.2)
    assert judgement_score((("Yes", ln(0.6)), ("No", ln(0.2)), ("A", ln(0.1)))) == pytest.approx(
        0.75
    )
    # whitespace is stripped and spellings of one label add up: (0.3 + 0.3) / (0.6 + 0.2)
    top: TopLogprobs = ((" Yes", ln(0.3)), ("Yes", ln(0.3)), ("No ", ln(0.2)), ("A", ln(0.1)))
    assert judgement_score(top) == pytest.approx(0.75)
    # "No" missing: it takes the smallest top-k probability, 0.1 -> 0.6 / 0.7
    top = (("Yes", ln(0.6)), ("The", ln(0.3)), ("A", ln(0.1)))
    assert judgement_score(top) == pytest.approx(0.6 / 0.7)
    # "Yes" missing: 0.05 / (0.05 + 0.5)
    top = (("No", ln(0.5)), ("The", ln(0.3)), ("A", ln(0.05)))
    assert judgement_score(top) == pytest.approx(0.05 / 0.55)
    # neither label among the top 20: no information
    assert judgement_score(tuple((str(i), ln(0.04)) for i in range(20))) == 0.5
    assert judgement_score(()) == 0.5


def test_split_steps_keeps_labels_and_continuations() -> None:
    full = " 12 * 3 = 36.\nStep 2: So 36.\nStep 3: The answer is \\boxed{36}."
    assert split_steps(full, first=True) == [
        "Step 1: 12 * 3 = 36.",
        "Step 2: So 36.",
        "Step 3: The answer is \\boxed{36}.",
    ]
    assert split_steps("\nStep 2: 12 + 12 + 12 = 36.", first=False) == [
        "Step 2: 12 + 12 + 12 = 36."
    ]
    wait = "\nBut wait, let me think about the problem again.\nStep 3: Check: 36 / 3 = 12."
    assert split_steps(wait, first=False) == [
        "But wait, let me think about the problem again.\nStep 3: Check: 36 / 3 = 12."
    ]
    assert split_steps(wait + "\nStep 4: Yes.", first=False)[1] == "Step 4: Yes."


# ------------------------------------------------------------------- GenPRM
@on_module_loop
async def test_genprm_reuses_the_parent_critique(engine: LlamaCppEngine) -> None:
    recording = Recording(engine)
    scorer = GenPRMScorer(recording, GenPRMSettings(max_analysis_tokens=ANALYSIS_TOKENS))
    first = await scorer.score(_request((" 12 times 3 means adding 12 three times.",)))
    assert first.error is None and 0.0 <= first.value <= 1.0
    assert scorer.calls == 2  # analysis + judgement
    assert first.input_tokens > 0 and first.output_tokens >= 2
    assert _roles(first) == ["system", "user", "assistant"]
    assert first.context[0]["content"] == PRM_SYSTEM
    assert first.context[1]["content"] == (
        f"Question: {PROBLEM}\n\nStep 1: 12 times 3 means adding 12 three times."
    )
    critique = first.context[-1]["content"]
    assert critique.startswith("<analyze>\nLet's analyze the Paragraph 1 step by step: ")
    assert PRM_JUDGEMENT_PREFIX in critique
    assert critique.endswith(("{Yes}$\n</output>\n", "{No}$\n</output>\n"))

    recording.prompts.clear()
    path = (" 12 times 3 means adding 12 three times.", "\nStep 2: 12 + 12 + 12 = 36.")
    second = await scorer.score(_request(path, first.context))
    assert second.error is None and 0.0 <= second.value <= 1.0
    assert scorer.calls == 4  # only step 2: the parent's critique is reused
    assert len(recording.prompts) == 2
    assert all(critique in prompt for prompt in recording.prompts)
    assert "Paragraph 2 step by step" in recording.prompts[0]
    assert second.context[: len(first.context)] == first.context
    assert second.context[3] == {"role": "user", "content": "Step 2: 12 + 12 + 12 = 36."}
    assert _roles(second) == ["system", "user", "assistant", "user", "assistant"]


@on_module_loop
async def test_genprm_rebuilds_a_missing_context(engine: LlamaCppEngine) -> None:
    scorer = GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=16))
    path = (" 12 times 3 is 36.", "\nStep 2: The answer is \\boxed{36}.")
    score = await scorer.score(_request(path, None))
    assert score.error is None and 0.0 <= score.value <= 1.0
    assert scorer.calls == 4  # both steps, in order, in one conversation
    assert _roles(score) == ["system", "user", "assistant", "user", "assistant"]


@on_module_loop
async def test_genprm_full_generation_scores_every_prefix(engine: LlamaCppEngine) -> None:
    scorer = GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=ANALYSIS_TOKENS))
    text = " 12 * 3 = 36.\nStep 2: Check: 36 / 3 = 12.\nStep 3: So the answer is \\boxed{36}."
    score = await scorer.score(_request((text,), full=True))
    assert score.error is None and 0.0 <= score.value <= 1.0
    assert scorer.calls == 6 and scorer.steps_scored == 3
    users = [m["content"] for m in score.context if m["role"] == "user"]
    assert users == [
        f"Question: {PROBLEM}\n\nStep 1: 12 * 3 = 36.",
        "Step 2: Check: 36 / 3 = 12.",
        "Step 3: So the answer is \\boxed{36}.",
    ]
    assert "Paragraph 3 step by step" in score.context[-1]["content"]


@on_module_loop
async def test_genprm_averages_samples(engine: LlamaCppEngine) -> None:
    scorer = GenPRMScorer(engine, GenPRMSettings(samples=2, max_analysis_tokens=16))
    score = await scorer.score(_request((" 12 times 3 is 36.",)))
    assert score.error is None and 0.0 <= score.value <= 1.0
    assert scorer.calls == 4  # two analyses + two judgements for one step


@on_module_loop
async def test_genprm_engine_failure_is_a_score_error(engine: LlamaCppEngine) -> None:
    scorer = GenPRMScorer(Recording(engine, fail=True), GenPRMSettings(max_analysis_tokens=16))
    score = await scorer.score(_request((" 12 times 3 is 36.",)))
    assert score.error is not None and "injected failure" in score.error
    assert score.value == 0.0 and score.context is None


@on_module_loop
async def test_genprm_context_overflow_is_a_score_error(engine: LlamaCppEngine) -> None:
    scorer = GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=16))
    huge = " 12 times 3 is 36." * 400  # about 3,600 tokens > the 2,048-token context
    score = await scorer.score(_request((huge,)))
    assert score.error is not None and "overflows the PRM context" in score.error
    assert scorer.calls == 1  # the analysis failed; no judgement was asked for


@on_module_loop
async def test_search_end_to_end_with_genprm(engine: LlamaCppEngine) -> None:
    policy = EnginePolicy(engine)
    scorer = GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=32))
    config = parse_search_config({"algorithm": "bg_mcts", "step_max_tokens": 64})
    result = await run_search(PROBLEM, config, policy, scorer, 300, seed=1)
    assert 0 < result.c_used <= 300
    unscored = (FinishReason.ERROR, FinishReason.CONTEXT_OVERFLOW)
    scored = [
        n
        for n in result.tree
        if n.parent_id is not None and n.error is None and n.finish not in unscored
    ]
    assert scored and all(0.0 <= n.q <= 1.0 for n in result.tree)
    # every node costs exactly one step's calls: ancestor critiques came from context
    assert scorer.steps_scored == len(scored)
    assert scorer.calls == 2 * len(scored)
    assert result.tokens.prm_output_tokens > 0


# ------------------------------------------------- GenPRM's own input format
@on_module_loop
async def test_genprm_analysis_continues_the_user_turn(engine: LlamaCppEngine) -> None:
    """GenPRM's training format: the opening follows the step text, no assistant header."""
    step = " 12 times 3 is 36."
    recording = Recording(engine)
    score = await GenPRMScorer(recording, GenPRMSettings(max_analysis_tokens=16)).score(
        _request((step,))
    )
    assert score.error is None
    opening = PRM_ANALYSIS_PREFIX.format(index=1)
    analysis_prompt, judgement_prompt = recording.prompts
    assert analysis_prompt.endswith(f"Step 1:{step}" + opening)
    assert analysis_prompt.count("<|im_start|>assistant") == 0  # SmolLM2's ChatML header
    assert judgement_prompt.startswith(analysis_prompt)
    assert judgement_prompt.endswith(PRM_JUDGEMENT_PREFIX)
    # the critique is still stored as the assistant turn the next step follows
    assert _roles(score) == ["system", "user", "assistant"]

    recording = Recording(engine)
    scorer = GenPRMScorer(
        recording, GenPRMSettings(max_analysis_tokens=16, analysis_turn="assistant")
    )
    assert (await scorer.score(_request((step,)))).error is None
    assert recording.prompts[0].endswith("<|im_start|>assistant\n" + opening)


@pytest.mark.parametrize("turn", ["user", "assistant"])
@on_module_loop
async def test_a_childs_prompt_extends_its_parents_judgement_prompt(
    turn: Literal["user", "assistant"],
) -> None:
    """Whatever `analysis_turn` is, a child's first request starts with its parent's last
    (the judgement) byte for byte, so the engine's prefix cache serves all of it; and the
    judgement read through the cache is the one a cold engine gives for the same request."""
    # GenPRM's engine as configs/local.yaml sets it: a child's analysis shares ~80% of its
    # prompt with its parent's judgement, so a slot holding that is taken at 0.5 (at the
    # policy's 0.9 llama.cpp takes another slot and finds only what its RAM cache holds)
    genprm_engine = LlamaCppEngine(
        LlamaCppConfig(context_length=2048, threads=1, parallel=4, slot_prompt_similarity=0.5)
    )
    try:
        await _child_extends_parent(genprm_engine, turn)
    finally:
        await genprm_engine.close()


async def _child_extends_parent(engine: LlamaCppEngine, turn: Literal["user", "assistant"]) -> None:
    recording = Recording(engine)
    scorer = GenPRMScorer(
        recording, GenPRMSettings(max_analysis_tokens=ANALYSIS_TOKENS, analysis_turn=turn)
    )
    steps = (" 12 times 3 means adding 12 three times.", "\nStep 2: 12 + 12 + 12 = 36.")
    parent = await scorer.score(_request(steps[:1]))
    assert parent.error is None
    parent_judgement = recording.prompts[-1]
    assert parent_judgement.endswith(PRM_JUDGEMENT_PREFIX)
    sent = len(recording.prompts)
    child = await scorer.score(_request(steps, parent.context))
    assert child.error is None
    analysis, judgement = recording.prompts[sent:]
    assert analysis.startswith(parent_judgement)
    assert judgement.startswith(analysis)
    # the cache held the parent's conversation (all but the last few tokens, where the
    # re-tokenized text may join the forced label to what follows)
    known = len(await engine.tokenize(parent_judgement))
    assert recording.completions[sent].cached_tokens >= known - 4
    # the same judgement request on an engine that never saw it: the same top-20
    cold = LlamaCppEngine(LlamaCppConfig(context_length=2048, threads=1, parallel=1))
    try:
        warm = recording.completions[-1].top_logprobs[0]
        fresh = await cold.complete(judgement, recording.options[-1])
    finally:
        await cold.close()
    assert fresh.cached_tokens == 0
    assert judgement_score(fresh.top_logprobs[0]) == pytest.approx(
        judgement_score(warm), abs=JUDGEMENT_TOLERANCE
    )


@on_module_loop
async def test_genprm_sampling_parameters_reach_the_engine(engine: LlamaCppEngine) -> None:
    recording = Recording(engine)
    scorer = GenPRMScorer(recording, GenPRMSettings(max_analysis_tokens=24, temperature=0.6))
    assert (await scorer.score(_request((" 12 times 3 is 36.",)))).error is None
    analysis, judgement = recording.options
    assert (analysis.temperature, analysis.top_p, analysis.top_k) == (0.6, 0.95, 20)
    assert analysis.max_tokens == 24 and analysis.stop == ("</analyze>",)
    assert judgement.max_tokens == 1 and judgement.temperature == 0.0
    assert judgement.top_p is None and judgement.top_k is None and judgement.top_logprobs == 20
    recording = Recording(engine)
    plain = GenPRMScorer(recording, GenPRMSettings(max_analysis_tokens=8, top_p=None, top_k=None))
    assert (await plain.score(_request((" 12 times 3 is 36.",)))).error is None
    assert recording.options[0].top_p is None and recording.options[0].top_k is None


@on_module_loop
async def test_genprm_trims_oldest_critiques_instead_of_failing(engine: LlamaCppEngine) -> None:
    """A long critique history is cut for the call (oldest first); the stored one is whole."""
    long_critique = (
        PRM_ANALYSIS_PREFIX.format(index=1)
        + "The student multiplies twelve by three, which is right. " * 40
        + PRM_JUDGEMENT_PREFIX
        + "Yes}$\n</output>\n"
    )
    context = (
        {"role": "system", "content": PRM_SYSTEM},
        {"role": "user", "content": f"Question: {PROBLEM}\n\nStep 1: 12 times 3 is 36."},
        {"role": "assistant", "content": long_critique},
        {"role": "user", "content": "Step 2: 36 is the answer."},
        {"role": "assistant", "content": long_critique.replace("Paragraph 1", "Paragraph 2")},
    )
    path = (" 12 times 3 is 36.", "\nStep 2: 36 is the answer.", "\nStep 3: \\boxed{36}.")
    recording = Recording(engine)
    scorer = GenPRMScorer(recording, GenPRMSettings(max_analysis_tokens=16))
    untrimmed = len(await engine.tokenize(await scorer._render(context, "x")))
    recording.context_length = untrimmed  # the whole history no longer fits with 16 new tokens
    score = await scorer.score(_request(path, context))
    assert score.error is None and scorer.trimmed_prompts >= 1
    sent = recording.prompts[0]
    assert "Paragraph 1 step by step: ... " in sent  # the oldest critique was cut ...
    assert sent.count("which is right") == 40  # ... the newer one was not
    assert sent.count("**Judgement**: $\\boxed{Yes}") == 2  # both judgements stay
    assert score.context[: len(context)] == context  # the stored history is whole
    assert len(await engine.tokenize(sent)) + 16 <= untrimmed


@on_module_loop
async def test_genprm_restarts_after_an_answer_when_asked(engine: LlamaCppEngine) -> None:
    first = await GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=8)).score(
        _request((" 12 times 3 is \\boxed{36}.",))
    )
    wait = "\nBut wait, let me think about the problem again.\nStep 2: 3 times 12 is 36."
    path = (" 12 times 3 is \\boxed{36}.", wait)
    restart = GenPRMScorer(
        engine, GenPRMSettings(max_analysis_tokens=8, prm_after_answer="restart")
    )
    score = await restart.score(_request(path, first.context, after_answer=True))
    assert score.error is None and _roles(score) == ["system", "user", "assistant"]
    assert score.context[1]["content"] == f"Question: {PROBLEM}\n\n{wait.strip()}"
    keep = GenPRMScorer(engine, GenPRMSettings(max_analysis_tokens=8))  # `continue`, the default
    score = await keep.score(_request(path, first.context, after_answer=True))
    assert _roles(score) == ["system", "user", "assistant", "user", "assistant"]


# ------------------------------------------------------------- prompts from config
def test_prompts_load_inline_or_from_a_file(tmp_path: Any) -> None:
    path = tmp_path / "policy.txt"
    path.write_text("Solve it, then box it.\n{problem}", encoding="utf-8")
    config = ServiceConfig.model_validate({"prompts": {"policy_instruction_file": str(path)}})
    assert config.prompts.policy_instruction == "Solve it, then box it.\n{problem}"
    scorer = ScorerConfig.model_validate({"prompts": {"prm_system": "Judge each step."}})
    assert scorer.prompts.prm_system == "Judge each step."
    assert ServiceConfig().prompts == PromptConfig()  # ours by default
    paper = PromptConfig.model_validate(  # App. E's prompts, shipped as files
        {
            "policy_instruction_file": str(PROMPTS / "appendix-e-policy.txt"),
            "prm_system_file": str(PROMPTS / "appendix-e-prm-system.txt"),
        }
    )
    assert paper.policy_instruction.format(problem="P?").endswith("following question: P?")
    assert paper.prm_system.startswith("You are a math teacher. Your task is to review")
    bad = [
        ({"policy_instruction_file": str(tmp_path / "missing.txt")}, "policy_instruction_file"),
        ({"policy_instruction": "no field here"}, "policy_instruction: has no {problem}"),
        ({"policy_instruction": "{problem} {x}"}, "policy_instruction: must be a template"),
        ({"prm_system": "a", "prm_system_file": str(path)}, "prm_system: give it inline"),
    ]
    for prompts, message in bad:
        with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
            ServiceConfig.model_validate({"prompts": prompts})


@on_module_loop
async def test_configured_prompts_reach_the_model(engine: LlamaCppEngine) -> None:
    policy = EnginePolicy(engine, instruction="Answer in one line: {problem}")
    prompt = await policy.render(PROBLEM, "Step 1:")
    assert f"Answer in one line: {PROBLEM}" in prompt and "Example problem" not in prompt
    recording = Recording(engine)
    scorer = GenPRMScorer(
        recording, GenPRMSettings(max_analysis_tokens=8), system_prompt="Judge each step."
    )
    score = await scorer.score(_request((" 12 times 3 is 36.",)))
    assert (
        score.context[0]["content"] == "Judge each step."
        and "Judge each step." in (recording.prompts[0])
    )


# ------------------------------------------------------------------ grading
@on_module_loop
async def test_answers_match_with_math_verify() -> None:
    assert await answers_match("\\frac{1}{2}", "0.5")
    assert await answers_match("4", "4")
    assert not await answers_match("5", "4")
    assert not await answers_match(None, "4")
    # a comparison that runs out of time is no match.  timeout 0 times out before the
    # worker thread can report back (1e-6 raced a warm, cached math-verify and lost once)
    assert not await answers_match("\\frac{1}{2}", "0.5", timeout_s=0)
