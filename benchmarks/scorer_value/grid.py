"""Data yield on the simulated grid under two PRM cost models: GenPRM's and a one-pass PRM's.

BG-MCTS and repeated sampling search the simulated environment (`search.simulated`, the
grid of `configs/eval-sim.yaml`) at each budget, seed and problem, once per cost model
(`SimParams.prm_cost`).  The PRM's *values* are the same under both (only what a score
costs differs, and PRM tokens are not charged to the budget), so every search builds
the same tree under both: the yield counts agree and only the token columns move, which
`run_grid` checks.  The counts are the evaluation grid's (`pipeline.records.yields`,
default quality gates), graded by exact match against the ground truth.

Yield = correct trajectories per 1,000 total tokens, total = policy output + PRM input
+ PRM output (the docs' yield table's definition; PRM input counts every token read,
cached or not: the cached part is its own column, what a prefix cache saves in compute).
The ratio table adds the yield per *computed* token (total less the cached PRM input),
what an engine with a prefix cache really processes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd  # type: ignore[import-untyped, unused-ignore]

from common.grading import Verdict
from pipeline.records import RecordsConfig, grade_result, yield_counts
from search import derive_seed, parse_search_config, run_search
from search.protocols import Score, ScoreRequest
from search.scorer_kinds import GENPRM, ONE_PASS, SCORER_KIND_NAMES, ScorerKindName
from search.simulated import SimParams, SimPolicy, SimScorer, simulated_problems

Cost = ScorerKindName
COSTS: tuple[Cost, ...] = SCORER_KIND_NAMES
METHODS = ("bg_mcts", "repeated_sampling")
COUNTS = ("correct_trajectories", "dpo_pairs", "step_pairs", "prm_steps")
TOKENS = ("policy_output", "prm_input", "prm_cached", "prm_output")


@dataclass(frozen=True)
class GridSpec:
    """Which searches run: every method x budget x seed x problem, once per cost model."""

    budgets: tuple[int, ...] = (10_000, 20_000, 30_000)
    seeds: tuple[int, ...] = (0, 1, 2)
    problems: int = 200
    problem_seed: int = 0  # configs/eval-sim.yaml's environment seed
    workers: int = 2
    methods: tuple[str, ...] = METHODS
    params: dict[str, Any] = field(default_factory=dict)  # other SimParams overrides


FULL = GridSpec()  # configs/eval-sim.yaml's grid for these two methods
QUICK = GridSpec(seeds=(0,), problems=40, workers=1)


class CachedTokenCounter:
    """The simulated scorer, counting how much of its input a prefix cache would serve."""

    def __init__(self, scorer: SimScorer) -> None:
        self.scorer = scorer
        self.name = scorer.name
        self.cached = 0

    async def score(self, request: ScoreRequest) -> Score:
        score = await self.scorer.score(request)
        self.cached += self.scorer.cached_input_tokens(request, score)
        return score


async def _exact(pairs: Sequence[tuple[str | None, str]], timeout_s: float) -> list[Verdict]:
    """The simulated environment's ground truth: exact match (as `jobs.evaluate`)."""
    return [
        Verdict.MATCH if a is not None and a.strip() == b.strip() else Verdict.NO_MATCH
        for a, b in pairs
    ]


Task = tuple[str, int, int, str, str, str]  # method, budget, seed, problem_id, problem, reference


def _run_tasks(cost: Cost, params: dict[str, Any], tasks: list[Task]) -> list[dict[str, Any]]:
    """Worker process: run `tasks` under one cost model; one row per search."""
    sim = SimParams(**{**params, "prm_cost": cost})
    records = RecordsConfig()

    async def run_all() -> list[dict[str, Any]]:
        rows = []
        for method, budget, seed, problem_id, problem, reference in tasks:
            search_seed = derive_seed(seed, problem_id)  # as jobs.evaluate seeds a search
            scorer = CachedTokenCounter(SimScorer(sim, seed=search_seed))
            config = parse_search_config({"algorithm": method})
            result = await run_search(
                problem, config, SimPolicy(sim, seed=search_seed), scorer, budget, search_seed
            )
            graded = await grade_result(result, reference, problem_id=problem_id, compare=_exact)
            tokens = result.tokens
            rows.append(
                {
                    "cost": cost,
                    "method": method,
                    "budget": budget,
                    "seed": seed,
                    "problem_id": problem_id,
                    "correct": result.chosen_answer is not None
                    and result.chosen_answer.strip() == reference,
                    "policy_output": tokens.policy_output_tokens,
                    "prm_input": tokens.prm_input_tokens,
                    "prm_cached": scorer.cached,
                    "prm_output": tokens.prm_output_tokens,
                    "prm_calls": tokens.scorer_requests,
                    **yield_counts(graded, records),
                }
            )
        return rows

    return asyncio.run(run_all())


