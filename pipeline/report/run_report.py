"""The report of a synthesis run: `report.md`, `report.json` and PNGs in the run folder.

Every number is recomputed from the run's committed Parquet (`trees` with its anytime
traces and node scores, `nodes` with the labelled answered nodes), so the report can be
rewritten at any time (`bgmcts report out/run=<id>`) and says the same thing as the data.
One thing the Parquet cannot hold comes from run.json: the engine answers whose token
counts were clamped as they entered (`pipeline.report.clamped_answers`).
The anytime figures and the PRM percentile table reuse the evaluation report's code
(`pipeline.report`): a synthesis run is read as a one-method, one-budget grid.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd  # type: ignore[import-untyped, unused-ignore]

from actors.scorer_kinds import SCORER_KINDS, ScorerKind
from pipeline.config import PricesConfig
from pipeline.report.anytime import (
    anytime_curves,
    budget_markers,
    early_stopping_methods,
)
from pipeline.report.clamped_answers import (
    ClampedAnswers,
    clamped_answers_note,
    clamped_as_json,
    clamped_from_manifest,
)
from pipeline.report.curves import DPI, write_curves
from pipeline.report.engine_reads import HEADER as READS_HEADER
from pipeline.report.engine_reads import (
    EngineReads,
    clamped_note,
    engine_reads,
    engine_reads_rows,
)
from pipeline.report.load import RunData, flatten_trace
from pipeline.report.markdown import fraction, percentiles_markdown
from pipeline.report.row_cost import (
    COLUMNS_READ,
    cost_per_row,
    cost_per_row_markdown,
    rows_per_gpu_hour_markdown,
)
from pipeline.report.tables import prm_percentiles_table
from pipeline.report.yields import has_yield, yield_markdown, yield_table
from pipeline.store.run_folder import MANIFEST, RunFolder
from search.scorer_kinds import DEFAULT_SCORER_KIND

# Two figures per tree, each named once, the same in the run summary, the report and docs:
# the answer the search chose is correct (what a user of the search gets), and any answered
# node is correct (the tree holds a correct trajectory for the training rows).
CHOSEN_CORRECT = "trees whose chosen answer is correct"
ANY_NODE_CORRECT = "trees with a correct answered node"

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
PRM_FIGURE = "prm_scores.png"
# What a report writes into a run folder (copied back to a bucket: `RunFolder.local_copy`).
REPORT_FILES = (REPORT_MD, REPORT_JSON, ".png")
_TREE_COLUMNS = [
    "problem_id",
    "wall_time_s",
    "n_nodes",
    "n_answered",
    "n_correct",
    "max_depth",
    "max_width",
    "c_used",
    "correct",
]


@dataclass(frozen=True)
class ReportNumbers:
    trees: int
    answered_trees: int
    answered_tree_rate: float | None
    answered_nodes: int
    correct_nodes: int
    precision: float | None
    correct_per_tree: float | None
    trees_with_correct: int
    chosen_correct: int
    chosen_graded: int
    cost_units: float
    policy_output_tokens: int
    policy_input_tokens: int
    prm_input_tokens: int
    prm_output_tokens: int
    cost_per_correct_node: float | None  # cost units (output tokens by default)
    output_tokens_per_correct_node: float | None
    money: float | None
    money_per_correct_node: float | None
    currency: str | None
    scored_nodes: int
    # per engine: prompt tokens sent, served from its cache, computed, hit rate
    engine_reads: dict[str, dict[str, Any]]
    # answered nodes without a label: their comparison with the reference was cut off by
    # the grading time limit (neither correct nor incorrect; precision leaves them out)
    ungraded_nodes: int = 0
    # per engine: its answers whose token counts were clamped (from run.json's summary)
    clamped_answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the run's tokens and money per kept row of each training table (`row_cost`)
    cost_per_row: dict[str, Any] = field(default_factory=dict)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def read_run(folder: RunFolder) -> tuple[Any, Any]:
    """The committed `trees` (as a pyarrow Table) and `nodes` (pandas) of a run folder."""
    return folder.read("trees"), folder.read("nodes").to_pandas()


def report_numbers(trees: Any, nodes: Any, prices: PricesConfig | None = None) -> ReportNumbers:
    """The report's headline numbers from the `trees` table and the `nodes` frame."""
    t = trees.drop_columns(["trace", "node_scores"]).to_pandas()
    n_trees = len(t)
    answered_trees = int((t["n_answered"] > 0).sum()) if n_trees else 0
    answered = len(nodes)
    correct = int(nodes["label"].eq(True).sum()) if answered else 0
    ungraded = int(nodes["label"].isna().sum()) if answered else 0
    graded = t["correct"].dropna() if n_trees else pd.Series([], dtype=bool)
    tokens = {
        k: int(t[k].sum()) if n_trees else 0
        for k in ("policy_output_tokens", "policy_input_tokens", "prm_input_tokens")
    }
    tokens["prm_output_tokens"] = int(t["prm_output_tokens"].sum()) if n_trees else 0
    cost = float(t["c_used"].sum()) if n_trees else 0.0
    money = None
    if prices is not None:
        money = prices.weigh(tokens) / 1e6
    scores = trees.column("node_scores").to_pylist() if n_trees else []
    reads = {name: r.as_dict() for name, r in engine_reads(t).items()}
    return ReportNumbers(
        engine_reads=reads,
        trees=n_trees,
        answered_trees=answered_trees,
        answered_tree_rate=_ratio(answered_trees, n_trees),
        answered_nodes=answered,
        correct_nodes=correct,
        precision=_ratio(correct, answered - ungraded),
        ungraded_nodes=ungraded,
        correct_per_tree=_ratio(correct, n_trees),
        trees_with_correct=int((t["n_correct"] > 0).sum()) if n_trees else 0,
        chosen_correct=int(graded.astype(bool).sum()),
        chosen_graded=len(graded),
        cost_units=cost,
        cost_per_correct_node=_ratio(cost, correct),
        output_tokens_per_correct_node=_ratio(tokens["policy_output_tokens"], correct),
        money=money,
        money_per_correct_node=None if money is None else _ratio(money, correct),
        currency=None if prices is None else prices.currency,
        scored_nodes=sum(len(s or ()) for s in scores),
        policy_output_tokens=tokens["policy_output_tokens"],
        policy_input_tokens=tokens["policy_input_tokens"],
        prm_input_tokens=tokens["prm_input_tokens"],
        prm_output_tokens=tokens["prm_output_tokens"],
    )


