"""The night allocation benchmark's embedded half: real runs of the embedded default.

For each seed, two ``python -m jobs.synthesize`` runs of configs/local.yaml (SmolLM2-135M on
llama.cpp, GenPRM) on the same problems at the same B: uniform (``allocation`` off) and the
allocator (``allocation: {enabled: true}``, its defaults). What each kept and spent is read
back from its run folder into the simulated half's `NightTally`, so both halves print the
same tables: kept rows per table (the tables' row counts), policy tokens (the trees'
C_used), computed scorer tokens (``prm_input_tokens`` less ``prm_prompt_cached_tokens``,
plus ``prm_output_tokens``). A problem is easy / medium / hard by its share of right answers
over every tree of both arms and all seeds (> 0.9, < 0.1; none answered: hard), the same
problem in both arms. Finished runs are reused (``<work>/<run id>.done``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.support.synthesis import (
    LOCAL,
    base_config,
    edited,
    open_run,
    run_variant,
    synthesize_once,
)
from pipeline.evaluation.night_allocation import NightTally
from pipeline.run.allocation import ROW_TABLES
from pipeline.run.allocation_report import probe_outcome

ARMS = ("uniform", "allocator")
# a selection of the embedded default's one-step problems no earlier benchmark searched
SOURCE = {"kind": "arithmetic", "seed": 7, "max_steps": 1}
Run = tuple[list[dict[str, Any]], dict[str, Counter[str]]]  # trees rows; problem -> rows


def run_night(work: Path, arm: str, seed: int, problems: int, budget: int) -> Run:
    """One arm's night (run, or reused when finished) and what its run folder holds."""
    base = base_config(LOCAL)
    config = run_variant(
        base,
        f"night-{arm}-{problems}x{budget}-s{seed}",
        work / "runs",
        source={**SOURCE, "count": problems},
        count=problems,
        budget=budget,
        search={"algorithm": "bg_mcts"},
    )
    config = edited(config, seed=seed, allocation={"enabled": arm == "allocator"})
    synthesize_once(config, work)
    folder = open_run(config)
    rows: dict[str, Counter[str]] = {}
    for table in ROW_TABLES:
        for problem_id in folder.read(table).column("problem_id").to_pylist():
            rows.setdefault(problem_id, Counter())[table] += 1
    return folder.read("trees").to_pylist(), rows


def kinds(runs: Sequence[Run]) -> dict[str, str]:
    """Each problem's kind by its share of right answers over every tree of `runs`."""
    right, answered = Counter[str](), Counter[str]()
    for trees, _ in runs:
        for t in trees:
            right[t["problem_id"]] += t["n_correct"]
            answered[t["problem_id"]] += t["n_answered"]
    shares = {p: right[p] / answered[p] if answered[p] else 0.0 for p in answered}
    return {p: "easy" if s > 0.9 else "hard" if s < 0.1 else "medium" for p, s in shares.items()}


def tally(run: Run, kind: dict[str, str], problems: Sequence[str], budget: int) -> NightTally:
    """`run`'s kept rows and spend on `problems` (a problem may be listed more than once:
    a bootstrap sample), as the simulated half counts them."""
    trees, rows = run
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for t in trees:
        by_problem.setdefault(t["problem_id"], []).append(t)
    night = NightTally(total=float(len(problems) * budget))
    for p in problems:
        counts = rows.get(p, Counter())
        night.add(kind.get(p, "hard"), {table: [{}] * counts[table] for table in ROW_TABLES})
        for t in by_problem.get(p, []):
            night.trees += 1
            night.policy_tokens += t["c_used"]
            night.over_budget += max(0.0, t["c_used"] - t["budget"])
            cached = t["prm_prompt_cached_tokens"] or 0
            night.scorer_tokens += t["prm_input_tokens"] - cached + t["prm_output_tokens"]
            if t["tree"] == "probe":
                night.probes[probe_outcome(t)] += 1
                second = [s for s in by_problem[p] if s["tree"] == "second"]
                night.second_tokens[probe_outcome(t)] += int(sum(s["budget"] for s in second))
    night.over_budget += max(0.0, night.policy_tokens - night.total)
    return night


def pairs_ratio(uniform: Sequence[NightTally], allocated: Sequence[NightTally]) -> float:
    """Pairs per policy token, allocator over uniform, over the nights of each arm pooled."""

    def rate(nights: Sequence[NightTally]) -> float:
        pairs = sum(n.rows["dpo"] + n.rows["step_dpo"] for n in nights)
        return pairs / max(1.0, sum(n.policy_tokens for n in nights))

    if not rate(uniform):  # no pair at all under uniform B: no ratio (a bootstrap draw)
        return float("inf") if rate(allocated) else float("nan")
    return rate(allocated) / rate(uniform)


def bootstrap_interval(
    runs: dict[str, list[Run]], kind: dict[str, str], budget: int, draws: int = 2000
) -> tuple[float, float]:
    """The 95% percentile interval of `pairs_ratio` when the problems are drawn again with
    replacement (each drawn problem keeps its trees of every seed in both arms: paired)."""
    problems = sorted({t["problem_id"] for run in runs["uniform"] for t in run[0]})
    rng, ratios = random.Random(0), []
    for _ in range(draws):
        sample = rng.choices(problems, k=len(problems))
        nights = [[tally(r, kind, sample, budget) for r in runs[arm]] for arm in ARMS]
        ratio = pairs_ratio(*nights)
        if ratio == ratio:  # a draw with no pair in either arm says nothing
            ratios.append(ratio)
    draws = len(ratios)
    ratios.sort()
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]
