"""A simulated night, uniform B against the night allocator at the same total tokens.

`simulate_night` searches every problem of the simulated world (`search.simulated`) with
BG-MCTS, grades each tree by its ground truth, builds its rows with the records builders
(`pipeline.records.rows_for`) and counts the kept training rows per table, the tokens
spent and where the rows came from.  Uniform: one tree per problem at B.  Allocated
(`pipeline.run.allocation`): a probe tree per problem at ``probe_fraction x B``, then, a
window at a time, a second tree at the B the allocator gives it; the second tree's rows
count as `pipeline.records.problem_trees.further_rows` keeps them (no near duplicate of
the probe's rows, the per-problem caps across both trees).

Where rows come from: a problem is ``easy``, ``medium`` or ``hard`` by the chance that
one sampled solution of it is right (`solve_chance`: > 0.9, 0.1-0.9, < 0.1), a property of
the problem that is the same under both arms.  `benchmarks.night_allocation` prints it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from scipy.special import stdtrit

from common.grading import Verdict
from pipeline.records import BuildContext, RecordsConfig, grade_result, rows_for
from pipeline.records.problem_trees import forest, further_rows, uncapped
from pipeline.run.allocation import ROW_TABLES, AllocationConfig, NightAllocator, ProbeOutcome
from search import SearchResult, derive_seed, parse_search_config, run_search
from search.protocols import Score, ScoreRequest
from search.simulated import SimParams, SimPolicy, SimProblem, SimScorer


@dataclass
class NightTally:
    """What one simulated night kept and spent."""

    total: float  # the night's T = problems x B
    rows: Counter[str] = field(default_factory=Counter)  # kept rows per table
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)  # easy/medium/hard -> rows
    policy_tokens: float = 0.0  # C_used summed (policy output + inserted prompts)
    scorer_tokens: int = 0  # scorer tokens computed: input not served by a prefix cache + output
    over_budget: float = 0.0  # spend past T, plus every tree's C_used past its B
    trees: int = 0
    probes: Counter[str] = field(default_factory=Counter)  # probe outcome -> problems
    second_tokens: Counter[str] = field(default_factory=Counter)  # probe outcome -> second Bs

    def add(self, kind: str, rows: dict[str, list[dict[str, object]]]) -> None:
        counts = self.by_kind.setdefault(kind, Counter())
        for table in ROW_TABLES:
            self.rows[table] += len(rows.get(table, ()))
            counts[table] += len(rows.get(table, ()))


def solve_chance(problem: SimProblem, params: SimParams) -> float:
    """The chance that one solution of `mean_answer_steps` steps stays right throughout."""
    steps = round(params.mean_answer_steps)
    return math.prod(1 - params.step_error(problem.difficulty, j) for j in range(1, steps + 1))


def problem_kind(problem: SimProblem, params: SimParams) -> str:
    chance = solve_chance(problem, params)
    return "easy" if chance > 0.9 else "hard" if chance < 0.1 else "medium"


async def _exact(pairs: Sequence[tuple[str | None, str]], timeout_s: float) -> list[Verdict]:
    """The simulated world's ground truth (as `jobs.evaluate` grades it): exact match."""
    return [
        Verdict.MATCH if a is not None and a.strip() == b.strip() else Verdict.NO_MATCH
        for a, b in pairs
    ]


class _CachedCounter:
    """The simulated scorer, counting the input a prefix cache would serve (not in its
    `Score`: the simulated world leaves `prm_prompt_cached_tokens` at 0)."""

    def __init__(self, scorer: SimScorer) -> None:
        self.scorer, self.name, self.cached = scorer, scorer.name, 0

    async def score(self, request: ScoreRequest) -> Score:
        score = await self.scorer.score(request)
        self.cached += self.scorer.cached_input_tokens(request, score)
        return score


@dataclass(frozen=True)
class _Tree:
    result: SearchResult
    rows: dict[str, list[dict[str, object]]]
    correct: int
    incorrect: int


