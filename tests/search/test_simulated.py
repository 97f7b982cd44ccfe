"""The simulated reasoning environment (search/simulated.py): a policy and PRM with a ground truth.

These tests pin what makes the simulator a fair judge of search algorithms:
it is deterministic for a seed, it honours the request contract the driver
relies on (one step per sequential request, the boundary and EOS tokens
counted, never more than `max_tokens`, App. A answers), its PRM is
near-binary and separates right from wrong paths (App. K), and it rewards
search over a single greedy sample when the PRM is perfect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from typing import Any

import pytest

from search import parse_search_config, run_search
from search.answers import extract_boxed, is_answered
from search.config import CONTINUATION_PROMPT
from search.driver import SearchResult
from search.protocols import FinishReason, Generation, GenerationRequest, Score, ScoreRequest
from search.simulated import (
    SimParams,
    SimPolicy,
    SimProblem,
    SimScorer,
    simulated_problems,
)
from search.tree import Node, Tree

SEQ = ("\nStep",)
# The paper's methods as configs/eval-sim.yaml runs them (AB-MCTS-M: see test_ab_mcts.py).
GRID: tuple[dict[str, str], ...] = (
    {"algorithm": "bg_mcts"},
    {"algorithm": "mcts"},
    {"algorithm": "ab_mcts_a"},
    {"algorithm": "litesearch", "mode": "incremental"},
    {"algorithm": "litesearch", "mode": "batch"},
    {"algorithm": "beam"},
    {"algorithm": "repeated_sampling"},
    {"algorithm": "refinement"},
    {"algorithm": "greedy"},
)


def search(
    problem: SimProblem,
    algorithm: str | dict[str, str],
    budget: int,
    seed: int = 0,
    params: SimParams | None = None,
    env_seed: int = 0,
) -> SearchResult:
    params = params or SimParams()
    return asyncio.run(
        run_search(
            problem.problem,
            parse_search_config(
                {"algorithm": algorithm} if isinstance(algorithm, str) else algorithm
            ),
            SimPolicy(params, seed=env_seed),
            SimScorer(params, seed=env_seed),
            budget,
            seed=seed,
        )
    )


def generate(request: GenerationRequest, params: SimParams | None = None) -> list[Generation]:
    return list(asyncio.run(SimPolicy(params or SimParams()).generate(request)))


def path_is_right(tree: Tree, node: Node) -> bool:
    """Ground truth of a node: the state in its last step tag."""
    text = tree.assistant_text(node)
    tag = text[text.rfind("[s") :]
    return tag.split(" ")[1].startswith("ok")


# --------------------------------------------------------------------- problems
def test_problems_are_reproducible_and_span_easy_to_nearly_impossible() -> None:
    problems = simulated_problems(400, seed=3)
    assert problems == simulated_problems(400, seed=3)
    assert problems != simulated_problems(400, seed=4)
    assert len({p.problem_id for p in problems}) == 400
    difficulties = [p.difficulty for p in problems]
    assert abs(statistics.mean(difficulties) - 0.5) < 0.05  # Beta(1, 1) has mean 1/2
    assert min(difficulties) < 0.05 and max(difficulties) > 0.95
    for p in problems[:20]:
        assert p.reference not in p.distractors and len(set(p.distractors)) == 3
        assert f"a={p.reference}" in p.problem  # the text carries the hidden state
        assert p.is_correct(f" {p.reference} ") and not p.is_correct(p.distractors[0])
        assert not p.is_correct(None)


def test_params_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="p_repair"):
        SimParams(p_repair=1.5)
    with pytest.raises(ValueError, match="one weight per distractor"):
        SimParams(n_distractors=2)
    with pytest.raises(ValueError, match="min_answer_steps"):
        SimParams(mean_answer_steps=2.0, min_answer_steps=3)
    with pytest.raises(ValueError, match="prm_high_log10"):
        SimParams(prm_high_log10=(-1.0, 0.5))


def test_a_request_for_an_unknown_problem_fails_loudly() -> None:
    with pytest.raises(ValueError, match="not a simulated problem"):
        generate(GenerationRequest("What is 2+2?", "Step 1:", 1, 100, SEQ, 0.8, 0))


# --------------------------------------------------------------------- the request contract
@pytest.mark.parametrize("sequential", [True, False])
def test_output_tokens_never_exceed_max_tokens_and_cuts_end_in_length(sequential: bool) -> None:
    problems = simulated_problems(10, seed=0)
    seen: set[FinishReason] = set()
    for i, max_tokens in enumerate([1, 2, 5, 30, 120, 200, 400, 900, 2000, 5000] * 10):
        problem = problems[i % 10]
        stop = SEQ if sequential else ()
        # sequential: from step 3 on, where a step may answer (min_answer_steps)
        prefix = "Step 1: [s1 ok 10 10]\nStep 2: [s2 ok 10 21]\nStep" if sequential else "Step 1:"
        request = GenerationRequest(problem.problem, prefix, 3, max_tokens, stop, 0.8, i)
        for g in generate(request):
            seen.add(g.finish)
            assert 1 <= g.output_tokens <= max_tokens
            if g.finish is FinishReason.LENGTH:
                assert "boxed" not in g.text  # a cut answer is no answer (App. A)
                if not sequential:
                    assert g.output_tokens == max_tokens
            if sequential:
                assert g.text.count("[s") == 1  # exactly one step per sequential request
    expected = {FinishReason.LENGTH, FinishReason.EOS}
    expected |= {FinishReason.STOP_STRING} if sequential else set()
    assert seen == expected


def test_a_sequential_step_counts_its_boundary_token_and_names_its_step() -> None:
    problem = simulated_problems(1, seed=0)[0]
    prefix = "Step 1: [s1 ok 100 101]\nStep 2: [s2 ok 50 152]\nStep"
    for g in generate(GenerationRequest(problem.problem, prefix, 8, 4000, SEQ, 0.8, 1)):
        assert g.text.startswith(" 3: [s3 ")
        step_tokens = int(g.text[g.text.find("[s") :].split(" ")[2])
        assert g.output_tokens == step_tokens + 1  # the boundary or the EOS token
        assert g.input_tokens == SimParams().prompt_tokens + 152
        assert g.finish in (FinishReason.STOP_STRING, FinishReason.EOS)


def test_steps_and_solution_lengths_follow_the_documented_distributions() -> None:
    params = SimParams()
    problems = simulated_problems(50, seed=5)
    steps, tokens, step_tokens = [], [], []
    for p in problems:
        for g in generate(GenerationRequest(p.problem, "Step 1:", 20, 10**6, (), 0.8, 2)):
            assert g.finish is FinishReason.EOS
            tags = [t.split("]")[0].split(" ") for t in g.text.split("[s")[1:]]
            assert min(int(t[0]) for t in tags) == 1
            steps.append(len(tags))
            step_tokens += [int(t[2]) for t in tags]
            tokens.append(g.output_tokens)
            assert g.output_tokens == sum(int(t[2]) for t in tags) + 1  # + EOS
            assert int(tags[-1][3]) == g.output_tokens  # the running path total
    assert min(steps) == params.min_answer_steps
    assert abs(statistics.mean(steps) - params.mean_answer_steps) < 0.3
    assert abs(statistics.median(step_tokens) - params.step_tokens_median) < 10
    assert min(step_tokens) >= params.step_tokens_min


def test_answers_follow_path_correctness_and_satisfy_app_a() -> None:
    """A right path answers the reference, a wrong one a distractor, the common one most."""
    problem = next(p for p in simulated_problems(50, seed=1) if 0.6 < p.difficulty < 0.8)
    gens = generate(GenerationRequest(problem.problem, "Step 1:", 400, 10**6, (), 0.8, 0))
    right = wrong = 0
    wrong_answers: list[str] = []
    for g in gens:
        assert is_answered(g.text, g.finish)
        answer = extract_boxed(g.text)
        last_tag = g.text[g.text.rfind("[s") :]
        if " ok " in last_tag:
            right += 1
            assert answer == problem.reference
        else:
            wrong += 1
            assert answer in problem.distractors
            wrong_answers.append(answer)
    assert right > 20 and wrong > 20
    most_common = max(set(wrong_answers), key=wrong_answers.count)
    assert most_common == problem.distractors[0]  # weight 0.6


def test_difficulty_drives_single_path_accuracy() -> None:
    problems = simulated_problems(60, seed=2)

    def accuracy(p: SimProblem) -> float:
        gens = generate(GenerationRequest(p.problem, "Step 1:", 30, 10**6, (), 0.8, 0))
        return sum(extract_boxed(g.text) == p.reference for g in gens) / len(gens)

    easy = [accuracy(p) for p in problems if p.difficulty < 0.2]
    hard = [accuracy(p) for p in problems if p.difficulty > 0.85]
    assert easy and hard
    assert min(easy) > 0.9
    assert max(hard) < 0.1


def continue_after(answer_text: str, ok: bool, params: SimParams) -> list[bool]:
    """States of the first step written after an answered node and the continuation prompt."""
    problem = simulated_problems(1, seed=0)[0]
    state = "ok" if ok else "err"
    prefix = (
        f"Step 1: [s1 {state} 100 100] so the final answer is $\\boxed{{{answer_text}}}$."
        f"\n{CONTINUATION_PROMPT}\nStep"
    )
    gens = generate(GenerationRequest(problem.problem, prefix, 200, 4000, SEQ, 0.8, 0), params)
    return [" ok " in g.text[g.text.find("[s") :] for g in gens]


def test_the_continuation_prompt_repairs_or_breaks_with_the_given_probabilities() -> None:
    never = SimParams(p_repair=0.0, p_break=0.0)
    assert not any(continue_after("1", ok=False, params=never))
    assert all(continue_after("1", ok=True, params=never))
    always = SimParams(p_repair=1.0, p_break=1.0)
    assert all(continue_after("1", ok=False, params=always))
    assert not any(continue_after("1", ok=True, params=always))
    repaired = statistics.mean(continue_after("1", ok=False, params=SimParams(p_repair=0.3)))
    assert 0.2 < repaired < 0.4


def test_greedy_decoding_ignores_the_request_seed_and_agrees_across_choices() -> None:
    problem = simulated_problems(1, seed=0)[0]
    a = generate(GenerationRequest(problem.problem, "Step 1:", 3, 5000, (), 0.0, 1))
    b = generate(GenerationRequest(problem.problem, "Step 1:", 3, 5000, (), 0.0, 2))
    assert a == b and a[0] == a[1] == a[2]
    c = generate(GenerationRequest(problem.problem, "Step 1:", 3, 5000, (), 0.8, 1))
    assert len({g.text for g in c}) == 3


# --------------------------------------------------------------------- the PRM (App. K)
def scores(params: SimParams, ok: bool, count: int = 2000) -> list[float]:
    scorer = SimScorer(params)
    state = "ok" if ok else "err"
    problem = simulated_problems(1, seed=0)[0].problem

    async def run() -> list[float]:
        out = []
        for i in range(count):
            path = (f" [s1 ok {i} {i}]", f" 2: [s2 {state} 120 {i + 121}]")
            request = ScoreRequest(problem, path, None, False, None, False, 0.0)
            out.append((await scorer.score(request)).value)
        return out

    return asyncio.run(run())


def test_prm_scores_are_near_binary_and_separate_right_from_wrong_paths() -> None:
    params = SimParams()
    right, wrong = scores(params, ok=True), scores(params, ok=False)
    for values in (right, wrong):
        assert all(0.0 <= v <= 1.0 for v in values)
        assert sum(0.1 < v < 0.9 for v in values) == 0  # saturated: near 0 or near 1
    high_right = statistics.mean(v > 0.5 for v in right)
    high_wrong = statistics.mean(v > 0.5 for v in wrong)
    assert abs(high_right - (1 - params.prm_false_negative)) < 0.03
    assert abs(high_wrong - params.prm_false_positive) < 0.04
    assert statistics.median(right) > 0.99
    assert min(v for v in right if v > 0.5) > 0.94  # high means 1 - 10**U(-3.7, -1.3)


def test_a_perfect_prm_is_exact() -> None:
    perfect = SimParams(prm_false_positive=0.0, prm_false_negative=0.0)
    assert min(scores(perfect, ok=True, count=300)) > 0.9
    assert max(scores(perfect, ok=False, count=300)) < 0.1


def test_prm_scores_during_a_search_look_like_app_k() -> None:
    """BG-MCTS at B=30K on MATH500-L5-like problems: App. K has p10 2e-3, p25 .97, p50 .997."""
    qs: list[float] = []
    for p in simulated_problems(12, seed=9):
        qs += [n.q for n in search(p, "bg_mcts", 30_000).tree.nodes[1:]]
    qs.sort()
    p10, p25, p50 = (qs[int(f * (len(qs) - 1))] for f in (0.1, 0.25, 0.5))
    assert p10 < 0.02 and p50 > 0.98, (p10, p25, p50)


def test_a_score_without_context_equals_the_score_the_driver_gets() -> None:
    """The scorer hashes the parent's context; rebuilding it from the path gives the same Q."""
    problem = simulated_problems(3, seed=0)[2]
    result = search(problem, "bg_mcts", 5000)
    scorer = SimScorer()
    deep = max(result.tree.nodes, key=lambda n: n.depth)
    assert deep.depth >= 3
    tree = result.tree
    parent = tree[deep.parent_id or 0]
    request = ScoreRequest(
        problem.problem,
        (*tree.path_segments(parent), deep.segment),
        None,
        deep.answered,
        deep.answer,
        False,
        0.0,
    )
    assert asyncio.run(scorer.score(request)).value == deep.q


