"""A simulated reasoning environment with a ground truth: judge search algorithms in seconds.

`ScriptedPolicy` (search/scripted.py) checks the search core's mechanics, but
its answers are arbitrary, so it cannot say whether one algorithm *finds the
right answer* more often than another.  This module adds a hidden truth:

* **Problems** (`simulated_problems`) have a reference answer, a few
  problem-specific *distractors* (the wrong answers that wrong paths reach,
  so majority voting can be fooled) and a hidden difficulty
  delta ~ Beta(`difficulty_alpha`, `difficulty_beta`).  The problem text
  carries all of it, e.g. ``sim problem 17 [d=0.4310 a=812 x=813,97,405]``,
  so `SimPolicy` and `SimScorer` stay stateless with respect to problems,
  like a real engine behind `search.protocols`.
* **Steps** (`SimPolicy`).  Every step is right or wrong.  A right path goes
  wrong at step j with probability
  ``e(delta, j) = min(max_step_error, step_error_max * delta**step_error_power
  * (1 + depth_error_growth * (j - 1)))``; a wrong path stays wrong (errors
  propagate) until the search continues an answered node with the
  continuation prompt (paper Sec. 4.1, "But wait, ..."), whose first step
  repairs a wrong path with probability `p_repair` and breaks a right one
  with probability `p_break`.  The hidden state is written into each step as
  a short tag ``[s<j> ok|err <step tokens> <path tokens>]``, so the next
  request (and the PRM) read it back from the last tag in O(1), and step
  texts stay a few words long.  (The search core never reads texts, so the
  tags and the answer in the problem text cannot help an algorithm cheat.)
* **Answers** arrive with a per-step hazard: from step `min_answer_steps` on,
  a step is the final one with probability ``1 / (mean_answer_steps -
  min_answer_steps + 1)``, so a solution takes `mean_answer_steps` steps on
  average (7 by default).  An answering step ends with the paper's answer
  sentence ("... the final answer is $\\boxed{ANSWER}$.") and a natural end
  of sequence, which `search.answers.is_answered` recognises (App. A).  A
  right path answers the reference, a wrong one a distractor drawn with
  `distractor_weights`.
* **Tokens**.  A step's length is lognormal with median `step_tokens_median`
  and log-sd `step_tokens_sigma`, at least `step_tokens_min`; the step
  boundary ("\\nStep") or the end-of-sequence token adds one token, as a real
  engine generates it.  `output_tokens` never exceeds `request.max_tokens`: a
  step that does not fit is cut there (finish LENGTH, no answer sentence).
  `count_tokens` counts words, which the driver uses only for the text it
  inserts itself (the continuation prompt).
* **The PRM** (`SimScorer`) mimics GenPRM's saturated, near-binary scores
  (paper App. K: p10 ~ 2e-3, p25 ~ 0.97, p50 ~ 0.997 on MATH500 L5): a node
  on a right path scores *high* (1 - 10**U(prm_high_log10)) unless a false
  negative (`prm_false_negative`) makes it *low* (10**U(prm_low_log10)); a
  node on a wrong path scores low unless a false positive
  (`prm_false_positive`).  Scores are a deterministic function of the path.

Request shapes mirror `ScriptedPolicy` and the driver: a sequential request
(``request.stop`` non-empty) writes ONE step and ends at the boundary
(finish STOP_STRING, boundary excluded from the text, which the driver puts
back before the next step) unless that step answers (finish EOS); a
full-generation request (``stop`` empty) writes steps until an answer or
``max_tokens`` (finish LENGTH).  At temperature 0 a request is
deterministic in its text (greedy decoding): `request.seed` and the choice
index are ignored, so all n choices agree.

Usage (`SimProblem.is_correct` is the ground truth)::

    problems = simulated_problems(200, seed=0)
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search(problems[0].problem, config, SimPolicy(), SimScorer(), 30_000)
    problems[0].is_correct(result.chosen_answer)

Cost: a choice takes about 5 us and a score about 4 us (one blake2b digest,
a few float operations, the result dataclass), against roughly 60-100 us of
driver, algorithm and asyncio work per node.

Determinism: every draw is read from a blake2b digest of (environment seed,
request seed, problem, assistant prefix, choice index, step index) for the
policy and of (environment seed, parent path hash, node text) for the PRM, a
counter-based generator: the same seeds give identical trees in any process,
and a choice never depends on how many choices its request asked for.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from search.config import CostWeights
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest
from search.scorer_kinds import GENPRM, SCORER_KIND_NAMES, ScorerKindName, decodes

_PROBLEM = re.compile(r"\[d=([0-9.]+) a=([^ \]]+) x=([^\]]*)\]")
_DEFAULT_COST = CostWeights()
_TAG_OPEN = "[s"
_BOXED = "boxed"


@dataclass(frozen=True, slots=True)
class SimParams:
    """Every knob of the simulated environment, with its default.

    The defaults were chosen BEFORE running any search algorithm on this
    environment for its accuracy, and are not tuned to favour any method.
    They aim at the paper's main setting (Qwen2.5-7B-Instruct on MATH500
    Level 5, GenPRM-7B), measured on 1,500 problems x 40 sampled solutions:

    * one sampled solution is right for 47% of problems on average (the
      paper's greedy accuracy is .49); 20 samples contain a right one for 81%
      (repeated sampling reaches .70 at B=30K with a noisy chooser); 15% of
      problems are nearly impossible (no right solution in 40), 23% easy
      (more than 90% right);
    * a solution takes 7.0 steps and 1,260 tokens on average (median 1,020),
      so B=30K holds about 24 full solutions or 165 sequential nodes;
    * `prm_false_positive` is the one value set from a search's *scores* (never
      its accuracy): with 0.3, the Q percentiles over BG-MCTS's nodes at
      B=30K had p25 = 0.06, far below App. K's MATH500-L5 row; with 0.5 they
      are p10 6e-4, p25 0.96, p50 0.993, p75 0.999 (App. K: 2e-3, 0.974,
      0.997, 0.999).  GenPRM is lenient: "near-1 scores even to early partial
      solutions" (the paper's analysis of LiteSearch).
    """

    # --- problems
    difficulty_alpha: float = 1.0  # delta ~ Beta(alpha, beta); (1, 1) is uniform on [0, 1]
    difficulty_beta: float = 1.0
    n_distractors: int = 3  # wrong answers per problem
    # How often a wrong path lands on each distractor: a common mistake dominates,
    # so wrong paths agree with each other and can outvote the right answer.
    distractor_weights: tuple[float, ...] = (0.6, 0.3, 0.1)
    # --- steps: e(delta, j) = min(max_step_error, step_error_max * delta**step_error_power
    #     * (1 + depth_error_growth * (j - 1)))
    step_error_max: float = 0.9  # per-step error at delta = 1, step 1
    step_error_power: float = 3.0  # easy problems (small delta) almost never go wrong
    depth_error_growth: float = 0.03  # +3% relative error per step: long paths drift
    max_step_error: float = 0.95
    # --- continuation after an answer ("But wait, let me think about the problem again.")
    p_repair: float = 0.15  # a wrong path becomes right at the first step after the prompt
    p_break: float = 0.05  # a right path becomes wrong there
    # --- answers: per-step hazard 1 / (mean_answer_steps - min_answer_steps + 1)
    mean_answer_steps: float = 7.0
    min_answer_steps: int = 3  # no path answers before this step (absolute step index)
    # --- tokens per step: lognormal (median, log-sd), at least step_tokens_min
    step_tokens_median: float = 150.0  # mean ~180 tokens: ~1,260 tokens per solution
    step_tokens_sigma: float = 0.6
    step_tokens_min: int = 10
    prompt_tokens: int = 300  # instruction + worked example + problem (policy input)
    # --- PRM (GenPRM-like, App. K)
    prm_false_positive: float = 0.5  # P(high score | node on a wrong path)
    prm_false_negative: float = 0.05  # P(low score | node on a right path)
    prm_high_log10: tuple[float, float] = (-3.7, -1.3)  # high = 1 - 10**U(lo, hi)
    prm_low_log10: tuple[float, float] = (-5.0, -1.0)  # low = 10**U(lo, hi)
    prm_prompt_tokens: int = 400  # GenPRM system prompt + problem
    prm_critique_tokens: int = 320  # one step's analysis + judgement (PRM output)
    # How the PRM is charged (see `SimScorer`): genprm = a generative PRM that writes a
    # critique per step and re-reads its growing conversation (the paper's GenPRM);
    # one_pass = a discriminative PRM that reads prompt + path in one forward pass and
    # writes nothing (Qwen2.5-Math-PRM; `scorer.kind: one_pass`).  Scores are the same.
    prm_cost: ScorerKindName = GENPRM
    # one_pass: its prompt, [bos] + chat template + system turn + a MATH problem (about
    # 120 tokens for Qwen2.5-Math-PRM); not GenPRM's long system prompt
    prm_one_pass_prompt_tokens: int = 120
    # Per-score caps (a context window, a bounded analysis): the driver's default
    # per-score reserve, so charging PRM tokens never makes a score overspend it.
    prm_max_input_tokens: int = _DEFAULT_COST.prm_reserve_input_tokens  # 4096
    prm_max_output_tokens: int = _DEFAULT_COST.prm_reserve_output_tokens  # 1024

    def __post_init__(self) -> None:
        for name in ("distractor_weights", "prm_high_log10", "prm_low_log10"):
            # YAML and JSON give lists; keep the value frozen (and hashable)
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.difficulty_alpha <= 0 or self.difficulty_beta <= 0:
            raise ValueError("difficulty_alpha and difficulty_beta must be > 0")
        if self.n_distractors < 1 or len(self.distractor_weights) != self.n_distractors:
            raise ValueError("need n_distractors >= 1 and one weight per distractor")
        if self.mean_answer_steps < self.min_answer_steps or self.min_answer_steps < 1:
            raise ValueError("need 1 <= min_answer_steps <= mean_answer_steps")
        for name in ("p_repair", "p_break", "prm_false_positive", "prm_false_negative"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")
        if min(self.distractor_weights) < 0 or sum(self.distractor_weights) <= 0:
            raise ValueError("distractor_weights must be >= 0 with a positive sum")
        if self.step_tokens_median < 1 or self.step_tokens_min < 1 or self.step_tokens_sigma < 0:
            raise ValueError("step lengths must be at least one token, with sigma >= 0")
        for name in ("prm_high_log10", "prm_low_log10"):
            lo, hi = getattr(self, name)
            if not lo <= hi <= 0:
                raise ValueError(f"{name} must be a range (lo, hi) with lo <= hi <= 0")
        if self.prm_cost not in SCORER_KIND_NAMES:
            kinds = " or ".join(map(repr, SCORER_KIND_NAMES))
            raise ValueError(f"prm_cost must be {kinds}, got {self.prm_cost!r}")
        if self.prm_one_pass_prompt_tokens < 0:
            raise ValueError("prm_one_pass_prompt_tokens must be >= 0")

    @property
    def answer_hazard(self) -> float:
        """P(a step answers | step index >= min_answer_steps): mean steps = mean_answer_steps."""
        return 1.0 / (self.mean_answer_steps - self.min_answer_steps + 1.0)

    def step_length(self, u1: float, u2: float) -> int:
        """A lognormal step length (Box-Muller from two uniforms), at least step_tokens_min."""
        z = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
        tokens = round(self.step_tokens_median * math.exp(self.step_tokens_sigma * z))
        return max(self.step_tokens_min, tokens)

    def step_error(self, difficulty: float, step: int) -> float:
        """e(delta, j): the probability that step j of a right path goes wrong."""
        base = self.step_error_max * math.pow(difficulty, self.step_error_power)
        return min(self.max_step_error, base * (1.0 + self.depth_error_growth * (step - 1)))


@dataclass(frozen=True, slots=True)
class SimProblem:
    """One simulated problem; `problem` is the text every request carries."""

    problem_id: str
    problem: str
    reference: str
    difficulty: float
    distractors: tuple[str, ...]

    def is_correct(self, answer: str | None) -> bool:
        """Ground truth for a search's chosen answer."""
        return answer is not None and answer.strip() == self.reference