def _as_grid(trees: Any) -> RunData:
    """A synthesis run as a one-method, one-budget evaluation grid (for the anytime code)."""
    frame = trees.drop_columns(["trace", "node_scores"]).to_pandas()
    frame = pd.DataFrame(
        {
            "method": frame["method"].astype(str),
            "budget": frame["budget"].astype(float).round().astype(int),
            "seed": 0,  # every tree is its own problem; curves average over them
            "problem_id": frame["problem_id"],
            "early_stopped": frame["stop_reason"] == "early_stop",
            "c_used": frame["c_used"].astype(float),
            "correct": frame["correct"].fillna(False).astype(bool),
            "answered": frame["n_answered"] > 0,
            "max_depth": frame["max_depth"],
            "max_width": frame["max_width"],
        }
    )
    trace = trees.column("trace").fill_null([])
    scores = trees.column("node_scores").to_pylist()
    node_rows = [
        {
            "method": m,
            "budget": b,
            "node_id": i + 1,  # not the root
            "failed": False,
            "q": q,
        }
        for m, b, s in zip(frame["method"], frame["budget"], scores, strict=True)
        for i, q in enumerate(s or ())
    ]
    nodes = pd.DataFrame(node_rows, columns=["method", "budget", "node_id", "failed", "q"])
    return RunData(trees=frame, nodes=nodes, trace=flatten_trace(trace))


def _prm_figure(trees: Any, nodes: Any, path: Path) -> Path:
    scores = [q for s in trees.column("node_scores").to_pylist() for q in (s or ())]
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=DPI)
    bins = [i / 20 for i in range(21)]
    ax.hist(scores, bins=bins, color="0.7", label=f"all scored nodes ({len(scores)})")
    if len(nodes):
        # an ungraded node (null label) is neither
        label = nodes["label"]
        kinds = (
            (label.eq(True), "correct", "tab:green"),
            (label.eq(False), "incorrect", "tab:red"),
        )
        for mask, name, color in kinds:
            values = nodes.loc[mask, "score"].to_numpy(float)
            ax.hist(
                values,
                bins=bins,
                histtype="step",
                linewidth=2,
                color=color,
                label=f"answered, {name} ({len(values)})",
            )
    ax.set_xlabel("PRM score Q")
    ax.set_ylabel("nodes")
    ax.set_title("PRM score distribution")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, [":--"] + ["--:"] * (len(header) - 1), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def _reads(n: ReportNumbers) -> dict[str, EngineReads]:
    return {
        name: EngineReads(r["sent"], r["cached"], r.get("clamped_trees", 0))
        for name, r in n.engine_reads.items()
    }


