"""The printed result: four tables, then the last lines the issue names."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.self_improve.plan import Mode, Problem
from benchmarks.self_improve.runs import RunData
from benchmarks.support.stats import auc, discordant, mcnemar_p, mean_interval, wilson

Passes = Mapping[str, Mapping[int, tuple[float, float]]]


def choice_table(mode: Mode, operations: int, passes: Passes) -> list[str]:
    k = mode.probe_samples
    lines = [
        f"## choosing round 1's problems: {mode.probe_problems} probe problems per row, "
        f"{k} draws at T={mode.probe_temperature}",
        f"{'policy':<24} {'operations':>10} {'pass@1':>7} {f'pass@{k}':>7}",
    ]
    for model, label in (("base", "base (searched round 0)"), ("round0", "round 0 (searches r1)")):
        for ops, (at1, atk) in sorted(passes[model].items()):
            chosen = "  <- round 1" if model == "round0" and ops == operations else ""
            lines.append(f"{label:<24} {ops:>10} {at1:>7.3f} {atk:>7.3f}{chosen}")
    return lines


def answer_auc(data: RunData) -> float:
    """How well the PRM's node values told right answers from wrong in this run."""
    nodes = [n for n in data.tables.get("nodes", []) if n.get("score") is not None]
    return auc([n["score"] for n in nodes], [bool(n["correct"]) for n in nodes])


def synthesis_table(runs: Mapping[str, Mapping[str, RunData]]) -> list[str]:
    header = (
        f"{'run':<22} {'problems':>8} {'tok/prob':>8} {'policy':>7} {'PRM':>7} {'solved':>6} "
        f"{'right':>5} {'sft':>4} {'dpo':>4} {'step':>4} {'prm':>4} {'kto':>4} "
        f"{'eq paths':>8} {'eq steps':>8} {'PRM paths':>9} {'nodes':>5} {'depth':>5} "
        f"{'yield/1k':>8} {'AUC':>5}"
    )
    lines = ["## round-1 synthesis at equal total tokens (policy + PRM) per problem", header]
    for name, data in runs["gated"].items():
        trees = data.trees
        # the PRM half drops what the runs wrote; the rows counted are the false-equation
        # half's, the ones the checkpoints train on.  Paths kept out and prm steps relabelled
        # are counted apart: a step is not a row
        prm_drops = (
            runs["written"][name].process_drops()["low_step_value"] if "written" in runs else 0
        )
        n = max(len(trees), 1)
        policy = sum(t["policy_output_tokens"] for t in trees)
        prm = sum(t["prm_input_tokens"] + t["prm_output_tokens"] for t in trees)
        solved = sum(t["n_correct"] > 0 for t in trees)
        right = sum(t["correct_trajectories"] for t in trees)
        drops = data.process_drops()
        lines.append(
            f"{name:<22} {len(trees):>8} {data.total_tokens / n:>8.0f} {policy / n:>7.0f} "
            f"{prm / n:>7.0f} {solved:>6} {right:>5} "
            + " ".join(
                f"{len(data.tables[t]):>4}" for t in ("sft", "dpo", "step_dpo", "prm", "kto")
            )
            + f" {drops['false_equation']:>8} {data.relabelled_steps():>8} {prm_drops:>9} "
            f"{sum(t['n_nodes'] for t in trees) / n:>5.1f} "
            f"{sum(t['max_depth'] for t in trees) / n:>5.1f} "
            f"{1000 * right / max(data.total_tokens, 1):>8.3f} {answer_auc(data):>5.2f}"
        )
    lines.append(
        "solved: problems with a right answered node; right: correct trajectories after the "
        "false-equation gate (the rows trained on); eq paths: paths that gate kept out, summed "
        "over the tables (sft, kto, the dpo and step_dpo chosen side: one path counts once per "
        "table); eq steps: prm steps it relabelled bad (their rows stay); PRM paths: paths the "
        "PRM half (a step below the threshold) kept out of what the run wrote, summed the same "
        "way; yield/1k: right per 1,000 total tokens; AUC: the PRM's value of an answered node "
        "against its answer being right"
    )
    return lines


def accuracy_table(correct: Mapping[str, Sequence[bool]], train: Mapping[str, Any]) -> list[str]:
    total = len(correct["base"])
    lines = [
        f"## held-out accuracy, {total} multi-step problems, greedy",
        f"{'checkpoint':<28} {'rows':>5} {'accuracy [95% CI]':>30} {'vs round 0':>24}",
    ]
    for model, ok in correct.items():
        right = sum(ok)
        low, high = wilson(right, total)
        rows = train.get(model, {}).get("rows", "-")
        versus = ""
        if model not in ("base", "round0"):
            a, b = discordant(ok, correct["round0"])
            versus = f"+{a}/-{b} p={mcnemar_p(a, b):.3g}"
        accuracy = f"{right / total:.3f} [{low:.3f}, {high:.3f}] ({right}/{total})"
        lines.append(f"{model:<28} {rows!s:>5} {accuracy:>30} {versus:>24}")
    return lines