# --------------------------------------------------------------------- whole searches
def test_a_search_is_reproducible_for_a_seed_and_changes_with_it() -> None:
    problem = simulated_problems(5, seed=0)[3]
    first = search(problem, "bg_mcts", 8000, seed=1)
    again = search(problem, "bg_mcts", 8000, seed=1)
    assert first.tree.rows() == again.tree.rows()
    assert first.chosen_answer == again.chosen_answer
    assert search(problem, "bg_mcts", 8000, seed=2).tree.rows() != first.tree.rows()
    other_model = search(problem, "bg_mcts", 8000, seed=1, env_seed=1)
    assert other_model.tree.rows() != first.tree.rows()


@pytest.mark.parametrize("method", GRID, ids=lambda m: "_".join(m.values()))
def test_every_algorithm_keeps_c_used_within_b_and_answers_truthfully(
    method: dict[str, str],
) -> None:
    budget = 4000
    for problem in simulated_problems(3, seed=4):
        result = search(problem, method, budget)
        assert result.c_used <= budget
        assert result.tokens.failed_generations == 0 and result.tokens.failed_scores == 0
        tree = result.tree
        for node in tree.nodes[1:]:
            assert node.error is None
            if node.answered:
                assert is_answered(node.text, node.finish or FinishReason.ERROR)
                right = path_is_right(tree, node)
                assert (node.answer == problem.reference) == right
                assert right or node.answer in problem.distractors
        if method["algorithm"] in ("bg_mcts", "mcts", "repeated_sampling", "refinement"):
            assert result.c_used == budget  # tree searches spend B exactly