def simulated_problems(n: int, seed: int, params: SimParams | None = None) -> list[SimProblem]:
    """`n` problems with difficulty delta ~ Beta(alpha, beta); same seed, same problems.

    Answers and distractors are distinct integers in [10, 999].
    """
    params = params or SimParams()
    rng = random.Random(_seed("problems", seed))
    problems = []
    for i in range(n):
        # rounded as written in the text, so the ground truth is what the policy reads
        difficulty = round(rng.betavariate(params.difficulty_alpha, params.difficulty_beta), 4)
        values = rng.sample(range(10, 1000), params.n_distractors + 1)
        reference, distractors = str(values[0]), tuple(str(v) for v in values[1:])
        text = f"sim problem {i} [d={difficulty:.4f} a={reference} x={','.join(distractors)}]"
        problems.append(SimProblem(f"sim-{seed}-{i}", text, reference, difficulty, distractors))
    return problems


@dataclass(frozen=True, slots=True)
class _Hidden:
    difficulty: float
    reference: str
    distractors: tuple[str, ...]

    def distractor(self, u: float, params: SimParams) -> str:
        """The wrong answer a wrong path reaches, drawn with `distractor_weights` (u ~ U[0, 1))."""
        weights = params.distractor_weights
        target = u * sum(weights)
        for answer, weight in zip(self.distractors, weights, strict=True):
            target -= weight
            if target < 0:
                return answer
        return self.distractors[-1]


