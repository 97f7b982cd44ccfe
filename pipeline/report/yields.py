"""The data-yield table: training data per 1,000 tokens, per method and budget.

Each search's four counts (`pipeline.records.yields`: correct distinct trajectories,
DPO pairs, step-level pairs that pass the quality gates, PRM steps with a known value)
are summed over every search of a (method, budget) - all seeds and problems pooled -
and divided by the tokens those searches spent: per 1,000 policy output tokens, and
per 1,000 total tokens (policy output + PRM input + PRM output; the policy's prompt
tokens are left out, as the budget leaves them out by default). Pooling (a ratio of
sums, not a mean of per-search ratios) is what a team paying for the tokens gets.

The same function reads a synthesis run's `trees` table (one method and budget) and an
evaluation's `eval_trees`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd  # type: ignore[import-untyped, unused-ignore]

from pipeline.records import YIELD_COUNTS
from pipeline.report.curves import DPI, SHAPES, tokens_label
from pipeline.report.markdown import markdown_table

YIELD_FIGURE = "yield_vs_budget.png"
TOKEN_COLUMNS = ("policy_output_tokens", "prm_input_tokens", "prm_output_tokens")
_NAMES = {
    "correct_trajectories": "correct trajectories",
    "dpo_pairs": "DPO pairs",
    "step_pairs": "step pairs",
    "prm_steps": "PRM steps",
}


def has_yield(trees: Any) -> bool:
    """Whether any tree carries the yield counts.  Trees written before the columns existed
    read back with them null (the run folder reads every part under today's schema), so a
    run from before has none and a run resumed across the upgrade has some."""
    return all(c in trees.columns for c in YIELD_COUNTS) and bool(
        trees[list(YIELD_COUNTS)].notna().all(axis=1).any()
    )


def yield_table(trees: Any, methods: list[str] | None = None) -> Any:
    """One row per (method, budget): searches, tokens, each count and its two rates.

    Columns: method, budget, searches, policy_output_tokens, total_tokens, then for each
    count C of `YIELD_COUNTS`: C (the sum), C_per_1k_policy, C_per_1k_total.
    """
    # Only trees with their counts: a tree written before the yield columns would add its
    # tokens without its data and understate every rate (`searches` says how many count).
    trees = trees[trees[list(YIELD_COUNTS)].notna().all(axis=1)]
    frame = trees.assign(
        total_tokens=sum(trees[c].astype("int64") for c in TOKEN_COLUMNS),
        budget=trees["budget"].astype(float).round().astype("int64"),
    )
    sums = {c: (c, "sum") for c in ("policy_output_tokens", "total_tokens", *YIELD_COUNTS)}
    table = (
        frame.groupby(["method", "budget"], sort=False)
        .agg(searches=("problem_id", "size"), **sums)
        .reset_index()
    )
    for count in YIELD_COUNTS:
        for per, tokens in (("policy", "policy_output_tokens"), ("total", "total_tokens")):
            spent = table[tokens].astype(float)
            table[f"{count}_per_1k_{per}"] = (1000.0 * table[count] / spent).where(spent > 0)
    order = methods if methods is not None else [str(m) for m in pd.unique(trees["method"])]
    rank = {m: i for i, m in enumerate(order)}
    return (
        table.assign(_rank=table["method"].map(rank))
        .sort_values(["_rank", "budget"], kind="stable")
        .drop(columns="_rank")
        .reset_index(drop=True)
    )


def _rate(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.3g}"


def yield_markdown(table: Any) -> str:
    """Methods x budgets; a cell: the sum, then per 1k policy / per 1k total tokens."""
    header = [
        "Method",
        "B",
        "searches",
        "policy out tok",
        "total tok",
        *(f"{_NAMES[c]} (/1k pol, /1k tot)" for c in YIELD_COUNTS),
    ]
    rows = [
        [
            str(r["method"]),
            tokens_label(float(r["budget"])),
            str(int(r["searches"])),
            f"{int(r['policy_output_tokens']):,}",
            f"{int(r['total_tokens']):,}",
            *(
                f"{int(r[c]):,} ({_rate(r[f'{c}_per_1k_policy'])}, {_rate(r[f'{c}_per_1k_total'])})"
                for c in YIELD_COUNTS
            ),
        ]
        for _, r in table.iterrows()
    ]
    return markdown_table(header, rows)


def plot_yield(table: Any, path: Path) -> Path:
    """Four panels (one per count): per 1k total tokens against the budget, a line per method."""
    fig, axes = plt.subplots(1, len(YIELD_COUNTS), figsize=(18, 4.6), dpi=DPI)
    methods = list(dict.fromkeys(table["method"]))
    cmap = plt.get_cmap("tab20")  # 20 distinct colours: a grid has up to ~13 methods
    colors = [cmap(i) for i in range(20)]
    for ax, count in zip(axes, YIELD_COUNTS, strict=True):
        for i, method in enumerate(methods):
            mine = table[table["method"] == method]
            ax.plot(
                mine["budget"],
                mine[f"{count}_per_1k_total"],
                marker=SHAPES[i % len(SHAPES)],
                color=colors[i % len(colors)],
                label=method,
            )
        ax.set_title(f"{_NAMES[count]} per 1k total tokens")
        ax.set_xlabel("budget B")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 0.85, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


__all__ = ["YIELD_FIGURE", "has_yield", "plot_yield", "yield_markdown", "yield_table"]