@pytest.mark.parametrize("algorithm", ["bg_mcts", "refinement"])
def test_input_and_prm_tokens_are_charged_within_the_budget(algorithm: str) -> None:
    """The cost model's extensions (charged input and PRM tokens) work with the simulator.

    Deep paths and long full generations would exceed the driver's default
    per-score reserve (4096 input, 1024 output tokens) without the caps, and
    the driver would raise BudgetViolation.
    """
    cost = {"policy_input": 0.1, "prm_input": 1.0, "prm_output": 1.0}
    config = parse_search_config({"algorithm": algorithm, "cost": cost})
    problem = simulated_problems(1, seed=0)[0]
    budget = 200_000
    result = asyncio.run(
        run_search(problem.problem, config, SimPolicy(), SimScorer(), budget, seed=0)
    )
    assert result.c_used <= budget
    assert result.tokens.policy_input_tokens > 0 and result.tokens.prm_output_tokens > 0
    assert result.tokens.failed_scores == 0
    assert result.tree.max_depth >= (10 if algorithm == "bg_mcts" else 5)


def test_with_a_perfect_prm_bg_mcts_beats_greedy() -> None:
    """The simulator rewards search: a right path exists often, and a perfect PRM finds it."""
    perfect = SimParams(prm_false_positive=0.0, prm_false_negative=0.0)
    problems = simulated_problems(30, seed=11)
    greedy = sum(
        p.is_correct(search(p, "greedy", 10_000, params=perfect).chosen_answer) for p in problems
    )
    bg = sum(
        p.is_correct(search(p, "bg_mcts", 10_000, params=perfect).chosen_answer) for p in problems
    )
    assert bg >= greedy + 5, (bg, greedy)