def _reads_rows(n: ReportNumbers) -> list[list[str]]:
    return engine_reads_rows(_reads(n))


def _policy_input(n: ReportNumbers) -> str:
    """The policy's prompt tokens: counted as the engines report them, charged only with a
    `search.cost.policy_input` weight; a prompt is never empty, so none at all with output
    means an engine that reports none (an OpenAI-compatible server without `usage`)."""
    if n.policy_input_tokens == 0 and n.policy_output_tokens > 0:
        return "not reported by the engine"
    return f"{n.policy_input_tokens:,}"


def _extremes(trees: Any, count: int = 5) -> tuple[Any, Any]:
    frame = trees.drop_columns(["trace", "node_scores"]).to_pandas()[_TREE_COLUMNS]
    ordered = frame.sort_values(["wall_time_s", "problem_id"], ascending=[False, True])
    return ordered.head(count), ordered.tail(count).iloc[::-1]


def _tree_rows(frame: Any) -> list[list[str]]:
    return [
        [
            f"`{r.problem_id}`",
            f"{r.wall_time_s:.1f}",
            str(r.n_nodes),
            str(r.n_answered),
            str(r.n_correct),
            str(r.max_depth),
            str(r.max_width),
            f"{r.c_used:,.0f}",
            "–" if r.correct is None or pd.isna(r.correct) else ("yes" if r.correct else "no"),
        ]
        for r in frame.itertuples()
    ]


def training_rows_markdown(trees: Any, counts: dict[str, int]) -> str:
    """Rows per training table, problems by difficulty, and what each quality gate dropped."""
    names = [c for c in ("sft", "dpo", "step_dpo", "prm", "kto") if c in counts]
    rows = [[name, f"{counts[name]:,}"] for name in names]
    columns = set(trees.column_names) if trees is not None else set()
    difficulty: dict[str, int] = {}
    drops: dict[str, int] = {}
    if "difficulty" in columns:
        for value in trees.column("difficulty").to_pylist():
            difficulty[str(value)] = difficulty.get(str(value), 0) + 1
    if "gate_drops" in columns:
        for entries in trees.column("gate_drops").to_pylist():
            for entry in entries or ():
                drops[entry["gate"]] = drops.get(entry["gate"], 0) + int(entry["dropped"])
    parts = [_md_table(["table", "rows"], rows)]
    if difficulty:
        parts.append(
            "Problems by difficulty (their answered nodes all right, mixed, none right): "
            + ", ".join(f"{k} {v}" for k, v in sorted(difficulty.items()))
            + "."
        )
    gate_rows = [[f"`{k}`", str(v)] for k, v in sorted(drops.items()) if v]
    parts.append(
        "What the quality gates (`records.gates`) kept out of the training rows:\n\n"
        + (_md_table(["gate", "dropped"], gate_rows) if gate_rows else "nothing")
    )
    return "\n\n".join(parts)


def run_yield(trees: Any) -> Any | None:
    """The data-yield table of a synthesis run (one row per method and budget), or None for a
    run written before the `trees` table had the yield columns."""
    frame = trees.drop_columns(["trace", "node_scores"]).to_pandas()
    return yield_table(frame) if has_yield(frame) else None


_TREE_HEADER = [
    "problem",
    "wall s",
    "nodes",
    "answered",
    "correct",
    "depth",
    "width",
    "C_used",
    "chosen correct",
]
_YIELD_INTRO = (
    "Distinct correct trajectories, DPO pairs and step-level pairs that pass the "
    "quality gates, PRM steps with a known value, summed over the run's trees; in "
    "brackets per 1,000 policy output tokens and per 1,000 total tokens (policy "
    "output + PRM input + PRM output), as in the evaluation report."
)


def _kind(scorer: str | None) -> ScorerKind | None:
    """The run's scorer kind (None: not named, or a name this version does not know)."""
    return None if scorer is None else SCORER_KINDS.get(scorer)


def _silent_scorer(scorer: str | None) -> ScorerKind | None:
    """The run's scorer kind when it is one that decodes nothing (its PRM output is 0 by
    design, which the report says rather than leave it looking like a fault)."""
    kind = _kind(scorer)
    return None if kind is None or kind.decodes else kind