@lru_cache(maxsize=4096)
def _hidden(problem: str) -> _Hidden:
    """The hidden state written into a problem's text (a pure function, so cached)."""
    match = _PROBLEM.search(problem)
    if match is None:
        raise ValueError(f"not a simulated problem (no hidden state): {problem[:80]!r}")
    return _Hidden(float(match[1]), match[2], tuple(match[3].split(",")))


class _PathState(NamedTuple):
    """What the last step tag of a text says (see `_tag`); a tuple, cheap to build."""

    step: int  # index j of the last step (0: nothing generated yet)
    ok: bool  # the path is right so far
    answered: bool  # the last step ended with the answer sentence
    path_tokens: int  # tokens generated along the path so far


_START = _PathState(0, True, False, 0)


def _tag(step: int, ok: bool, step_tokens: int, path_tokens: int) -> str:
    """The hidden state of one step: ``[s<j> ok|err <step tokens> <path tokens>]``.

    Carrying the running path total makes every read O(1): the policy's
    prompt size and the PRM's input size come from the last tag alone.
    """
    return f"[s{step} {'ok' if ok else 'err'} {step_tokens} {path_tokens}]"


def _path_state(text: str) -> _PathState:
    """Read the last step tag of `text`: one rfind, no scan of the whole path."""
    start = text.rfind(_TAG_OPEN)
    if start == -1:
        return _START
    end = text.find("]", start)
    step, state, _, path_tokens = text[start + 2 : end].split(" ")
    return _PathState(int(step), state == "ok", _BOXED in text[end:], int(path_tokens))


