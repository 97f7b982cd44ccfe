"""run.json's and report.md's night-allocator block (`pipeline.run.allocation_report`) from
committed trees rows (written here as a run's trees table holds them)."""

from __future__ import annotations

from typing import Any

from pipeline.run.allocation_report import allocation_markdown, allocation_summary, probe_outcome


def _tree(
    pid: str, tree: str | None, right: int, wrong: int, answered: int, budget: int, **rows: int
) -> Any:
    return {
        "kept_rows": [{"table": table, "rows": n} for table, n in rows.items()],
        "problem_id": pid,
        "tree": tree,
        "n_correct": right,
        "n_incorrect": wrong,
        "n_answered": answered,
        "budget": budget,
        "c_used": budget - 1.0,
        "policy_output_tokens": budget - 1,
    }


def test_probes_by_outcome_and_second_budgets_by_their_probe() -> None:
    trees = [
        _tree("a", "probe", 2, 1, 3, 65, sft=2, dpo=1, prm=3),
        _tree("a", "second", 1, 1, 2, 80, dpo=1, step_dpo=1, prm=2),
        _tree("b", "probe", 3, 0, 3, 65, sft=2, prm=3),
        _tree("c", "probe", 0, 2, 2, 65),
        _tree("c", "second", 0, 1, 1, 30),
        _tree("d", "probe", 0, 0, 0, 65),
    ]
    block = allocation_summary(trees, problems=4, budget=100)
    assert [probe_outcome(t) for t in trees if t["tree"] == "probe"] == [
        "mixed",
        "all_correct",
        "none_correct",
        "unanswered",
    ]
    assert block["night_total"] == 400 and block["probes"] == 4 and block["second_trees"] == 2
    assert block["second_budget_by_outcome"] == {
        "mixed": 80,
        "all_correct": 0,
        "none_correct": 30,
        "unanswered": 0,
    }
    assert block["policy_output_tokens"] == 4 * 64 + 79 + 29
    text = "\n".join(allocation_markdown(block))
    assert "| mixed | 1 | 1 | 80 |" in text and "the night's total 400 cost units" in text
    # the difficulty mix: rows by the probe's outcome, probe + second tree
    mix = block["rows_by_outcome"]
    assert mix["mixed"]["probe"] == {"sft": 2, "dpo": 1, "step_dpo": 0, "prm": 3, "kto": 0}
    assert mix["mixed"]["second"] == {"sft": 0, "dpo": 1, "step_dpo": 1, "prm": 2, "kto": 0}
    assert mix["all_correct"]["probe"]["sft"] == 2 and mix["none_correct"]["second"]["sft"] == 0
    assert "| mixed | 2 + 0 | 1 + 1 | 0 + 1 | 3 + 2 | 0 + 0 |" in text
    assert "| all_correct | 2 + 0 | 0 + 0 | 0 + 0 | 3 + 0 | 0 + 0 |" in text
