"""Numbers behind the training records' rules: print them, no assertions.

1. SFT: the share of correct answered paths that are clean (one answer) versus
   self-correction traces, with `records.self_correction: include`.
2. DPO: pair types and shared-prefix lengths of the default rule (`shared_prefix`,
   prefix pairs dropped) against the rule it replaced (`best_vs_worst`, every pair type
   allowed: its pairs shared little of their text).
3. tree_nodes: Parquet bytes per node (pyarrow defaults: snappy, dictionary encoding),
   against the `nodes` record's bytes per row (which repeats every full trajectory).

Decontamination's numbers (what each rule catches, its false positives on the train splits
and its CPU) are `benchmarks.decontamination`'s.

The searches use the scripted policy and scorer (`search.scripted`: no model), through
the real records code; the counts describe this project's rules on scripted trees, not
a real model's output.

    .venv/bin/python -m benchmarks.training_records [--problems 40] [--budget 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from pipeline.problems.sources import bundled_path
from pipeline.records import (
    SCHEMAS,
    BuildContext,
    RecordsConfig,
    dpo_rows,
    grade_result,
    node_rows,
    sft_rows,
    to_table,
    tree_node_rows,
)
from search import parse_search_config, run_search
from search.scripted import ScriptedPolicy, ScriptedScorer


async def _graded(problems: int, budget: int) -> list[Any]:
    config = parse_search_config({"algorithm": "bg_mcts"})
    out = []
    for i in range(problems):
        policy = ScriptedPolicy(seed=i, p_answer=0.4)
        result = await run_search(
            f"Problem {i}?", config, policy, ScriptedScorer(seed=i), budget, i
        )
        out.append(await grade_result(result, "12", problem_id=f"p{i}", timeout_s=10))
    return out


def _quantiles(values: list[int]) -> str:
    if not values:
        return "n/a"
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"median {statistics.median(values):.0f} (p25 {q[0]:.0f}, p75 {q[2]:.0f})"


def _parquet_bytes(rows: list[dict[str, Any]], record: str, folder: Path) -> int:
    path = folder / f"{record}.parquet"
    pq.write_table(to_table(rows, SCHEMAS[record]), path)
    return path.stat().st_size


def records_report(problems: int, budget: int) -> None:
    graded = asyncio.run(_graded(problems, budget))
    include = BuildContext(RecordsConfig(self_correction="include"), run_id="b")
    every = [r for g in graded for r in sft_rows(g, include).rows]
    clean = [r for r in every if r["answers_in_path"] == 1]
    print(f"scripted BG-MCTS: {problems} problems, B={budget}")
    print(
        f"SFT: {len(every)} correct distinct paths, {len(clean)} clean "
        f"({len(clean) / max(1, len(every)):.0%}); answers per path "
        f"{dict(sorted(Counter(r['answers_in_path'] for r in every).items()))}"
    )
    rules = {
        "new (shared_prefix, no prefix pairs)": {},
        "before (best_vs_worst, all types)": {
            "pairing": "best_vs_worst",
            "dpo": {"pair_types": ("siblings", "cousins", "root", "prefix")},
        },
    }
    for name, rule in rules.items():
        config = RecordsConfig.model_validate({"max_pairs_per_problem": 4, **rule})
        pairs = [p for g in graded for p in dpo_rows(g, BuildContext(config, run_id="b")).rows]
        types = Counter(p["pair_type"] for p in pairs)
        shared = [p["shared_prefix_chars"] for p in pairs]
        tails = [
            len(p["rejected"][0]["content"]) - p["shared_prefix_chars"]
            for p in pairs
            if p["pair_type"] != "prefix"
        ]
        print(
            f"DPO {name}: {len(pairs)} pairs, types {dict(types)}; shared prefix chars "
            f"{_quantiles(shared)}; rejected chars after the shared prefix {_quantiles(tails)}"
        )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run = BuildContext(run_id="b")
        tree_nodes = [r for g in graded for r in tree_node_rows(g, run)]
        nodes = [r for g in graded for r in node_rows(g, run)]
        tn_bytes = _parquet_bytes(tree_nodes, "tree_nodes", folder)
        n_bytes = _parquet_bytes(nodes, "nodes", folder)
        print(
            f"tree_nodes: {len(tree_nodes)} nodes, {tn_bytes:,} bytes, "
            f"{tn_bytes / len(tree_nodes):.0f} bytes/node; nodes (answered only, full "
            f"trajectories): {len(nodes)} rows, {n_bytes:,} bytes, {n_bytes / len(nodes):.0f} "
            "bytes/row"
        )
        # Scripted words ("w3.14") compress far better than prose: the same trees with every
        # step's text replaced by real solution text (GSM8K train sentences) of similar length.
        sentences = _gsm8k_sentences()
        prose = [
            {**row, "text": sentences[i % len(sentences)]} if row["parent_id"] is not None else row
            for i, row in enumerate(tree_nodes)
        ]
        mean_chars = statistics.mean(len(r["text"]) for r in prose if r["parent_id"] is not None)
        p_bytes = _parquet_bytes(prose, "tree_nodes", folder)
        print(
            f"tree_nodes with prose step texts (mean {mean_chars:.0f} chars/step): "
            f"{p_bytes:,} bytes, {p_bytes / len(prose):.0f} bytes/node"
        )


def _gsm8k_sentences() -> list[str]:
    """Solution steps of GSM8K train (one line of a worked solution each), as real prose."""
    out = []
    for line in bundled_path("gsm8k", "train").read_text().splitlines()[:2000]:
        answer = json.loads(line)["answer"].split("####")[0]
        out += [" " + step.strip() for step in answer.splitlines() if len(step.strip()) > 20]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--budget", type=int, default=4000)
    args = parser.parse_args()
    records_report(args.problems, args.budget)


if __name__ == "__main__":
    main()
