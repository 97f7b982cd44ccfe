"""Markdown rendering: the paper's table layouts (methods x budgets) and report.md."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.report.curves import tokens_label
from pipeline.report.load import RunData
from pipeline.report.tables import PERCENTILES, ungraded_chosen

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

FIXED_BUDGET_NOTE = (
    "[^fixed]: Per-instance fixed-budget accounting (paper App. C): every problem is searched "
    "independently with a nominal budget B; a search that stops early (LiteSearch's rule) "
    "contributes its tree state at the stop as its result at budget B, and its consumed "
    "tokens are below B. The tree rows already hold that state, so the tables read them "
    "as they are."
)


def redistribution_note(methods: Sequence[str]) -> str:
    applied = ", ".join(f"`{m}`" for m in methods) if methods else "none in this run"
    return (
        "[^redistributed]: Budget-redistributed aggregation (paper App. C), figures only: "
        "at a nominal budget B the early-stopped instances save "
        "`R = Σ_{i∈I_stop} (B − B_actual,i)`, and the active instances are evaluated on their "
        "largest-budget trace at `B_adj = min(B + R/|I_act|, B_max)`; stopped instances keep "
        f"their final state. Methods with early-stopped trees: {applied}. Without early "
        "stops R = 0 and this is the plain evaluation at B."
    )


def fraction(value: float) -> str:
    """The paper's .373 style; '–' for a missing value."""
    if value is None or math.isnan(value):
        return "–"
    text = f"{value:.3f}"
    return text[1:] if text.startswith("0.") else text