def run_grid(spec: GridSpec) -> pd.DataFrame:
    """Every search of `spec` under each cost model: one row per search."""
    problems = simulated_problems(spec.problems, seed=spec.problem_seed)
    tasks: list[Task] = [
        (m, b, s, p.problem_id, p.problem, p.reference)
        for m in spec.methods
        for b in spec.budgets
        for s in spec.seeds
        for p in problems
    ]
    size = max(1, min(50, len(tasks) // (spec.workers * 8) or 1))
    jobs = [(c, tasks[i : i + size]) for c in COSTS for i in range(0, len(tasks), size)]
    rows: list[dict[str, Any]] = []
    if spec.workers == 1:
        for cost, chunk in jobs:
            rows += _run_tasks(cost, spec.params, chunk)
    else:
        with concurrent.futures.ProcessPoolExecutor(spec.workers) as pool:
            futures = [pool.submit(_run_tasks, c, spec.params, chunk) for c, chunk in jobs]
            for future in futures:
                rows += future.result()
    frame = pd.DataFrame(rows)
    _check_same_searches(frame)
    return frame


def _check_same_searches(frame: pd.DataFrame) -> None:
    """The cost model must change tokens only: every search's counts agree across models."""
    keys = ["method", "budget", "seed", "problem_id"]
    wide = frame.pivot_table(
        index=keys, columns="cost", values=[*COUNTS, "policy_output", "correct"], aggfunc="first"
    )
    for column in (*COUNTS, "policy_output", "correct"):
        differs = wide[(column, GENPRM)] != wide[(column, ONE_PASS)]
        if differs.any():
            raise AssertionError(
                f"{column} differs between cost models for {int(differs.sum())} searches: "
                "the PRM's cost must not change a search"
            )


def yield_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (cost, method, budget): sums over seeds and problems, and the rates."""
    sums = (
        frame.groupby(["cost", "method", "budget"], sort=False)
        .agg(
            searches=("problem_id", "size"),
            accuracy=("correct", "mean"),
            **{c: (c, "sum") for c in (*TOKENS, *COUNTS)},
        )
        .reset_index()
    )
    sums["total"] = sums["policy_output"] + sums["prm_input"] + sums["prm_output"]
    sums["prm_per_policy_token"] = (sums["prm_input"] + sums["prm_output"]) / sums["policy_output"]
    sums["cached_share"] = sums["prm_cached"] / sums["prm_input"].where(sums["prm_input"] > 0)
    # what an engine with a prefix cache computes: the cached PRM input left out
    sums["computed"] = sums["total"] - sums["prm_cached"]
    for count in COUNTS:
        sums[f"{count}_per_1k_total"] = 1000.0 * sums[count] / sums["total"]
        sums[f"{count}_per_1k_computed"] = 1000.0 * sums[count] / sums["computed"]
    return sums


def yield_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Per cost model and budget: BG-MCTS's yield over repeated sampling's, per count."""
    rows = []
    for (cost, budget), group in table.groupby(["cost", "budget"], sort=False):
        by = group.set_index("method")
        if not {"bg_mcts", "repeated_sampling"} <= set(by.index):
            continue
        row: dict[str, Any] = {"cost": cost, "budget": budget}
        for count in ("correct_trajectories", "dpo_pairs", "step_pairs"):
            rs = by.loc["repeated_sampling", f"{count}_per_1k_total"]
            row[count] = by.loc["bg_mcts", f"{count}_per_1k_total"] / rs if rs else float("nan")
        rs = by.loc["repeated_sampling", "correct_trajectories_per_1k_computed"]
        bg = by.loc["bg_mcts", "correct_trajectories_per_1k_computed"]
        row["correct_trajectories_computed"] = bg / rs if rs else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _k(budget: int) -> str:
    return f"{budget // 1000}K" if budget % 1000 == 0 else f"{budget:,}"


def yield_markdown(table: pd.DataFrame) -> str:
    lines = [
        "| PRM cost | method | B | searches | acc | policy out tok | PRM in tok (cached) "
        "| PRM out tok | PRM tok / policy tok | correct traj. (/1k tot) | DPO pairs (/1k tot) "
        "| step pairs (/1k tot) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for _, r in table.iterrows():
        cached = f"{r['cached_share']:.0%}" if pd.notna(r["cached_share"]) else "-"
        lines.append(
            f"| {r['cost']} | {r['method']} | {_k(int(r['budget']))} | {int(r['searches'])} "
            f"| {r['accuracy']:.3f} | {int(r['policy_output']):,} "
            f"| {int(r['prm_input']):,} ({cached}) | {int(r['prm_output']):,} "
            f"| {r['prm_per_policy_token']:.2f} | "
            + " | ".join(
                f"{int(r[c]):,} ({r[f'{c}_per_1k_total']:.3g})"
                for c in ("correct_trajectories", "dpo_pairs", "step_pairs")
            )
            + " |"
        )
    return "\n".join(lines)


def ratio_markdown(ratios: pd.DataFrame) -> str:
    lines = [
        "| PRM cost | B | correct traj. BG-MCTS / RS | DPO pairs BG-MCTS / RS "
        "| step pairs BG-MCTS / RS | correct traj. per computed token BG-MCTS / RS |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for _, r in ratios.iterrows():
        lines.append(
            f"| {r['cost']} | {_k(int(r['budget']))} | {r['correct_trajectories']:.3f} "
            f"| {r['dpo_pairs']:.3f} | {r['step_pairs']:.3f} "
            f"| {r['correct_trajectories_computed']:.3f} |"
        )
    return "\n".join(lines)


def headline(table: pd.DataFrame, ratios: pd.DataFrame, cost: Cost) -> dict[str, float]:
    """At the largest budget: BG-MCTS's PRM tokens per policy token and its yield ratio."""
    budget = int(table["budget"].max())
    bg = table[(table["cost"] == cost) & (table["method"] == "bg_mcts")]
    bg = bg[bg["budget"] == budget]
    ratio = ratios[(ratios["cost"] == cost) & (ratios["budget"] == budget)]
    return {
        "budget": float(budget),
        "prm_tokens_per_policy_token": float(bg["prm_per_policy_token"].iloc[0]),
        "yield_ratio_vs_rs": float(ratio["correct_trajectories"].iloc[0]),
    }


__all__ = [
    "COSTS",
    "FULL",
    "QUICK",
    "CachedTokenCounter",
    "GridSpec",
    "headline",
    "ratio_markdown",
    "run_grid",
    "yield_markdown",
    "yield_ratios",
    "yield_table",
]
