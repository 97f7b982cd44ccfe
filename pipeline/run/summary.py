"""What a run did: the final summary table.

`RunSummary` is filled as batches stream in and can be
rebuilt from a run folder's Parquet at any time (`summarize_run_dir`), which is
what `report` prints (the totals of every invocation of that run, resumes included).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from pipeline.config import PricesConfig, parse_config
from pipeline.errors import InputError
from pipeline.report.clamped_answers import (
    ClampedAnswers,
    clamped_from_manifest,
    clamped_sentences,
)
from pipeline.report.run_report import (
    ANY_NODE_CORRECT,
    CHOSEN_CORRECT,
    prices_from_config,
    scorer_from_config,
    write_run_report,
)
from pipeline.store.run_folder import MANIFEST, RunFolder


@dataclass
class RunSummary:
    run_id: str
    run_dir: Path | str  # a local folder, or the URI of a bucket's run
    problems: int = 0
    skipped: int = 0
    searched: int = 0
    errors: int = 0
    search_failures: int = 0  # failed searches (retried by the next run), not_started included
    not_started: int = 0  # problems the engine circuit breaker kept from starting
    # problems left unsearched at the wall-time cap (`max_wall_s`: not started, or abandoned
    # in flight); nothing of them is committed, so the next run searches them
    stopped: int = 0
    # answer comparisons cut off by their limit (their answers ungraded) or refused (incorrect)
    grade_timeouts: int = 0
    answered_nodes: int = 0
    correct_nodes: int = 0
    # answered nodes without a label (their comparison was cut off): precision leaves them out
    ungraded_nodes: int = 0
    chosen_correct_trees: int = 0  # `CHOSEN_CORRECT`: the chosen answer matches the reference
    # trees whose chosen answer was graded against a reference (its comparison not cut off)
    graded_trees: int = 0
    trees_with_correct_node: int = 0  # `ANY_NODE_CORRECT`
    policy_output_tokens: int = 0
    # requests (and their output tokens) answered from the request log, not the engines
    replayed_requests: int = 0
    replayed_tokens: int = 0
    wall_time_s: float = 0.0
    # trees one search actor let run at once (trees_per_actor, or the highest target
    # `admission` set) and the most it ran at once; known only for the invocation that ran them
    admitted_per_actor: int | None = None
    peak_in_flight_per_actor: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    # benchmark -> problems that overlap it (searched, kept out of the training rows)
    contaminated: dict[str, int] = field(default_factory=dict)
    # quality gate (<record>.<gate>) -> training rows it kept out (`trees.gate_drops`)
    gate_drops: dict[str, int] = field(default_factory=dict)
    # engine ("policy", "scorer") -> its answers whose token counts were clamped, over the
    # run's invocations that reached their end (`pipeline.report.clamped_answers`)
    clamped: dict[str, ClampedAnswers] = field(default_factory=dict)

    @property
    def precision(self) -> float | None:
        graded = self.answered_nodes - self.ungraded_nodes
        return self.correct_nodes / graded if graded else None

    def account(self, records: dict[str, list[dict[str, Any]]]) -> None:
        """Add one problem's records (as the search actor returns them)."""
        if records.get("errors"):
            self.errors += 1
            self.search_failures += 1
            self.not_started += any(e.get("stage") == "engine" for e in records["errors"])
            return
        self.searched += 1
        nodes = records.get("nodes", [])
        self.answered_nodes += len(nodes)
        self.correct_nodes += sum(1 for n in nodes if n.get("label"))
        self.ungraded_nodes += sum(1 for n in nodes if n.get("label") is None)
        for tree in records.get("trees", []):
            self.count_contamination(tree)
            self.count_gate_drops(tree)
            self.chosen_correct_trees += bool(tree.get("correct"))
            self.graded_trees += tree.get("correct") is not None
            self.trees_with_correct_node += int(tree.get("n_correct") or 0) > 0
            self.policy_output_tokens += int(tree.get("policy_output_tokens") or 0)
            self.grade_timeouts += int(tree.get("grade_timeouts") or 0)

    def count_contamination(self, tree: dict[str, Any]) -> None:
        """Count a `trees` row whose problem overlaps a benchmark (`problems.decontamination`)."""
        if tree.get("contaminated"):
            name = str(tree["contaminated"])
            self.contaminated[name] = self.contaminated.get(name, 0) + 1

    def count_gate_drops(self, tree: dict[str, Any]) -> None:
        """Add a `trees` row's quality-gate counts (`pipeline.records.config.GatesConfig`)."""
        for drop in tree.get("gate_drops") or ():
            gate = str(drop["gate"])
            self.gate_drops[gate] = self.gate_drops.get(gate, 0) + int(drop["dropped"])

    def table(self) -> Table:
        precision = "-" if self.precision is None else f"{self.precision:.3f}"
        rate = (
            f" ({self.policy_output_tokens / self.wall_time_s:.1f}/s)"
            if self.wall_time_s > 0
            else ""
        )
        table = Table(title=f"run {self.run_id}", show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("problems searched", str(self.searched))
        table.add_row("already done (skipped)", str(self.skipped))
        table.add_row("errors", str(self.errors))
        if self.not_started:
            table.add_row(
                "not started (breaker)",
                f"{self.not_started}: the engine failed repeatedly; rerun to retry them",
            )
        if self.stopped:
            table.add_row(
                "left at the wall-time cap",
                f"{self.stopped}: not searched (max_wall_s); rerun to search them",
            )
        table.add_row("grading timeouts", str(self.grade_timeouts))
        if self.clamped:
            said = clamped_sentences(self.clamped)
            table.add_row("clamped token counts", "\n".join(said))
        ungraded = f" ({self.ungraded_nodes} ungraded)" if self.ungraded_nodes else ""
        table.add_row("answered nodes", f"{self.answered_nodes}{ungraded}")
        table.add_row("correct answered nodes", f"{self.correct_nodes} (precision {precision})")
        table.add_row(CHOSEN_CORRECT, f"{self.chosen_correct_trees} of {self.graded_trees} graded")
        table.add_row(ANY_NODE_CORRECT, str(self.trees_with_correct_node))
        table.add_row("policy output tokens", f"{self.policy_output_tokens}{rate}")
        if self.wall_time_s > 0:  # unknown for a folder summed up after the fact
            table.add_row("wall time", f"{self.wall_time_s:.0f} s")
        if self.admitted_per_actor is not None:
            table.add_row(
                "trees in flight per actor",
                f"{self.peak_in_flight_per_actor or 0} at most, {self.admitted_per_actor} admitted",
            )
        excluded = ", ".join(f"{k} {v}" for k, v in sorted(self.contaminated.items()))
        table.add_row(
            "decontaminated problems", f"{excluded} (no training rows)" if excluded else "0"
        )
        by_record: dict[str, list[str]] = {}
        for gate, dropped in sorted(self.gate_drops.items()):
            if dropped:
                record, _, rule = gate.partition(".")
                by_record.setdefault(record, []).append(f"{rule} {dropped}")
        lines = [f"{record}: {', '.join(rules)}" for record, rules in by_record.items()]
        table.add_row("dropped by quality gates", "\n".join(lines) or "0")
        table.add_row("rows written", ", ".join(f"{k} {v}" for k, v in self.rows.items()))
        table.add_row("files", str(self.run_dir))
        return table

    def render(self, file: TextIO | None = None) -> None:
        Console(file=file or sys.stdout, width=110).print(self.table())


def summarize_run_dir(run_dir: str | Path) -> RunSummary:
    """Rebuild the totals of everything committed in `run_dir` (``<root>/run=<id>``)."""
    folder = RunFolder.at(run_dir)
    summary = RunSummary(folder.run_id, folder.location)
    trees = folder.read("trees").to_pylist()
    nodes = folder.read("nodes")
    summary.searched = len(trees)
    summary.errors = folder.count("errors")
    summary.problems = summary.searched + summary.errors
    summary.answered_nodes = nodes.num_rows
    labels = nodes.column("label").to_pylist()
    summary.correct_nodes = sum(bool(v) for v in labels)
    summary.ungraded_nodes = sum(v is None for v in labels)
    summary.chosen_correct_trees = sum(bool(t["correct"]) for t in trees)
    summary.graded_trees = sum(t["correct"] is not None for t in trees)
    summary.trees_with_correct_node = sum(int(t["n_correct"] or 0) > 0 for t in trees)
    summary.policy_output_tokens = sum(int(t["policy_output_tokens"]) for t in trees)
    for tree in trees:
        summary.count_contamination(tree)
        summary.count_gate_drops(tree)
    summary.grade_timeouts = sum(int(t.get("grade_timeouts") or 0) for t in trees)
    summary.rows = folder.counts()
    # not in the Parquet (the counts there are the clamped ones): what run.json recorded
    summary.clamped = clamped_from_manifest(folder.read_manifest(), folder.store.join(MANIFEST))
    return summary


def refresh_run_report(run_dir: Path) -> tuple[RunSummary, dict[str, Any], list[Path]]:
    """A local run folder's totals, the config of its manifest, and its run report written
    anew from the committed Parquet: what `bgmcts report` and publishing both start from."""
    summary = summarize_run_dir(run_dir)
    folder = RunFolder.at(run_dir)
    config = folder.read_manifest().get("config") or {}
    where = folder.store.join(MANIFEST)
    if not isinstance(config, dict):
        raise InputError(f"{where}: config is {type(config).__name__}, not a mapping")
    for block in ("prices", "scorer"):
        if config.get(block) is not None and not isinstance(config[block], dict):
            raise InputError(f"{where}: config.{block} is not a mapping")
    if config.get("prices"):  # checked as a config is: one line naming run.json and the field
        parse_config(config["prices"], PricesConfig, f"{where}: config.prices")
    report = write_run_report(run_dir, prices_from_config(config), scorer_from_config(config))
    return summary, config, report
