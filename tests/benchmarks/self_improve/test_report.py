"""benchmarks/self_improve/report.py: the last lines are the means the tables show, worked
out here by hand from made-up held-out grades (the grades are the input, not a result)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from benchmarks.self_improve.plan import TINY
from benchmarks.self_improve.report import lines, synthesis_table
from benchmarks.self_improve.runs import RunData


def tree(total: int, right: int) -> dict[str, int]:
    return {
        "policy_output_tokens": total // 4,
        "prm_input_tokens": total - total // 4,
        "prm_output_tokens": 0,
        "n_correct": right,
        "correct_trajectories": right,
        "n_nodes": 5,
        "max_depth": 3,
    }


def run(name: str, right: int) -> RunData:
    tables: dict[str, list[dict[str, object]]] = {
        t: [{}] * right for t in ("sft", "dpo", "step_dpo", "prm", "kto")
    }
    return RunData(name, [tree(800, right)], tables, Counter({"sft.false_equation": 1}))


def test_last_lines_are_the_means_over_seeds() -> None:
    mode = dataclasses.replace(TINY, seeds=2)
    correct = {
        "base": [False] * 4,
        "round0": [True, False, False, False],
        "bg_mcts-s0": [True, True, False, False],
        "repeated_sampling-s0": [True, False, False, False],
        "bg_mcts-s1": [True, True, True, False],
        "repeated_sampling-s1": [True, True, True, False],
        "bg_mcts-s0-ungated": [False, True, False, False],
    }
    runs = {
        "gated": {f"{m}-s{s}": run(m, 2) for m in ("bg_mcts", "repeated_sampling") for s in (0, 1)},
        "ungated": {"bg_mcts-s0": run("bg_mcts", 3)},
    }
    passes = {"base": {2: (0.2, 0.5), 3: (0.1, 0.25)}, "round0": {2: (0.3, 0.5), 3: (0.0, 0.0)}}
    out = lines(
        mode=mode,
        operations=2,
        passes=passes,
        runs=runs,
        correct=correct,
        heldout=[{}] * 4,
        train={},
        seconds=1.0,
    )
    last = dict(line.split("=", 1) for line in out[-7:])
    assert last["heldout_problems"] == "4" and last["seeds"] == "2"
    assert float(last["pass_at_1_round0"]) == pytest.approx(0.2)  # base on 2 operations
    assert float(last["pass_at_1_round1"]) == pytest.approx(0.3)  # round 0 on 2 operations
    assert float(last["round1_heldout_bg_mcts"]) == pytest.approx((0.5 + 0.75) / 2)
    assert float(last["round1_heldout_rs"]) == pytest.approx((0.25 + 0.75) / 2)
    assert float(last["round1_gain_bg_mcts_minus_rs"]) == pytest.approx((0.25 + 0.0) / 2)
    text = "\n".join(out)
    assert "bg_mcts-s0 vs bg_mcts-s0-ungated: +0.250" in text
    assert "<- round 1" in text


def test_the_synthesis_table_counts_paths_kept_out_and_steps_relabelled_apart() -> None:
    drops = Counter(
        {
            "sft.false_equation": 1,
            "kto.false_equation": 1,
            "dpo.chosen.false_equation": 1,
            "prm.false_equation": 5,  # steps relabelled bad, not paths kept out
            "dpo.q_margin": 4,  # pairs: no process gate
            "sft.low_step_value": 2,
        }
    )
    data = dataclasses.replace(run("bg_mcts", 2), gate_drops=drops)
    assert data.process_drops() == {"false_equation": 3, "low_step_value": 2}
    assert data.relabelled_steps() == 5
    header, row = synthesis_table({"gated": {"bg_mcts-s0": data}, "written": {"bg_mcts-s0": data}})[
        1:3
    ]

    def cell(name: str) -> str:
        end = header.index(name) + len(name)
        return row[end - len(name) : end].strip()

    assert (cell("eq paths"), cell("eq steps"), cell("PRM paths")) == ("3", "5", "2")