def _prm_tokens(n: ReportNumbers, scorer: str | None) -> str:
    tokens = f"{n.prm_input_tokens:,} / {n.prm_output_tokens:,}"
    silent = _silent_scorer(scorer)
    if silent is not None and n.prm_output_tokens == 0:
        return f"{tokens} ({silent.what} decodes nothing)"
    return tokens


def _answered(n: ReportNumbers) -> str:
    """Answered nodes, and how many of them are ungraded (their comparison was cut off)."""
    if not n.ungraded_nodes:
        return str(n.answered_nodes)
    return (
        f"{n.answered_nodes} ({n.ungraded_nodes} ungraded: the comparison with the reference "
        "was cut off by the time limit; no training row uses them)"
    )


def _totals_rows(n: ReportNumbers, scorer: str | None = None) -> list[list[str]]:
    """The Totals table: counts, correctness, tokens and cost (money only with prices);
    `scorer` is the run's `scorer.kind` (None: unknown, no row)."""
    about = "?" if (kind := _kind(scorer)) is None else kind.description
    head = [] if scorer is None else [["scorer", f"{scorer} ({about})"]]
    rows = [
        *head,
        ["trees searched", str(n.trees)],
        [
            "answered-tree rate (trees with an answered node)",
            f"{fraction(n.answered_tree_rate or float('nan'))} ({n.answered_trees})",
        ],
        ["answered nodes", _answered(n)],
        ["correct answered nodes", str(n.correct_nodes)],
        [
            "answered-node precision",
            fraction(n.precision if n.precision is not None else float("nan")),
        ],
        ["correct answered nodes per tree", _num(n.correct_per_tree, 2)],
        [ANY_NODE_CORRECT, str(n.trees_with_correct)],
        [CHOSEN_CORRECT, f"{n.chosen_correct} of {n.chosen_graded} graded"],
        ["cost units spent (sum of C_used)", _num(n.cost_units, 0)],
        ["policy output / input tokens", f"{n.policy_output_tokens:,} / {_policy_input(n)}"],
        ["PRM input / output tokens", _prm_tokens(n, scorer)],
        ["cost units per correct answered node", _num(n.cost_per_correct_node)],
        ["policy output tokens per correct answered node", _num(n.output_tokens_per_correct_node)],
    ]
    if n.money is not None:
        rows += [
            [f"money spent ({n.currency})", _num(n.money, 4)],
            [f"money per correct answered node ({n.currency})", _num(n.money_per_correct_node, 4)],
        ]
    return rows


_COST_INTRO = (
    "What the whole run spent, divided by the rows each training table kept: every table "
    "comes from the same searches, so these do not add up across tables. Sent: every "
    "engine call's prompt; computed: those not read from the engine's prefix cache (as in "
    "the engines' table below)."
)


def cost_sections(cost: dict[str, Any] | None, gpu_hours: dict[str, Any] | None) -> list[str]:
    """The cost-per-kept-row section (and rows per GPU-hour where the run has a GPU shape);
    none without a cost (a report built from numbers alone)."""
    if not cost:
        return []
    parts = ["## Cost per kept row", _COST_INTRO, cost_per_row_markdown(cost)]
    gpu = rows_per_gpu_hour_markdown(gpu_hours)
    return parts + ([gpu] if gpu else [])


def _optional_sections(
    training: str | None, yields: str | None, scorer: str | None = None
) -> list[str]:
    """The training-rows and data-yield sections, each left out when it has no table."""
    parts = ["## Training rows", training] if training else []
    if yields:
        intro = _YIELD_INTRO
        silent = _silent_scorer(scorer)
        if silent is not None:
            intro += f" The scorer is {silent.what}: its output is 0, the total is policy "
            intro += "output + PRM input."
        parts += ["## Data yield (training data per 1,000 tokens)", intro, yields]
    return parts


