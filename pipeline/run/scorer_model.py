"""The scorer's tokens per policy output token, from a model of path depth: the dry run's
estimate for a run that has no trees of its own yet.

Why a model and not one ratio.  Every node a tree search makes is scored, and the scorer
reads the node's whole path: the one-pass PRM sends its prompt and every step from the root
to the node (`actors/engines/step_layout.py`), GenPRM sends its conversation, which holds
every step of the path and its own critique of each earlier one (`actors/genprm.py`).  The
policy writes one step per node.  So the scorer's tokens per policy token are about the
mean depth of a node, and the depth grows with B: the simulated grid gives 3.9 at B = 1,000
and 13.0 at B = 30,000 for the one-pass cost, where one ratio measured at B = 300 said 3.6.

The model, in four steps.

1. Nodes.  A search spends B on its nodes (Eq. 2: rho = 1 - C_used / B falls to 0), each
   costing its step's tokens plus the fixed text the search inserts before it and charges
   like output (the continuation prompt after an answered node).  At the end of B the
   driver cuts each child's `max_tokens` to its share of what is left, so the last
   expansion's k children are short steps that B would not otherwise have held:
   ``N = B / (step_tokens + inserted_tokens) + k (1 - step_tokens / step_max_tokens)``
   (on the grid, 2.2-3.1 nodes more than B over the mean step at k = 2, B = 1k-10k; a
   step that its cap already keeps near its share of what is left is cut less).

2. Mean depth.  BG-MCTS goes wide first and deep later (Sec. 3, "wide-to-deep"): early on
   (rho near 1) the exploration term of BG-PUCT (Eq. 3) and the variance term of the
   generative child's score E_gen (Eq. 5) keep opening siblings, and late (rho near 0)
   both are annealed away while the completion bias of Eq. 4, kappa (1 - rho) d(x) / d_ans,
   pulls selection down the deepest lines.  A leaf expansion (Sec. 3.4, Expand) makes k
   children one level deeper, so a line being extended deepens by one level per k nodes,
   and a search keeping w lines alive deepens by one per k w nodes.  If every level of
   depth keeps about k lines alive (a sibling the exploration term returns to), w grows
   like k D and the depth D reached after n nodes solves D dD = dn / k^2: D ~ sqrt(n) / k.
   Annealing makes the search return to fewer siblings late (w grows slower than D), so
   the depth grows a little faster than sqrt(n); and an expansion in flight beside others
   (`max_inflight_expansions`, virtual loss on the paths already pending) is sent down
   another line, which spreads the nodes over more lines.  The dive keeps that form,

       dive = 1 + a * N**beta * k**(-gamma) * F**(-delta),

   with its four numbers fitted on the simulated environment (`search.simulated`, BG-MCTS
   with k = 2, 3, 5, F = 1-8 expansions in flight, B = 1k-30k and steps of 60 and 180
   tokens; the retired `scorer_estimate` benchmark refitted and checked them):
   a = 1.08, beta = 0.60 (sqrt's 0.5, a little more), gamma = 1.16 (1 / k, a little
   more), delta = 0.39.  The depth counts the root's children as 1.  F is the number of
   expansions that really fly together: at most `max_inflight_expansions`, and at most
   B / (k x step_max_tokens), since each pending expansion reserves its full cost from the
   budget (search/driver.py).

   The completion bias acts on unanswered nodes only: Eq. 4 sets it to zero on a node
   with an answer, and d(x) counts the steps since the last answered ancestor (the search
   continues an answered node with the continuation prompt, Sec. 4.1).  So where the
   policy answers in its first step (the embedded default's one-step arithmetic), nothing
   pulls the search down, PUCT's exploration keeps the tree balanced and the depth grows
   like a logarithm of N: ``balanced = 1 + b ln 2 log_k(N / 1.5k)``, b = 1.13.  The mean
   depth is the balanced one plus the share w of the dive that the bias makes:
   ``w = min(1, (1 - 1 / answer_steps) / (2/3))``, the unanswered share of steps for a
   solution of `answer_steps` steps, full from 3 steps on (on the grid, solutions of 3.5,
   7 and 14 steps gave the same depths within 7%; of 1 step, 6.0 at 250 nodes where 3
   steps gave 17).

3. Depth over the search.  A new node's depth grows about linearly with the budget spent,
   from 1 to twice the mean (the paper's maximum depth against consumed output tokens, in
   its Additional Results appendix, rises the same way; on the grid at B = 30k the nodes
   made in the first and last tenth of B sit at depths 3 and 25 around a mean of 12.7).
   This matters only where a scorer's input is capped: the scorer's context (GenPRM trims
   its prompt to fit it; the simulated PRM caps a score's input at 4,096 tokens), so the
   mean read is the mean of min(cap, read(depth)) over that line, not read(mean depth).

4. Tokens of one node at depth d, per scorer kind.  A path step is what the policy wrote
   plus what was inserted, plus what the scorer adds per step (a separator; GenPRM's user
   turn):

   * one-pass: sent = P + d x step, generated 0 (P: its prompt, [bos] and the problem, or
     the chat template, system prompt and problem);
   * GenPRM: the conversation before a step is scored holds P (system prompt and question),
     the d steps and the d - 1 earlier critiques (each its analysis plus the judgement text
     and turn template around it).  A step is scored by `reads` engine calls that each send
     the conversation (the analysis, then the one-token judgement, which also sends the
     new analysis): sent = samples x (reads x conversation + (reads - 1) x critique),
     generated = samples x (analysis + reads - 1).

   The one-pass scorer reads an answered node's own step only up to its answer statement
   (`cut_after_answer`), which `own_step_cut` takes off every node on average.
   Divided by the policy's step tokens, these are the scorer tokens per policy output
   token.  Where a scorer reads its prefix cache (vLLM's, `vllm_pooling`'s
   `read_prefix_cache`), most of what is sent is not computed; this model says what is
   sent (what a per-token API bills and what the trees columns count), and a resumed run's
   own trees say what was computed.

What it does not know.  The step length, how soon the policy answers and how often a node
continues an answered one are the policy's, not the config's: `search_shape` takes them
from the step cap, the source (the arithmetic problems' operations; 7 steps otherwise) and
two measured shapes (below); a policy whose steps are much shorter or longer than those
moves N and so the depth.  How often the policy answers is also the scorer's doing: at
B = 1,000 on the embedded default, GenPRM's trees left 46% of their nodes unanswered and
reached a mean depth of 5.0, the one-pass PRM's 24% and 3.2, and single trees ranged from
1.9 (every step answered: balanced) to 7.4 (answers stopped: a dive).  The model cannot
see that and sits between them.  The dive was fitted on a simulated PRM whose scores are
near-binary.  The law covers the PUCT searches (BG-MCTS, and MCTS at its own scale);
other algorithms keep the measured ratio of their scorer kind (`actors.scorer_kinds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from search.config import NodeUnit
from search.scorer_kinds import GENPRM, ScorerKindName, decodes

if TYPE_CHECKING:
    from pipeline.config import RunConfig

# Characters per token of problem and prompt text: SmolLM2's tokenizer on the embedded
# default's arithmetic problems gave 3.6 (87 characters, 24 tokens); 3.5-4 is usual for
# English text in BPE vocabularies.
CHARS_PER_TOKEN = 3.6
# The template tokens around one chat turn ("<|im_start|>user\n" ... "<|im_end|>\n").
TURN_TOKENS = 5.0


@dataclass(frozen=True)
class DepthLaw:
    """Mean node depth of a PUCT search tree (module doc, step 2): the dive
    ``1 + a N^beta k^-gamma F^-delta`` where the completion bias acts, a balanced tree
    ``1 + b log_k(N / 1.5k)`` where it does not, mixed by the share of steps it acts on."""

    scale: float  # a
    nodes_power: float  # beta
    children_power: float  # gamma
    inflight_power: float  # delta
    calibrated_on: str
    # False: a search without Eq. 4's completion bias (MCTS): the dive law alone
    completion_bias: bool = True
    balanced_slope: float = 1.13  # b, fitted at k = 2
    # the unanswered share of steps from which the completion bias acts fully
    full_bias_share: float = 2 / 3

    def dive_depth(self, nodes: float, k: int, in_flight: float) -> float:
        """Where the completion bias pulls the search down its best lines."""
        grows = math.pow(max(nodes, 1.0), self.nodes_power)
        wide = math.pow(max(k, 1), self.children_power)
        spread = math.pow(max(in_flight, 1.0), self.inflight_power)
        return 1.0 + self.scale * grows / (wide * spread)

    def balanced_depth(self, nodes: float, k: int) -> float:
        """Where it does not: each level about k times wider than the one above, the depth
        a logarithm of the nodes (base k; the slope was fitted at k = 2)."""
        width = max(k, 2)
        levels = math.log(max(nodes / (1.5 * width), 1.0)) / math.log(width)
        return 1.0 + self.balanced_slope * math.log(2) * levels

    def bias_weight(self, answer_steps: float) -> float:
        """How much of the dive the completion bias makes, from the steps to an answer: it
        acts on unanswered nodes only (Eq. 4), a share 1 - 1/answer_steps of them."""
        if not self.completion_bias:
            return 1.0
        unanswered = 1.0 - 1.0 / max(answer_steps, 1.0)
        return min(1.0, unanswered / self.full_bias_share)

    def mean_depth(
        self, nodes: float, k: int, in_flight: float, answer_steps: float = 7.0
    ) -> float:
        """The mean depth of `nodes` nodes (the root's children at depth 1)."""
        dive = self.dive_depth(nodes, k, in_flight)
        if not self.completion_bias:
            return dive
        balanced = min(self.balanced_depth(nodes, k), dive)
        return balanced + self.bias_weight(answer_steps) * (dive - balanced)


# The dive fitted on the simulated environment (BG-MCTS, paper conventions, solutions of
# 7 steps; 96 settings of k, expansions in flight, B and step length, 30 problems each):
# its largest error of the mean depth over those settings is 19%.  The retired benchmark
# `scorer_estimate` refitted it by least squares on log(depth - 1): each number within
# 0.1 of these (docs/benchmarks.md).  The balanced tree and the weight were fitted on the
# same environment with answers after 1-3 steps (k = 2, 25-token steps, B = 300-10k):
# largest error 17%; at 250-300 nodes the depth is 6.0 with an answer at every step and
# 17 after 3 steps.
BG_MCTS_DEPTH = DepthLaw(
    scale=1.08,
    nodes_power=0.60,
    children_power=1.16,
    inflight_power=0.39,
    calibrated_on="the simulated grid at B=300-30k and the embedded default at B=300 and 1,000",
)
# Budget-agnostic MCTS has no completion bias and never anneals its exploration: a more
# balanced, shallower tree.  Same exponents, its own scale (on the grid, k = 2: 7.3 at
# B = 30k against BG-MCTS's 12.7).
MCTS_DEPTH = replace(
    BG_MCTS_DEPTH,
    scale=0.72,
    calibrated_on="the simulated grid (MCTS) at B=1k-30k",
    completion_bias=False,
)
DEPTH_LAWS: dict[str, DepthLaw] = {"bg_mcts": BG_MCTS_DEPTH, "mcts": MCTS_DEPTH}


@dataclass(frozen=True)
class SearchShape:
    """What decides the tree's size and depth: B, the step, the width parameters."""

    budget: float  # B in policy output tokens (cost units / the output weight)
    step_tokens: float  # policy output tokens per node
    inserted_tokens: float  # fixed text per node, charged to B and read by the scorer
    k: int  # children of a leaf expansion
    in_flight: float  # expansions of one tree that really fly together
    answer_steps: float = 7.0  # steps to an answer (the completion bias acts before it)
    step_cap: float | None = None  # `step_max_tokens`; None: far above a step

    @property
    def node_tokens(self) -> float:
        """What one node costs B: its step and the text inserted before it."""
        return max(self.step_tokens + self.inserted_tokens, 1.0)

    @property
    def nodes(self) -> float:
        """Nodes per tree: B over a node's cost, and the last expansion's k children, whose
        steps the end of B cuts short (module doc, step 1)."""
        cut = 1.0 if self.step_cap is None else max(0.0, 1.0 - self.step_tokens / self.step_cap)
        return self.budget / self.node_tokens + self.k * cut

    @property
    def policy_tokens(self) -> float:
        """The policy's output per tree: B less the inserted text it pays for."""
        return self.budget * self.step_tokens / self.node_tokens


@dataclass(frozen=True)
class ScorerShape:
    """What one node costs the scorer, as a function of its depth (module doc, step 4)."""

    kind: ScorerKindName
    prompt_tokens: float  # what it reads before the path
    step_overhead: float = 0.0  # what it adds per path step (a separator, a user turn)
    own_step_cut: float = 0.0  # one-pass: share of a node's own step left unread, on average
    analysis_tokens: float = 0.0  # GenPRM: written per step
    critique_overhead: float = 0.0  # GenPRM: judgement text and turn template per critique
    reads: int = 1  # GenPRM: engine calls per step that each send the conversation
    samples: int = 1  # GenPRM: analyses per step
    input_cap: float | None = None  # most prompt tokens one engine call can hold


@dataclass(frozen=True)
class ScorerTokens:
    """The model's answer for one run shape, per policy output token."""

    per_policy_token: float  # sent + generated
    sent: float
    generated: float
    nodes: float
    mean_depth: float
    # sent + generated per token of B (B also pays the inserted text): the dry run's factor
    per_budget_token: float


def _mean_capped(low: float, high: float, cap: float | None) -> float:
    """The mean of min(cap, y) for y growing linearly from `low` to `high`."""
    if cap is None or high <= cap:
        return (low + high) / 2
    if low >= cap:
        return cap
    x = (cap - low) / (high - low)  # the share of the line below the cap
    return x * (low + cap) / 2 + (1 - x) * cap


def scorer_tokens(
    search: SearchShape, scorer: ScorerShape, law: DepthLaw = BG_MCTS_DEPTH
) -> ScorerTokens:
    """Scorer tokens per policy output token for a tree of `search`'s shape (module doc)."""
    nodes = search.nodes
    depth = law.mean_depth(nodes, search.k, search.in_flight, search.answer_steps)
    # a new node's depth grows linearly over the search, from 1 to 2 x mean - 1 (step 3)
    first, last = 1.0, 2.0 * depth - 1.0
    text = search.step_tokens + search.inserted_tokens
    step = text + scorer.step_overhead
    if not decodes(scorer.kind):
        prompt = scorer.prompt_tokens - scorer.own_step_cut * text
        sent = _mean_capped(prompt + first * step, prompt + last * step, scorer.input_cap)
        generated = 0.0
    else:
        critique = scorer.analysis_tokens + scorer.critique_overhead

        def conversation(d: float) -> float:
            return scorer.prompt_tokens + d * step + (d - 1.0) * critique

        read = _mean_capped(conversation(first), conversation(last), scorer.input_cap)
        sent = scorer.samples * (scorer.reads * read + (scorer.reads - 1) * critique)
        generated = scorer.samples * (scorer.analysis_tokens + scorer.reads - 1)
    policy = max(search.policy_tokens, 1.0)
    return ScorerTokens(
        per_policy_token=nodes * (sent + generated) / policy,
        sent=nodes * sent / policy,
        generated=nodes * generated / policy,
        nodes=nodes,
        mean_depth=depth,
        per_budget_token=nodes * (sent + generated) / max(search.budget, 1.0),
    )


# --------------------------------------------------------------------------- from a config
# A policy step when nothing caps it: the simulated environment's (lognormal, median 150,
# mean 180 tokens), which was set to Qwen2.5-7B-Instruct's MATH500 Level-5 solutions (7
# steps, 1,260 tokens on average; `search.simulated.SimParams`).
TYPICAL_STEP_TOKENS = 180.0
# A cap that binds: the embedded default's steps under its 48-token `step_max_tokens`
# (40% stop at the cap, the rest at an answer or a boundary).  Its four runs in
# the retired `scorer_estimate` benchmark (GenPRM and one-pass, B = 300 and 1,000)
# made 9.4, 10.0, 25.5 and 25.5 nodes per tree; `SearchShape.nodes` gives those best
# (least squares on the log) for steps of 0.63 x the cap.
CAPPED_STEP_SHARE = 0.63
# Steps to an answer when the source does not say: a MATH solution's 7 (SimParams, set to
# Qwen2.5-7B-Instruct on MATH500 Level 5).  The generated arithmetic problems take 1 to
# `max_steps` operations, and the embedded default's policy answers 88% of them in its
# first step.
TYPICAL_ANSWER_STEPS = 7.0
# Nodes that continue an answered node, and so carry the continuation prompt: 45% of the
# embedded default's (its problems are answered in the first step); 5% on the simulated
# grid, where a solution takes 7 steps.  At 180-token steps either share moves the
# estimate by under 3%.
CONTINUED_SHARE = 0.45
# One-pass: an answered node's own step is read up to its answer statement
# (`cut_after_answer`), and SmolLM2 writes on after its answer (a new "Problem:" until a
# stop string).  In the embedded default's one-pass runs 69% and 76% of the nodes were
# answered, and the cut took 49% and 69% of their own step's tokens.
ANSWERED_SHARE = 0.72
AFTER_ANSWER_SHARE = 0.6
# GenPRM: the analysis of a step when `max_analysis_tokens` does not cut it (the
# simulated environment's critique, set to GenPRM-7B's), and the fixed text around each
# critique: the opening "<analyze> Let's analyze the Paragraph i step by step:", the
# judgement "</analyze> <output> **Judgement**: $\\boxed{Yes}$ </output>" and a turn.
TYPICAL_ANALYSIS_TOKENS = 320.0
CRITIQUE_TEXT_TOKENS = 37.0


def _tokens(text: str) -> float:
    return len(text) / CHARS_PER_TOKEN


@dataclass(frozen=True)
class ModelEstimate:
    """The model's estimate for one config, and what it rests on, in words."""

    tokens: ScorerTokens
    search: SearchShape
    scorer: ScorerShape
    law: DepthLaw

    @property
    def rests_on(self) -> str:
        s, t = self.search, self.tokens
        return (
            f"model of path depth at B={s.budget:,.0f}: ~{t.nodes:,.0f} nodes of "
            f"~{s.step_tokens:,.0f} tokens, mean depth {t.mean_depth:.1f} (k={s.k}, "
            f"{s.in_flight:g} in flight), calibrated on {self.law.calibrated_on}; "
            "docs/sizing.md"
        )


def search_shape(config: RunConfig) -> SearchShape | None:
    """B, the step, k and the expansions in flight of a PUCT search (None: another one)."""
    search = config.search
    if search.algorithm not in DEPTH_LAWS:
        return None
    cost = search.cost
    if cost.policy_output <= 0:
        return None
    budget = config.budget / cost.policy_output
    cap = (
        search.step_max_tokens
        if search.node_unit is NodeUnit.SEQUENTIAL
        else search.full_max_tokens
    )
    step = min(TYPICAL_STEP_TOKENS, CAPPED_STEP_SHARE * cap)
    continuation = f"\n{search.continuation_prompt}{search.step_boundary}"
    charge = search.continuation_charge
    inserted = CONTINUED_SHARE * (_tokens(continuation) if charge is None else charge)
    k = int(getattr(search, "k", 2))
    # each pending expansion reserves its full cost, k x cap, from what is left of B
    fits = max(1, int(budget // (k * cap)))
    in_flight = min(int(getattr(search, "max_inflight_expansions", 1)), fits)
    source = config.source
    answer_steps = TYPICAL_ANSWER_STEPS
    if source.kind == "arithmetic":
        answer_steps = (1 + source.max_steps) / 2  # operations drawn from 1..max_steps
    return SearchShape(budget, step, inserted, k, in_flight, answer_steps, float(cap))


def scorer_shape(config: RunConfig, problem_chars: float) -> ScorerShape:
    """What the config's scorer reads and writes per node, its prompt from the problems'
    mean length in characters."""
    scorer = config.scorer
    problem = _tokens(" " * int(problem_chars))
    _, context = scorer.engine.context()
    if scorer.kind == GENPRM:
        settings = scorer.genprm
        analysis = min(float(settings.max_analysis_tokens), TYPICAL_ANALYSIS_TOKENS)
        system = _tokens(scorer.prompts.prm_system)
        return ScorerShape(
            GENPRM,
            prompt_tokens=system + _tokens("Question: \n\n") + problem + 2 * TURN_TOKENS,
            step_overhead=TURN_TOKENS,
            analysis_tokens=analysis,
            critique_overhead=CRITIQUE_TEXT_TOKENS + TURN_TOKENS,
            reads=2,
            samples=settings.samples,
            input_cap=None if context is None else float(context) - analysis,
        )
    one_pass = scorer.one_pass
    prompt = 1.0 + problem  # [bos] and the problem
    if one_pass.prompt_format == "chat":
        prompt += _tokens(one_pass.system_prompt) + 3 * TURN_TOKENS
    cut = ANSWERED_SHARE * AFTER_ANSWER_SHARE if one_pass.cut_after_answer else 0.0
    return ScorerShape(
        scorer.kind,
        prompt_tokens=prompt,
        step_overhead=1.0,  # the separator after each step
        own_step_cut=cut,
        input_cap=None if context is None else float(context),
    )


def model_estimate(config: RunConfig, problem_chars: float) -> ModelEstimate | None:
    """The model's scorer tokens per policy output token for `config` (None: the search is
    not one the depth law covers, or B does not cap the policy's output)."""
    search = search_shape(config)
    if search is None:
        return None
    scorer = scorer_shape(config, problem_chars)
    law = DEPTH_LAWS[config.search.algorithm]
    return ModelEstimate(scorer_tokens(search, scorer, law), search, scorer, law)


__all__ = [
    "BG_MCTS_DEPTH",
    "CHARS_PER_TOKEN",
    "DEPTH_LAWS",
    "MCTS_DEPTH",
    "TURN_TOKENS",
    "DepthLaw",
    "ModelEstimate",
    "ScorerShape",
    "ScorerTokens",
    "SearchShape",
    "model_estimate",
    "scorer_shape",
    "scorer_tokens",
    "search_shape",
]