def scientific(value: float) -> str:
    """2.183×10⁻³ (App. K's style)."""
    if value is None or math.isnan(value):
        return "–"
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.3e}".split("e")
    power = str(int(exponent)).translate(_SUPERSCRIPT)
    return f"{mantissa}×10{power}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "r") -> str:
    separator = [":--"] + ["--:" if align == "r" else ":--"] * (len(header) - 1)
    lines = [header, separator, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def _cells(table: Any) -> tuple[list[str], list[int], dict[tuple[str, int], Any]]:
    methods = [str(m) for m in dict.fromkeys(table["method"])]
    budgets = sorted(int(b) for b in set(table["budget"]))
    cells = {(str(r["method"]), int(r["budget"])): r for _, r in table.iterrows()}
    return methods, budgets, cells


def accuracy_markdown(table: Any) -> str:
    """Table 1: methods x budgets, '.373 ± .012' with mean tokens; the best per budget in bold."""
    methods, budgets, cells = _cells(table)
    best = {
        b: max((cells[m, b]["accuracy_mean"] for m in methods if (m, b) in cells), default=None)
        for b in budgets
    }
    rows = []
    for m in methods:
        row, means = [m], []
        for b in budgets:
            cell = cells.get((m, b))
            if cell is None:
                row.append("–")
                continue
            mean, std = float(cell["accuracy_mean"]), float(cell["accuracy_std"])
            means.append(mean)
            text = fraction(mean)
            if mean == best[b]:
                text = f"**{text}**"
            if not math.isnan(std):
                text += f" ± {fraction(std)}"
            row.append(f"{text} ({tokens_label(float(cell['tokens_mean']))} tok)")
        row.append(fraction(sum(means) / len(means)) if means else "–")
        rows.append(row)
    header = ["Method \\ Budget B", *(tokens_label(b) for b in budgets), "avg"]
    return markdown_table(header, rows)


def answered_markdown(table: Any) -> str:
    """Answered-node statistics: Total, Cor. and precision per budget (means over seeds)."""
    methods, budgets, cells = _cells(table)
    header = ["Method"]
    for b in budgets:
        header += [f"{tokens_label(b)} Total", f"{tokens_label(b)} Cor.", f"{tokens_label(b)} (%)"]
    rows = []
    for m in methods:
        row = [m]
        for b in budgets:
            cell = cells.get((m, b))
            if cell is None:
                row += ["–"] * 3
            else:
                row += [
                    f"{float(cell['answered']):.1f}",
                    f"{float(cell['correct']):.1f}",
                    fraction(float(cell["precision"])),
                ]
        rows.append(row)
    return markdown_table(header, rows)


def percentiles_markdown(table: Any) -> str:
    """App. K: Q percentiles per method, in scientific notation."""
    header = ["Method", "B", "scored nodes", *(f"p{p}" for p in PERCENTILES)]
    rows = [
        [
            str(r["method"]),
            tokens_label(float(r["budget"])),
            str(int(r["nodes"])),
            *(scientific(float(r[f"p{p}"])) for p in PERCENTILES),
        ]
        for _, r in table.iterrows()
    ]
    return markdown_table(header, rows)


META_VALUE_CHARS = 300  # meta.json may hold a whole config; the file itself has the rest


def _meta_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if len(text) > META_VALUE_CHARS:
        text = text[:META_VALUE_CHARS] + " … (see meta.json)"
    return "`" + text.replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def summary_markdown(run: RunData) -> str:
    """The grid: methods (algorithms), budgets, seeds, problems, counts, times, meta.json."""
    trees = run.trees
    algorithms = dict(zip(trees["method"], trees["algorithm"], strict=True))
    methods = ", ".join(
        f"`{m}`" + (f" ({algorithms[m]})" if algorithms[m] != m else "") for m in run.methods
    )
    seeds = sorted(int(s) for s in set(trees["seed"]))
    rows = [
        ["methods", methods],
        ["budgets B", ", ".join(tokens_label(b) for b in run.budgets)],
        ["seeds", ", ".join(str(s) for s in seeds)],
        ["problems", str(trees["problem_id"].nunique())],
        ["trees", str(len(trees))],
        ["nodes", str(len(run.nodes))],
        ["early-stopped trees", str(int(trees["early_stopped"].astype(bool).sum()))],
        ["search time (sum over trees)", f"{float(trees['wall_time_s'].sum()):.1f} s"],
    ]
    wall = run.meta.get("wall_time_s")
    timed = isinstance(wall, int | float) and not isinstance(wall, bool)
    if isinstance(wall, int | float) and timed:
        rows.append(["wall time of the run", f"{wall:.1f} s"])
    text = markdown_table(["", ""], rows, align="l")
    other = {k: v for k, v in run.meta.items() if not (timed and k == "wall_time_s")}
    if other:
        meta_rows = [[str(k), _meta_value(v)] for k, v in other.items()]
        text += "\n\nRun metadata (`meta.json`):\n\n" + markdown_table(
            ["key", "value"], meta_rows, "l"
        )
    return text


def _image(path: Path, alt: str) -> str:
    return f"![{alt}]({path.name})"


def _ungraded_note(run: RunData) -> str:
    """What the accuracy counts as not correct without knowing: chosen answers whose
    comparison with the reference was cut off by the grading time limit."""
    n = ungraded_chosen(run.trees)
    if not n:
        return ""
    trees = "tree" if n == 1 else "trees"
    return (
        f" **The chosen answer of {n} {trees} could not be graded in time** (its comparison "
        "with the reference was cut off by `grade_timeout_s`: correct or not is unknown); "
        "it counts as not correct, so these accuracies are lower bounds."
    )


def report_markdown(
    run: RunData,
    tables: Mapping[str, str],
    figures: Sequence[Path],
    tree_pictures: Mapping[str, Sequence[Path]],
    redistributed: Sequence[str],
    *,
    budget_seed: tuple[int, int] | None = None,
) -> str:
    """The whole report.md; every PNG is linked relative to the report's folder."""
    parts = [
        "# Evaluation report",
        "## Grid",
        summary_markdown(run),
        "## Accuracy (Table 1 layout)[^fixed]",
        "Cell: mean accuracy over seeds ± sample std over seeds (accuracy of a seed = mean "
        "correctness over problems), with the mean consumed tokens per tree; **bold** = best "
        "per budget; avg = mean over budgets. CSV: `accuracy.csv`." + _ungraded_note(run),
        tables["accuracy"],
        "## Answered-node statistics (data synthesis)[^fixed]",
        "Answered nodes and correct answered nodes summed over problems, mean over seeds; "
        "(%) = precision = Cor. / Total. CSV: `answered_nodes.csv`.",
        tables["answered_nodes"],
        "## PRM score percentiles (App. K)",
        "Q over scored nodes (the root and failed nodes excluded), pooled over seeds and "
        "problems, at each method's largest budget. CSV: `prm_percentiles.csv`.",
        tables["prm_percentiles"],
    ]
    if "yield" in tables:
        parts += [
            "## Data yield (training data per 1,000 tokens)[^fixed]",
            "Summed over every search of a method and budget (seeds and problems pooled): "
            "distinct correct trajectories, DPO pairs and step-level pairs that pass the "
            "quality gates (`records.gates`), PRM steps with a value known from the answers "
            "below them; in brackets per 1,000 policy output tokens and per 1,000 total "
            "tokens (policy output + PRM input + PRM output). CSV: `yield.csv`.",
            tables["yield"],
        ]
    parts += [
        "## Anytime curves[^redistributed]",
        "Lines: each method's largest-budget runs read at growing budgets (each tree in the "
        "state of its last step within the budget), averaged over problems and seeds, plotted "
        "at the mean consumed tokens. Dots: each nominal budget's own runs."
        + (
            " The last figure: the data yield per 1,000 total tokens at each budget."
            if "yield" in tables
            else ""
        ),
        *(_image(f, f.stem.replace("_", " ")) for f in figures),
    ]
    if tree_pictures:
        where = f" (B={budget_seed[0]}, seed {budget_seed[1]})" if budget_seed else ""
        parts += [
            f"## Search trees (Fig. 6){where}",
            "Star: correct answer; triangle: incorrect answer; circle: intermediate step; "
            "X: failed node. Darker = expanded later. Red outline and edge: created through "
            "the generative child.",
        ]
        for problem, paths in tree_pictures.items():
            parts.append(f"### Problem `{problem}`")
            parts += [_image(p, p.stem) for p in paths]
    parts += ["---", FIXED_BUDGET_NOTE, redistribution_note(redistributed)]
    return "\n\n".join(parts) + "\n"