def test_params_are_a_frozen_value() -> None:
    params = SimParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.p_repair = 0.5  # type: ignore[misc]
    assert dataclasses.replace(params, p_repair=0.5).p_repair == 0.5
    yaml_values: dict[str, Any] = {"distractor_weights": [0.5, 0.3, 0.2], "prm_low_log10": [-4, -2]}
    from_yaml = SimParams(**yaml_values)  # lists, as YAML gives them
    assert from_yaml.distractor_weights == (0.5, 0.3, 0.2) and hash(from_yaml)


# ------------------------------------------------------------------ PRM cost models
def score_with(params: SimParams, path: tuple[str, ...]) -> tuple[Score, int]:
    scorer = SimScorer(params)
    problem = simulated_problems(1, seed=0)[0].problem
    request = ScoreRequest(problem, path, None, False, None, False, 0.0)
    score = asyncio.run(scorer.score(request))
    return score, scorer.cached_input_tokens(request, score)


# three sequential steps of 150, 90 and 200 tokens, each with its boundary token
PATH = (" [s1 ok 150 151]", "\nStep 2: [s2 ok 90 242]", "\nStep 3: [s3 ok 200 443]")


def test_genprm_cost_rereads_its_conversation_and_writes_a_critique_per_step() -> None:
    params = SimParams()
    score, cached = score_with(params, PATH)
    # prompt + path + the critiques of the two ancestor steps; one critique out
    assert score.input_tokens == 400 + 443 + 2 * 320
    assert score.output_tokens == 320
    assert cached == score.input_tokens - 201  # all but the node's own step (and boundary)


