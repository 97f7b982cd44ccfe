"""One graded search as rows of the two evaluation tables (see schema.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.records import NO_YIELD
from search.driver import SearchResult

# answer -> is it correct (False for None); None: unknown, its comparison was cut off
Verdict = Callable[[str | None], bool | None]


def tree_rows(
    result: SearchResult,
    verdict: Verdict,
    *,
    method: str,
    budget: int,
    seed: int,
    problem_id: str,
    reference: str | None,
    yields: Mapping[str, int] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The `eval_trees` row (with its graded anytime trace and data yield, see
    `pipeline.records.yields`; none given: zeros) and the `eval_nodes` rows."""
    key = {
        "method": method,
        "algorithm": result.algorithm,
        "budget": budget,
        "seed": seed,
        "problem_id": problem_id,
    }
    tree = result.tree
    correct_of = {n.id: verdict(n.answer) for n in tree.nodes if n.answered}
    tokens = result.tokens
    trace = [
        {
            "c_used": float(p.c_used),
            "any_answer": p.any_answer,
            # the curves need a value at every point: unknown counts as not correct
            "correct": bool(verdict(p.best_answer)),
            "n_answered": p.n_answered,
            "max_depth": p.max_depth,
            "max_width": p.max_width,
            "generative": p.generative,
        }
        for p in result.trace
    ]
    tree_row = {
        **key,
        "reference": reference,
        "chosen_answer": result.chosen_answer,
        "correct": verdict(result.chosen_answer),
        "answered": bool(correct_of),
        "c_used": float(result.c_used),
        "early_stopped": result.stop_reason == "early_stop",
        "stop_reason": result.stop_reason,
        "iterations": result.iterations,
        "n_nodes": len(tree),
        "answered_nodes": len(correct_of),
        "correct_nodes": sum(bool(v) for v in correct_of.values()),
        "max_depth": tree.max_depth,
        "max_width": tree.max_width,
        "policy_output_tokens": tokens.policy_output_tokens,
        "policy_input_tokens": tokens.policy_input_tokens,
        "prm_input_tokens": tokens.prm_input_tokens,
        "prm_output_tokens": tokens.prm_output_tokens,
        "wall_time_s": float(result.wall_time_s),
        **(NO_YIELD if yields is None else yields),
        "trace": trace,
    }
    node_rows = [
        {
            **key,
            "node_id": n.id,
            "parent_id": n.parent_id,
            "depth": n.depth,
            "iteration": n.iteration,
            "c_used": float(n.c_used),
            "q": float(n.q),
            "answered": n.answered,
            "correct": correct_of.get(n.id) if n.answered else None,
            "from_generative": n.from_generative,
            "full_generation": n.full_generation,
            "failed": not n.expandable and n.id != 0,
            "output_tokens": n.output_tokens,
        }
        for n in tree.nodes
    ]
    return tree_row, node_rows
