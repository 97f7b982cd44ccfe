"""Record real SmolLM2 search trees as a test fixture: tests/fixtures/smollm2_trees.jsonl.

The record tests and the TRL suite check the training rows on real model text, not
only on scripted text: they rebuild these trees (`pipeline.records.rebuild`) through
today's `records_for`.  The fixture is the `trees` and `tree_nodes` rows of a real run
of the embedded default (SmolLM2-135M on llama.cpp, the few-shot arithmetic prompt),
one JSON line per problem.  Regenerate it after a change to the search or the policy:

    make synth OUTPUT_ROOT=/tmp/fixture-run
    .venv/bin/python scripts/record_real_trees.py /tmp/fixture-run/run=local
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipeline.store.run_folder import RunFolder

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "smollm2_trees.jsonl"
TREE_FIELDS = (
    "problem_id",
    "reference",
    "chosen_answer",
    "chosen_node_id",
    "policy_output_tokens",
    "policy_input_tokens",
    "inserted_prompt_tokens",
    "prm_input_tokens",
    "prm_output_tokens",
    "c_used",
    "stop_reason",
    "iterations",
    "wall_time_s",
    "method",
    "budget",
    "seed",
    "policy_model",
    "prm_model",
)
NODE_FIELDS = (
    "node_id",
    "parent_id",
    "text",
    "inserted_text",
    "q",
    "answered",
    "answer",
    "finish",
    "output_tokens",
    "inserted_tokens",
    "full_generation",
    "from_generative",
    "iteration",
    "c_used",
    "error",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="<output_root>/run=<id> of a make synth run")
    parser.add_argument("--out", type=Path, default=FIXTURE)
    args = parser.parse_args()
    run = RunFolder.at(args.run_dir)
    nodes: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in run.read("tree_nodes").to_pylist():
        nodes[row["problem_id"]].append({k: row[k] for k in NODE_FIELDS})
    lines = []
    for tree in sorted(run.read("trees").to_pylist(), key=lambda t: t["problem_id"]):
        entry = {"tree": {k: tree[k] for k in TREE_FIELDS}, "nodes": nodes[tree["problem_id"]]}
        lines.append(json.dumps(entry, ensure_ascii=False, sort_keys=True))
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} trees, {sum(len(v) for v in nodes.values())} nodes -> {args.out}")


if __name__ == "__main__":
    main()