def _digest(*parts: object) -> bytes:
    """16 stable bytes (blake2b; no Python hash salt), fast for short texts."""
    return hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()


def _seed(*parts: object) -> int:
    """A stable 63-bit seed for `random.Random` (problem generation)."""
    return int.from_bytes(_digest(*parts)[:8], "big") >> 1


_TWO_TO_64 = 2.0**64
_STEP_DRAWS = struct.Struct("<5Q")  # five 64-bit draws per step (one 40-byte digest)
_SCORE_DRAWS = struct.Struct("<2Q")  # two per score (a 16-byte digest)


def _step_draws(choice_key: bytes, step: int) -> tuple[int, ...]:
    """Five uniform 64-bit integers for one step: a counter-based generator.

    Each step of each choice hashes (request key, choice, step) on its own, so
    a draw never depends on how many choices or earlier steps consumed
    randomness, and no `random.Random` (4.5 us to seed) is built per choice.
    Compare a draw with ``probability * _TWO_TO_64``, or divide it by
    ``_TWO_TO_64`` for a float in [0, 1).
    """
    digest = hashlib.blake2b(choice_key + step.to_bytes(4, "little"), digest_size=40).digest()
    return _STEP_DRAWS.unpack(digest)


def count_words(text: str) -> int:
    return len(text.split())


