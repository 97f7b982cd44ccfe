"""What run.json and report.md say of a night under the allocator (pure: rows in, numbers out).

From the committed `trees` rows: the probes by outcome (mixed: right and wrong answers;
all_correct; none_correct: wrong answers only; unanswered), the second trees and their
budgets by their probe's outcome, the night's spend against its total T = problems
x budget (the policy output tokens and the cost units, C_used, of every tree), and the
dataset's difficulty mix: the training rows each table kept, by the probe's outcome, from
the probes and from the second trees (each tree's `kept_rows`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

OUTCOMES = ("mixed", "all_correct", "none_correct", "unanswered")
ALLOCATION_KEY = "allocation"
COLUMNS = (
    "problem_id",
    "tree",
    "n_correct",
    "n_incorrect",
    "n_answered",
    "budget",
    "c_used",
    "policy_output_tokens",
    "kept_rows",
)
TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")


def probe_outcome(tree: Mapping[str, Any]) -> str:
    """A probe's outcome from its trees row."""
    right, wrong = int(tree["n_correct"] or 0), int(tree["n_incorrect"] or 0)
    if not int(tree["n_answered"] or 0):
        return "unanswered"
    if right and wrong:
        return "mixed"
    return "all_correct" if right else "none_correct"


def allocation_summary(
    trees: Iterable[Mapping[str, Any]], problems: int, budget: int
) -> dict[str, Any]:
    """run.json's `allocation` block from the committed trees rows of a night of
    `problems` problems at `budget`."""
    rows = list(trees)
    outcome = {str(t["problem_id"]): probe_outcome(t) for t in rows if t["tree"] == "probe"}
    seconds = [t for t in rows if t["tree"] == "second"]
    given: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for t in seconds:
        kind = outcome.get(str(t["problem_id"]), "unanswered")
        given[kind] += int(t["budget"])
        count[kind] += 1
    allocated = [t for t in rows if t["tree"] in ("probe", "second")]
    mix = {k: {"probe": Counter[str](), "second": Counter[str]()} for k in OUTCOMES}
    for t in allocated:
        kind = outcome.get(str(t["problem_id"]), "unanswered")
        for entry in t.get("kept_rows") or ():
            mix[kind][str(t["tree"])][str(entry["table"])] += int(entry["rows"])
    return {
        "night_total": problems * budget,
        "probes": len(outcome),
        "probe_outcomes": {k: sum(1 for v in outcome.values() if v == k) for k in OUTCOMES},
        "second_trees": len(seconds),
        "second_trees_by_outcome": {k: count[k] for k in OUTCOMES},
        "second_budget_by_outcome": {k: given[k] for k in OUTCOMES},
        "cost_units": round(sum(float(t["c_used"]) for t in allocated), 1),
        "policy_output_tokens": sum(int(t["policy_output_tokens"]) for t in allocated),
        # the kept rows by the probe's outcome: {outcome: {probe|second: {table: rows}}}
        "rows_by_outcome": {
            k: {tree: {table: rows[table] for table in TABLES} for tree, rows in trees.items()}
            for k, trees in mix.items()
        },
    }


def allocation_markdown(summary: Mapping[str, Any]) -> list[str]:
    """report.md's section on the night allocator."""
    lines = [
        "## Night allocator",
        "",
        f"{summary['probes']} probe trees, {summary['second_trees']} second trees; the night's "
        f"total {summary['night_total']:,} cost units (problems x budget), spent "
        f"{summary['cost_units']:,} ({summary['policy_output_tokens']:,} policy output tokens).",
        "",
        "| probe outcome | probes | second trees | second-tree budget |",
        "|---|---:|---:|---:|",
    ]
    for kind in OUTCOMES:
        lines.append(
            f"| {kind} | {summary['probe_outcomes'][kind]} | "
            f"{summary['second_trees_by_outcome'][kind]} | "
            f"{summary['second_budget_by_outcome'][kind]:,} |"
        )
    mix = summary.get("rows_by_outcome")
    if mix:  # a run.json written before the mix was counted has none
        lines += [
            "",
            "The difficulty mix: kept training rows by the probe's outcome, from the probe "
            "+ from the second tree.",
            "",
            "| probe outcome | " + " | ".join(TABLES) + " |",
            "|---|" + "---:|" * len(TABLES),
        ]
        for kind in OUTCOMES:
            cells = [f"{mix[kind]['probe'][t]} + {mix[kind]['second'][t]}" for t in TABLES]
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return [*lines, ""]


__all__ = [
    "ALLOCATION_KEY",
    "COLUMNS",
    "OUTCOMES",
    "TABLES",
    "allocation_markdown",
    "allocation_summary",
    "probe_outcome",
]