def test_one_pass_cost_rereads_prompt_and_path_and_writes_nothing() -> None:
    params = SimParams(prm_cost="one_pass")
    score, cached = score_with(params, PATH)
    assert score.input_tokens == params.prm_one_pass_prompt_tokens + 443
    assert score.output_tokens == 0
    assert cached == params.prm_one_pass_prompt_tokens + 242  # the parent's sequence
    first, first_cached = score_with(params, PATH[:1])
    assert (first.input_tokens, first_cached) == (120 + 151, 120)  # only the prompt is shared


def test_one_pass_cost_is_the_step_layout_length() -> None:
    """The real one-pass scorer charges len(layout(...)): [bos] + prompt + each step + its
    separator (actors/engines/step_layout.py).  With a tokenizer that gives each simulated
    step its tag's token count, the simulated charge is that length."""
    from actors.engines.step_layout import layout

    params = SimParams(prm_cost="one_pass")

    def tokenize(text: str) -> list[int]:
        if text == "prompt":  # bos comes apart: the prompt is the rest of the 120 tokens
            return [7] * (params.prm_one_pass_prompt_tokens - 1)
        tokens = int(text.split()[2])  # "[s<j> ok <step tokens> <path tokens>]"
        return [5] * tokens

    steps = [segment.split("[", 1)[1] for segment in PATH]
    ids = layout(tokenize, "prompt", [f"[{s}" for s in steps], separator=9, bos=1).input_ids
    score, _ = score_with(params, PATH)
    assert score.input_tokens == len(ids)


def test_the_cost_model_changes_tokens_only_never_a_search() -> None:
    problem = simulated_problems(2, seed=4)[1]
    genprm = search(problem, "bg_mcts", 5000)
    one_pass = search(problem, "bg_mcts", 5000, params=SimParams(prm_cost="one_pass"))
    assert [n.q for n in genprm.tree.nodes] == [n.q for n in one_pass.tree.nodes]
    assert genprm.chosen_answer == one_pass.chosen_answer
    assert one_pass.tokens.prm_output_tokens == 0 < genprm.tokens.prm_output_tokens
    assert one_pass.tokens.prm_input_tokens < genprm.tokens.prm_input_tokens


def test_an_unknown_cost_model_is_refused() -> None:
    with pytest.raises(ValueError, match="prm_cost"):
        SimParams(prm_cost="two_pass")  # type: ignore[arg-type]