async def _tree(
    problem: SimProblem,
    params: SimParams,
    budget: int,
    seed: int,
    records: RecordsConfig,
    tally: NightTally,
) -> _Tree:
    config = parse_search_config({"algorithm": "bg_mcts"})
    scorer = _CachedCounter(SimScorer(params, seed=seed))
    result = await run_search(
        problem.problem, config, SimPolicy(params, seed=seed), scorer, budget, seed
    )
    graded = await grade_result(
        result, problem.reference, problem_id=problem.problem_id, timeout_s=5.0, compare=_exact
    )
    tokens = result.tokens
    tally.trees += 1
    tally.policy_tokens += result.c_used
    tally.over_budget += max(0.0, result.c_used - budget)
    tally.scorer_tokens += tokens.prm_input_tokens - scorer.cached + tokens.prm_output_tokens
    rows = rows_for(graded, BuildContext(records, run_id="sim"))
    right = sum(graded.labels.values())
    return _Tree(result, rows, right, len(graded.labels) - right)


async def _graded_rows(
    problem: SimProblem, result: SearchResult, records: RecordsConfig
) -> dict[str, list[dict[str, object]]]:
    graded = await grade_result(
        result, problem.reference, problem_id=problem.problem_id, timeout_s=5.0, compare=_exact
    )
    return rows_for(graded, BuildContext(records, run_id="sim"))


def _outcome(tree: _Tree) -> str:
    if not tree.result.answered_nodes:
        return "unanswered"
    if tree.correct and tree.incorrect:
        return "mixed"
    return "all_correct" if tree.correct else "none_correct"


async def simulate_night(
    problems: Sequence[SimProblem],
    params: SimParams,
    budget: int,
    seed: int,
    allocation: AllocationConfig | None = None,
    records: RecordsConfig | None = None,
) -> NightTally:
    """One night: uniform B (`allocation` None or not enabled) or the allocator's two trees."""
    records = records or RecordsConfig()
    tally = NightTally(total=float(len(problems) * budget))
    kinds = [problem_kind(p, params) for p in problems]
    if allocation is None or not allocation.enabled:
        for problem, kind in zip(problems, kinds, strict=True):
            tree = await _tree(
                problem, params, budget, derive_seed(seed, problem.problem_id), records, tally
            )
            tally.add(kind, tree.rows)
    else:
        allocator = NightAllocator(allocation, budget, records)
        later = uncapped(records)
        for start in range(0, len(problems), allocation.window):
            window = problems[start : start + allocation.window]
            probes = [
                await _tree(
                    p,
                    params,
                    allocator.probe_budget,
                    derive_seed(seed, p.problem_id),
                    records,
                    tally,
                )
                for p in window
            ]
            plan = allocator.allocate(
                [
                    ProbeOutcome(
                        p.problem_id,
                        t.result.c_used,
                        t.correct,
                        t.incorrect,
                        len(t.result.answered_nodes),
                        {name: len(t.rows.get(name, ())) for name in ROW_TABLES},
                    )
                    for p, t in zip(window, probes, strict=True)
                ],
                last=start + allocation.window >= len(problems),
            )
            for p, t, b, kind in zip(window, probes, plan.budgets, kinds[start:], strict=False):
                tally.add(kind, t.rows)
                tally.probes[_outcome(t)] += 1
                tally.second_tokens[_outcome(t)] += b
                if b > 0:
                    second = await _tree(
                        p, params, b, derive_seed(seed, p.problem_id, "second"), later, tally
                    )
                    both = await _graded_rows(p, forest(t.result, second.result), later)
                    tally.add(kind, further_rows(t.rows, both, records))
    tally.over_budget += max(0.0, tally.policy_tokens - tally.total)
    return tally