def paired_table(
    title: str, correct: Mapping[str, Sequence[bool]], pairs: Sequence[tuple[str, str]]
) -> tuple[list[str], tuple[float, float, float]]:
    """Per seed: a vs b on the same held-out problems; then the mean difference over seeds."""
    lines = [f"## {title}"]
    diffs = []
    for a, b in pairs:
        if a not in correct or b not in correct:
            lines.append(f"{a} vs {b}: a checkpoint is missing (no rows)")
            continue
        total = len(correct[a])
        diff = (sum(correct[a]) - sum(correct[b])) / total
        diffs.append(diff)
        only_a, only_b = discordant(correct[a], correct[b])
        lines.append(
            f"{a} vs {b}: {diff:+.3f} (right only with {a} {only_a}, only with {b} {only_b}, "
            f"McNemar p={mcnemar_p(only_a, only_b):.3g})"
        )
    mean = mean_interval(diffs) if diffs else (math.nan, math.nan, math.nan)
    lines.append(
        f"mean over {len(diffs)} seeds: {mean[0]:+.4f} [95% t-interval {mean[1]:+.4f}, "
        f"{mean[2]:+.4f}]"
    )
    return lines, mean


def mean_accuracy(correct: Mapping[str, Sequence[bool]], prefix: str, seeds: int) -> float:
    values = [
        sum(correct[f"{prefix}-s{s}"]) / len(correct[f"{prefix}-s{s}"])
        for s in range(seeds)
        if f"{prefix}-s{s}" in correct
    ]
    return sum(values) / len(values) if values else math.nan


def lines(
    *,
    mode: Mode,
    operations: int,
    passes: Passes,
    runs: Mapping[str, Mapping[str, RunData]],
    correct: Mapping[str, Sequence[bool]],
    heldout: Sequence[Problem],
    train: Mapping[str, Any],
    seconds: float,
) -> list[str]:
    seeds = range(mode.seeds)
    gain, gain_mean = paired_table(
        "round 1: BG-MCTS's rows against repeated sampling's (same seed, same held-out)",
        correct,
        [(f"bg_mcts-s{s}", f"repeated_sampling-s{s}") for s in seeds],
    )
    gate, _ = paired_table(
        "the false-equation gate: BG-MCTS's rows with it against the same trees' rows without",
        correct,
        [(f"bg_mcts-s{s}", f"bg_mcts-s{s}-ungated") for s in range(mode.gate_seeds)],
    )
    out = [
        f"round 0: {mode.round0_problems} problems of 1-2 operations, "
        f"B={mode.round0_budget} policy tokens; round 1: {mode.round1_problems} problems of "
        f"{operations} operations, "
        f"B={mode.round1_budget} total tokens; {mode.sft_steps} SFT steps x batch "
        f"{mode.batch_size}, lr {mode.learning_rate}; {seconds:.0f} s",
        *choice_table(mode, operations, passes),
        *synthesis_table(runs),
        *accuracy_table(correct, train),
        *gain,
        *gate,
        f"heldout_problems={len(heldout)}",
        f"seeds={mode.seeds}",
        f"pass_at_1_round0={passes['base'][operations][0]:.4f}",
        f"pass_at_1_round1={passes['round0'][operations][0]:.4f}",
        f"round1_heldout_bg_mcts={mean_accuracy(correct, 'bg_mcts', mode.seeds):.4f}",
        f"round1_heldout_rs={mean_accuracy(correct, 'repeated_sampling', mode.seeds):.4f}",
        f"round1_gain_bg_mcts_minus_rs={gain_mean[0]:.4f}",
    ]
    return out


def round0_lines(data: RunData, train: Mapping[str, Any], passes: Passes) -> list[str]:
    """One self-improvement step's last lines: what round 0 searched and trained on, and
    the probe's pass@1 of the base model and of its round-0 checkpoint."""
    at1 = {model: [p[0] for _, p in sorted(passes[model].items())] for model in passes}
    return [
        f"round0_trees={len(data.trees)}",
        f"round0_sft_rows={len(data.tables.get('sft', []))}",
        f"round0_train_steps={train['steps']}",
        f"pass_at_1_base={sum(at1['base']) / len(at1['base']):.3f}",
        f"pass_at_1_round0={sum(at1['round0']) / len(at1['round0']):.3f}",
    ]
