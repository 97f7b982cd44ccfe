"""Tree pictures like the paper's Fig. 6: a top-down layout shaded by expansion order.

Markers follow the paper: a star is a correct answered node, a triangle an
incorrect one, a circle any other node (an X a failed one); darker blue is a
later search step.  Nodes created through BG-MCTS's virtual generative child
get a red outline and a red edge from their parent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd  # type: ignore[import-untyped, unused-ignore]
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from pipeline.report.load import RunData

DPI = 120
MAX_DRAWN_NODES = 1500  # beyond this a picture is unreadable; the first-created nodes are drawn
PREFERRED_ALGORITHMS = ("bg_mcts", "mcts")  # the paper's Fig. 6 pair, drawn first
# Blues without its near-white end, so the earliest nodes stay visible
_CMAP = ListedColormap(plt.get_cmap("Blues")(np.linspace(0.2, 1.0, 256)))
GENERATIVE_COLOR = "tab:red"


def tree_layout(
    node_ids: Sequence[int], parent_ids: Sequence[int | None]
) -> dict[int, tuple[float, float]]:
    """Top-down tidy layout: leaves on consecutive x slots in depth-first order.

    A parent sits midway between its first and last child, so subtrees never
    overlap; y is minus the depth.  Children are ordered by id (creation
    order).  Iterative, because search trees can be deeper than Python's
    recursion limit.
    """
    present = set(node_ids)
    children: dict[int, list[int]] = {n: [] for n in node_ids}
    roots = []
    for node, parent in zip(node_ids, parent_ids, strict=True):
        if parent is None or parent not in present:
            roots.append(node)
        else:
            children[parent].append(node)
    for kids in children.values():
        kids.sort()
    x: dict[int, float] = {}
    depth: dict[int, int] = {}
    next_leaf = 0.0
    for root in sorted(roots):
        depth[root] = 0
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            kids = children[node]
            if done:
                x[node] = (x[kids[0]] + x[kids[-1]]) / 2
            elif not kids:
                x[node], next_leaf = next_leaf, next_leaf + 1
            else:
                stack.append((node, True))
                for kid in reversed(kids):
                    depth[kid] = depth[node] + 1
                    stack.append((kid, False))
    return {n: (x[n], -float(depth[n])) for n in node_ids}


def safe_name(text: str) -> str:
    """A file-name-safe form of a method or problem label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def picture_methods(run: RunData, budget: int, seed: int) -> list[str]:
    """Methods that ran (budget, seed); BG-MCTS and MCTS first (the paper's pair)."""
    trees = run.trees
    ran = trees[(trees["budget"] == budget) & (trees["seed"] == seed)]
    algorithm = dict(zip(ran["method"], ran["algorithm"], strict=True))
    methods = [m for m in run.methods if m in algorithm]

    def rank(method: str) -> int:
        alg = algorithm[method]
        return PREFERRED_ALGORITHMS.index(alg) if alg in PREFERRED_ALGORITHMS else 2

    return sorted(methods, key=rank)  # stable: grid order within a rank


def pick_problems(run: RunData, count: int) -> tuple[int, int, list[str]]:
    """(budget, seed, problems): the largest budget, seed 0 (else the smallest seed), and
    the first `count` problems (grid order) where the pictured methods' correctness
    differs, topped up with the next problems when too few differ."""
    trees = run.trees
    budget = int(trees["budget"].max())
    at_budget = trees[trees["budget"] == budget]
    seeds = sorted(int(s) for s in at_budget["seed"].unique())
    seed = 0 if 0 in seeds else seeds[0]
    methods = picture_methods(run, budget, seed)
    rows = at_budget[(at_budget["seed"] == seed) & at_budget["method"].isin(methods)]
    problems = [str(p) for p in dict.fromkeys(rows["problem_id"])]
    verdicts = rows.groupby("problem_id", sort=False)["correct"].nunique()
    differ = [p for p in problems if verdicts.get(p, 1) > 1]
    rest = [p for p in problems if p not in differ]
    return budget, seed, (differ + rest)[: max(count, 0)]


def _legend() -> list[Line2D]:
    def handle(marker: str, label: str, **style: Any) -> Line2D:
        style.setdefault("markerfacecolor", _CMAP(0.6))
        style.setdefault("markeredgecolor", "black")
        return Line2D([], [], marker=marker, linestyle="", markersize=9, label=label, **style)

    return [
        handle("*", "correct answer"),
        handle("^", "incorrect answer"),
        handle("o", "intermediate step"),
        handle("X", "failed", markerfacecolor="0.6"),
        handle("o", "via generative child", markeredgecolor=GENERATIVE_COLOR, markeredgewidth=2),
    ]