@dataclass(slots=True)
class SimPolicy:
    """A stochastic policy LLM over simulated problems (see the module docstring).

    `seed` stands for the model: two policies with different seeds sample
    differently from the same requests.
    """

    params: SimParams = field(default_factory=SimParams)
    seed: int = 0
    name: str = "sim"

    async def count_tokens(self, text: str) -> int:
        return count_words(text)

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        """Policy input tokens: the fixed prompt plus every token generated on the path.

        The driver calls this only when policy input tokens are charged; the
        text the search inserted (continuation prompts) is not counted.
        """
        return self.params.prompt_tokens + _path_state(assistant_prefix).path_tokens

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        hidden = _hidden(request.problem)
        state = _path_state(request.assistant_prefix)
        prompt_tokens = self.params.prompt_tokens + state.path_tokens
        greedy = request.temperature <= 0.0  # greedy decoding: one text, whatever the seed
        key = hashlib.blake2b(
            f"{self.seed}\x1f{0 if greedy else request.seed}\x1f{request.problem}"
            f"\x1f{request.assistant_prefix}".encode(),
            digest_size=16,
        ).digest()
        if greedy:
            return [self._choice(request, hidden, state, key, prompt_tokens)] * request.n
        return [
            self._choice(request, hidden, state, key + i.to_bytes(4, "little"), prompt_tokens)
            for i in range(request.n)
        ]

    def _choice(
        self,
        request: GenerationRequest,
        hidden: _Hidden,
        state: _PathState,
        key: bytes,
        prompt_tokens: int,
    ) -> Generation:
        """One choice: one step (sequential) or steps until an answer or max_tokens (full)."""
        p = self.params
        sequential = bool(request.stop)
        budget = request.max_tokens
        prefix = request.assistant_prefix
        step, ok = state.step, state.ok
        revising = state.answered  # the prefix ends with an answer + the continuation prompt
        hazard = p.answer_hazard * _TWO_TO_64
        parts: list[str] = []
        used = 0
        while True:
            step += 1
            u_err, u_len1, u_len2, u_ans, u_pick = _step_draws(key, step)
            if revising:  # the first step after "But wait, ...": repair or break
                ok = u_err >= p.p_break * _TWO_TO_64 if ok else u_err < p.p_repair * _TWO_TO_64
                revising = False
            elif ok and u_err < p.step_error(hidden.difficulty, step) * _TWO_TO_64:
                ok = False  # errors propagate: a wrong path stays wrong
            length = p.step_length(u_len1 / _TWO_TO_64, u_len2 / _TWO_TO_64)
            answers = step >= p.min_answer_steps and u_ans < hazard
            header = _header(step, prefix, bool(parts))
            # +1: the boundary token (sequential) or the end-of-sequence token (answer)
            closing = 1 if answers or sequential else 0
            if used + length + closing > budget:  # cut at max_tokens: no answer sentence
                tag = _tag(step, ok, budget - used, state.path_tokens + budget)
                parts.append(f"{header} {tag}")
                return Generation("".join(parts), budget, FinishReason.LENGTH, prompt_tokens)
            used += length + closing
            tag = f"{header} {_tag(step, ok, length, state.path_tokens + used)}"
            if answers:
                answer = hidden.reference if ok else hidden.distractor(u_pick / _TWO_TO_64, p)
                parts.append(f"{tag} so the final answer is $\\boxed{{{answer}}}$.")
                return Generation("".join(parts), used, FinishReason.EOS, prompt_tokens)
            parts.append(tag)
            if sequential:
                return Generation("".join(parts), used, FinishReason.STOP_STRING, prompt_tokens)
            if used >= budget:
                return Generation("".join(parts), used, FinishReason.LENGTH, prompt_tokens)


def _header(step: int, prefix: str, mid_generation: bool) -> str:
    """The "Step j:" label a model writes before step j, given what precedes it."""
    if mid_generation:
        return f"\nStep {step}:"
    if step == 1 and prefix.endswith(":"):
        return ""  # right after the prefilled "Step 1:"
    if prefix.endswith("Step"):
        return f" {step}:"  # the driver re-inserted the boundary "\nStep"
    if prefix.endswith("\n"):
        return f"Step {step}:"  # after the continuation prompt of a full generation
    return f"\nStep {step}:"  # continuing a generation that was cut at max_tokens