def report_markdown(
    run_id: str,
    numbers: ReportNumbers,
    figures: list[Path],
    trees: Any,
    percentiles: str,
    training: str | None = None,
    yields: str | None = None,
    scorer: str | None = None,
    clamped: dict[str, ClampedAnswers] | None = None,
    gpu_hours: dict[str, Any] | None = None,
) -> str:
    """The whole `report.md`: sections joined by blank lines, in reading order; `scorer`
    is the run's `scorer.kind` (None: unknown, as for a folder without a manifest),
    `clamped` the engines' answers whose counts were clamped (run.json's), `gpu_hours`
    the rows per GPU-hour its last invocation measured (run.json's)."""
    n = numbers
    totals = _totals_rows(n, scorer)
    longest, shortest = _extremes(trees)
    parts = [
        f"# Run report: `{run_id}`",
        "Recomputed from the run's committed Parquet (`trees`, `nodes`); "
        "`bgmcts report <run folder>` rewrites it.",
        "## Totals",
        _md_table(["what", "value"], totals),
        "## PRM scores",
        f"Percentiles of Q over {n.scored_nodes} scored nodes (root and failed nodes excluded).",
        percentiles,
        f"![PRM score distribution]({PRM_FIGURE})",
        "## Anytime curves",
        "Each tree read at growing budgets (its state after the last step within the budget), "
        "averaged over trees, plotted at the mean consumed tokens.",
        *(f"![{f.stem.replace('_', ' ')}]({f.name})" for f in figures),
        *_optional_sections(training, yields, scorer),
        *cost_sections(n.cost_per_row, gpu_hours),
        "## What the engines computed",
        "Prompt tokens each engine was sent (every call's prompt), those it read from its "
        "prefix cache, and the rest, which it computed (prefill).",
        _md_table(READS_HEADER, _reads_rows(n)),
        *filter(None, [clamped_note(_reads(n)), clamped_answers_note(clamped or {})]),
        "## The five longest trees (wall time)",
        _md_table(_TREE_HEADER, _tree_rows(longest)),
        "## The five shortest trees (wall time)",
        _md_table(_TREE_HEADER, _tree_rows(shortest)),
    ]
    return "\n\n".join(parts) + "\n"


def write_run_report(
    run_dir: str | Path, prices: PricesConfig | None = None, scorer: str | None = None
) -> list[Path]:
    """Write report.md, report.json and the PNGs into `run_dir`; returns the files written.
    `scorer`: the run's `scorer.kind`, named in the Totals (None: not named)."""
    run_dir = Path(run_dir)
    folder = RunFolder.at(run_dir)
    trees, nodes = read_run(folder)
    manifest = folder.read_manifest()
    clamped = clamped_from_manifest(manifest, folder.store.join(MANIFEST))
    counts = folder.counts()
    tokens = trees.select([c for c in COLUMNS_READ if c in trees.column_names]).to_pandas()
    numbers = replace(
        report_numbers(trees, nodes, prices),
        clamped_answers=clamped_as_json(clamped),
        cost_per_row=cost_per_row(tokens, counts, prices),
    )
    written: list[Path] = []
    figures: list[Path] = []
    percentiles = "(no scored nodes)"
    if trees.num_rows:
        grid = _as_grid(trees)
        curves, markers = anytime_curves(grid), budget_markers(grid)
        figures = write_curves(
            curves, markers, run_dir, redistributed=early_stopping_methods(grid.trees)
        )
        if len(grid.nodes):
            percentiles = percentiles_markdown(prm_percentiles_table(grid.nodes))
    written += figures
    written.append(_prm_figure(trees, nodes, run_dir / PRM_FIGURE))
    (run_dir / REPORT_MD).write_text(
        report_markdown(
            folder.run_id,
            numbers,
            figures,
            trees,
            percentiles,
            training_rows_markdown(trees, counts),
            None if (table := run_yield(trees)) is None else yield_markdown(table),
            scorer,
            clamped,
            _gpu_hours(manifest),
        )
    )
    (run_dir / REPORT_JSON).write_text(json.dumps(asdict(numbers), indent=2) + "\n")
    return [*written, run_dir / REPORT_MD, run_dir / REPORT_JSON]


def _gpu_hours(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """run.json's rows per GPU-hour (`pipeline.run.gpu_hours`), if its run had a GPU shape."""
    summary = manifest.get("summary")
    block = summary.get("gpu_hours") if isinstance(summary, dict) else None
    return block if isinstance(block, dict) else None


def scorer_from_config(config: dict[str, Any]) -> str | None:
    """The `scorer.kind` of a run config dump (run.json); None without a config."""
    if not config:
        return None
    block = config.get("scorer") or {}
    return str(block.get("kind", DEFAULT_SCORER_KIND))


def prices_from_config(config: dict[str, Any]) -> PricesConfig | None:
    """The `prices` block of a run config dump (run.json), if any."""
    block = config.get("prices")
    return None if not block else PricesConfig.model_validate(block)