def draw_tree(nodes: Any, title: str, path: Path) -> Path:
    """Draw one tree (its rows of eval_nodes) to `path`."""
    nodes = nodes.sort_values("node_id")
    total = len(nodes)
    if total > MAX_DRAWN_NODES:
        # ids follow creation order and parents precede children: a connected prefix
        nodes = nodes.iloc[:MAX_DRAWN_NODES]
        title += f"\n{total} nodes; the first {MAX_DRAWN_NODES} created are drawn"
    else:
        title += f" · {total} nodes"
    ids = [int(n) for n in nodes["node_id"]]
    parents = [None if p is None or p != p else int(p) for p in nodes["parent_id"]]
    pos = tree_layout(ids, parents)
    leaves = max(1.0, max(x for x, _ in pos.values()) + 1)
    depth = max(1.0, -min(y for _, y in pos.values()))
    width_in = min(28.0, max(7.0, 1.5 + 0.16 * leaves))
    fig, ax = plt.subplots(figsize=(width_in, min(16.0, max(4.5, 1.5 + 0.4 * depth))), dpi=DPI)
    generative = dict(zip(ids, nodes["from_generative"].astype(bool), strict=True))
    edges, colors = [], []
    for node, parent in zip(ids, parents, strict=True):
        if parent is not None and parent in pos:
            edges.append([pos[parent], pos[node]])
            colors.append(GENERATIVE_COLOR if generative[node] else "0.6")
    ax.add_collection(LineCollection(edges, colors=colors, linewidths=0.8, zorder=1))
    norm = Normalize(vmin=0, vmax=max(1, int(nodes["iteration"].max())))
    size = float(np.clip(4000 / max(total, 1), 18, 110))
    answered = nodes["answered"].astype(bool)
    correct = nodes["correct"].fillna(False).astype(bool) & answered
    failed = nodes["failed"].astype(bool)
    kinds = {
        "*": answered & correct & ~failed,
        "^": answered & ~correct & ~failed,
        "o": ~answered & ~failed,
        "X": failed,
    }
    for marker, mask in kinds.items():
        part = nodes[mask]
        if part.empty:
            continue
        xy = np.array([pos[int(n)] for n in part["node_id"]])
        edge = [GENERATIVE_COLOR if g else "black" for g in part["from_generative"].astype(bool)]
        width = [1.8 if g else 0.4 for g in part["from_generative"].astype(bool)]
        ax.scatter(
            xy[:, 0],
            xy[:, 1],
            c="0.6" if marker == "X" else part["iteration"].to_numpy(float),
            cmap=None if marker == "X" else _CMAP,
            norm=None if marker == "X" else norm,
            marker=marker,
            s=size * (2.2 if marker == "*" else 1.0),
            edgecolors=edge,
            linewidths=width,
            zorder=3 if marker in "*^" else 2,
        )
    # a colorbar about 0.4 inch wide whatever the figure width
    bar = fig.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=_CMAP), ax=ax, pad=0.01, fraction=0.6 / width_in
    )
    bar.locator = MaxNLocator(integer=True)  # search steps are whole numbers
    bar.update_ticks()
    bar.set_label("expansion order (search step; darker = later)")
    ax.set_title(title, fontsize=12)
    ax.set_ylabel("depth")
    ax.set_xticks([])
    ticks = range(0, int(depth) + 1, max(1, int(depth) // 10))
    ax.set_yticks([-t for t in ticks], [str(t) for t in ticks])
    ax.margins(0.03, 0.05)
    # below the axes, where it cannot hide nodes
    ax.legend(
        handles=_legend(), fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=5
    )
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_tree_pictures(run: RunData, out_dir: Path, count: int) -> dict[str, list[Path]]:
    """`trees_<method>_<problem>.png` for `count` problems; returns problem -> files."""
    if count <= 0 or run.nodes.empty:
        return {}
    budget, seed, problems = pick_problems(run, count)
    methods = picture_methods(run, budget, seed)
    nodes = run.nodes
    nodes = nodes[(nodes["budget"] == budget) & (nodes["seed"] == seed)]
    trees = run.trees
    trees = trees[(trees["budget"] == budget) & (trees["seed"] == seed)]
    pictures: dict[str, list[Path]] = {}
    for problem in problems:
        for method in methods:
            mine = nodes[(nodes["method"] == method) & (nodes["problem_id"] == problem)]
            row = trees[(trees["method"] == method) & (trees["problem_id"] == problem)]
            if mine.empty or row.empty:
                continue
            graded = row["correct"].iloc[0]
            verdict = "chosen answer " + (
                # null: its comparison was cut off by the grading time limit
                "ungraded" if pd.isna(graded) else "correct" if graded else "incorrect"
            )
            title = f"{method} · problem {problem} · B={budget} · seed {seed} · {verdict}"
            path = out_dir / f"trees_{safe_name(method)}_{safe_name(problem)}.png"
            pictures.setdefault(problem, []).append(draw_tree(mine, title, path))
    return pictures