KINDS = ("easy", "medium", "hard")


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% Student-t interval of a mean over seeds."""
    n, mean = len(values), sum(values) / len(values)
    if n < 2:
        return (mean, math.nan, math.nan)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stdtrit(n - 1, 0.975)) * sd / math.sqrt(n)
    return (mean, mean - half, mean + half)


def _per_mtok(tally: NightTally, table: str, scorer: bool) -> float:
    rows = tally.rows["dpo"] + tally.rows["step_dpo"] if table == "pairs" else tally.rows[table]
    return rows / (tally.scorer_tokens if scorer else tally.policy_tokens) * 1e6


def _shown(values: Sequence[float], digits: int = 1) -> str:
    mean, low, high = mean_interval(values)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def comparison(
    uniform: Sequence[NightTally], allocated: Sequence[NightTally]
) -> tuple[list[str], dict[str, float]]:
    """Markdown tables of paired nights (one per seed) and the figures the last lines print:
    kept rows per 1M policy and per 1M computed scorer tokens (95% intervals over seeds),
    the kept rows' difficulty mix, and where the allocator's second-tree tokens went."""
    lines: list[str] = []
    tables = (*ROW_TABLES, "pairs")
    for scorer in (False, True):
        unit = "1M computed scorer tokens" if scorer else "1M policy tokens (C_used)"
        lines += ["", f"kept rows per {unit}, mean [95% interval] over seeds", ""]
        lines += ["| table | uniform B | allocator | ratio |", "|---|---|---|---|"]
        for table in tables:
            u = [_per_mtok(t, table, scorer) for t in uniform]
            a = [_per_mtok(t, table, scorer) for t in allocated]
            ratio = [x / y if y else math.nan for x, y in zip(a, u, strict=True)]
            lines.append(f"| {table} | {_shown(u)} | {_shown(a)} | {_shown(ratio, 2)} |")
    lines += ["", "where the kept rows come from (problems by the chance one solution is right: "]
    lines[-1] += "easy > 0.9, hard < 0.1), summed over seeds"
    lines += ["", "| rows | kind | uniform B | allocator |", "|---|---|---|---|"]
    for label, names in (("sft", ("sft",)), ("pairs", ("dpo", "step_dpo"))):
        totals = [
            sum(t.by_kind.get(k, Counter())[n] for t in nights for k in KINDS for n in names)
            for nights in (uniform, allocated)
        ]
        for kind in KINDS:
            cells = []
            for nights, total in zip((uniform, allocated), totals, strict=True):
                rows = sum(t.by_kind.get(kind, Counter())[n] for t in nights for n in names)
                cells.append(f"{rows} ({rows / max(1, total):.0%})")
            lines.append(f"| {label} | {kind} | {cells[0]} | {cells[1]} |")
    probes, tokens = Counter[str](), Counter[str]()
    for t in allocated:
        probes.update(t.probes)
        tokens.update(t.second_tokens)
    lines += ["", "| probe outcome | problems | mean second-tree B | share of second-tree tokens |"]
    lines += ["|---|---|---|---|"]
    for outcome, n in sorted(probes.items()):
        share = tokens[outcome] / max(1, sum(tokens.values()))
        lines.append(f"| {outcome} | {n} | {tokens[outcome] / n:,.0f} | {share:.0%} |")

    def mean(nights: Sequence[NightTally], table: str) -> float:
        return sum(_per_mtok(t, table, False) for t in nights) / len(nights)

    figures = {
        "pairs_per_mtok_ratio": mean(allocated, "pairs") / mean(uniform, "pairs"),
        "sft_per_mtok_ratio": mean(allocated, "sft") / mean(uniform, "sft"),
        "tokens_over_budget": math.ceil(sum(t.over_budget for t in (*uniform, *allocated))),
    }
    return lines, figures


__all__ = [
    "KINDS",
    "NightTally",
    "comparison",
    "mean_interval",
    "problem_kind",
    "simulate_night",
    "solve_chance",
]