@dataclass(slots=True)
class SimScorer:
    """A GenPRM-like process reward model: noisy, saturated, near-binary Q of path correctness.

    Q depends only on whether the node's path is right (its last step tag)
    and on a hash of the path, so the same path always gets the same score.
    The returned context is that path hash: a child's score hashes its
    parent's context and its own text instead of the whole path (O(1) in the
    depth, the way GenPRM reuses its ancestors' critiques).

    Token counts (never charged in the paper's output-token budget), by
    `params.prm_cost`:

    * genprm (the default): input = `prm_prompt_tokens` + every token generated
      on the path + one critique per ancestor step (GenPRM's growing
      conversation); output = `prm_critique_tokens` per step of the node (a
      full-generation node holds several steps, each scored, App. E);
    * one_pass: input = `prm_one_pass_prompt_tokens` + every token generated on
      the path (the real one-pass scorer's [bos] + prompt + each step + its
      separator: each step's closing token, the boundary or end of sequence,
      stands for its separator), re-read whole for every node; output 0.

    Each is capped at `prm_max_input_tokens` / `prm_max_output_tokens` (the
    driver's default per-score reserve).  `max_cost` itself is not read, as
    with the real GenPRM scorer: a run that charges PRM tokens with a smaller
    reserve must lower the caps too.  `cached_input_tokens` says how much of
    a score's input a prefix cache would serve.
    """

    params: SimParams = field(default_factory=SimParams)
    seed: int = 0
    name: str = "sim-prm"

    async def score(self, request: ScoreRequest) -> Score:
        p = self.params
        node_text = request.path[-1] if request.path else ""
        parent_key = request.parent_context
        if type(parent_key) is not bytes:  # no context (a hand-built request): rebuild it
            parent_key = self._key(request.problem, request.path[:-1])
        digest = _path_key(parent_key, node_text)
        u_high, u_tail = _SCORE_DRAWS.unpack(digest)
        state = _path_state(node_text if _TAG_OPEN in node_text else "".join(request.path))
        noise = p.prm_false_negative if state.ok else 1.0 - p.prm_false_positive
        high = u_high >= noise * _TWO_TO_64
        lo, hi = p.prm_high_log10 if high else p.prm_low_log10
        tail = 10.0 ** (lo + (hi - lo) * (u_tail / _TWO_TO_64))
        own_steps = node_text.count(_TAG_OPEN)
        if not decodes(p.prm_cost):  # one pass over prompt and path, nothing written
            input_tokens, output_tokens = p.prm_one_pass_prompt_tokens + state.path_tokens, 0
        else:
            critiques = p.prm_critique_tokens * (state.step - own_steps)  # ancestor steps
            input_tokens = p.prm_prompt_tokens + state.path_tokens + critiques
            output_tokens = p.prm_critique_tokens * max(1, own_steps)
        return Score(
            value=min(1.0, max(0.0, 1.0 - tail if high else tail)),
            context=digest,
            input_tokens=min(p.prm_max_input_tokens, input_tokens),
            output_tokens=min(p.prm_max_output_tokens, output_tokens),
        )

    def cached_input_tokens(self, request: ScoreRequest, score: Score) -> int:
        """Of `score.input_tokens`, the ones a prefix cache serves: the parent's sequence.

        Both cost models append to the parent's sequence (one_pass: prompt + parent
        path; genprm: the parent's conversation, its own critique included), so all
        but the node's own generated tokens were computed when the parent was scored.
        A child of the root finds its prompt cached (a sibling or an earlier search of
        the problem computed it; the very first score of a problem would not).
        """
        node_text = request.path[-1] if request.path else ""
        own = _path_state(node_text if _TAG_OPEN in node_text else "".join(request.path))
        parent = _START
        for segment in reversed(request.path[:-1]):
            if _TAG_OPEN in segment:
                parent = _path_state(segment)
                break
        return max(
            0, min(score.input_tokens, score.input_tokens - (own.path_tokens - parent.path_tokens))
        )

    def _key(self, problem: str, segments: tuple[str, ...]) -> bytes:
        """The context the driver would hold for the node at the end of `segments`."""
        key = _digest(self.seed, "prm-root", problem)
        for segment in segments:
            key = _path_key(key, segment)
        return key


def _path_key(parent_key: bytes, segment: str) -> bytes:
    """A path's 16-byte hash from its parent's and its own text (the PRM's context)."""
    return hashlib.blake2b(parent_key + segment.encode(), digest_size=16).digest()


__all__ = [
    "SimParams",
    "SimPolicy",
    "SimProblem",
    "SimScorer",
    "count_words",
    "simulated_problems",
]
