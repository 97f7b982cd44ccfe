"""How long does the tree explorer take to open a 1,500-node tree in headless Chromium?

A seeded synthetic tree (a few wide levels, then deep branches; 200-character steps, a
tenth of the nodes answered, rows and gate drops on some) is written as an explorer page
(`pipeline.report.explorer`).  Debian's Chromium (tests/browser.py) loads the page, whose
script draws the problem list and opens the tree to depth 2, then "Expand all" draws
every node: timed from the page's load to the last node drawn, the median of --runs
loads.  Needs `make chromium`.  Last line: open_<nodes>_nodes_s=<float>.

    python -m benchmarks.explorer_open [--nodes 1500] [--runs 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.records.dropped import Dropped
from pipeline.report.explorer import OUTCOMES, TABLES, problem_data, render_html
from tests.browser import chromium_page

SENTENCE = "so the sum of both sides is then we add each term and divide by two to get"


def synthetic_problem(nodes: int, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    words = SENTENCE.split()
    rows: list[dict[str, Any]] = []
    for i in range(nodes):
        # early nodes are spread wide, later ones mostly extend a recent node (deep paths)
        low = max(0, i - 30) if rng.random() < 0.7 else 0
        parent = None if i == 0 else rng.randrange(low, i)
        answered = i > 0 and rng.random() < 0.1
        text = " ".join(rng.choice(words) for _ in range(40))[:200]
        rows.append(
            {
                "node_id": i,
                "parent_id": parent,
                "text": text,
                "inserted_text": "" if i == 0 else "\n\nStep:",
                "q": rng.random() if i else 0.0,
                "answered": answered,
                "answer": str(rng.randrange(5)) if answered else None,
                "label": (rng.random() < 0.5) if answered else None,
                "finish": "eos" if answered else "stop_string",
                "error": None,
                "output_tokens": 50,
            }
        )
    ends = [r["node_id"] for r in rows if r["answered"]]
    tables = {name: [{"node_id": n, "label": True} for n in ends[:10]] for name in TABLES}
    for name in ("dpo", "step_dpo"):
        tables[name] = [{"chosen_node_id": a, "rejected_node_id": b} for a, b in [ends[:2]]]
    dropped = [Dropped("kto.duplicate", (n,)) for n in ends[10:]]
    tree = {
        "problem_id": "synthetic/0",
        "difficulty": "mixed",
        "reference": "3",
        "chosen_node_id": ends[0],
        "chosen_answer": "3",
        "correct": True,
        "method": "bg_mcts",
        "budget": 100000,
        "c_used": 99000.0,
        "stop_reason": "budget_exhausted",
        "contaminated": None,
        "gate_drops": [{"gate": "kto.duplicate", "dropped": len(dropped)}],
    }
    return problem_data(tree, rows, tables, dropped)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    data = {
        "run": "synthetic",
        "scorer": "genprm",
        "tables": list(TABLES),
        "outcomes": list(dict.fromkeys(OUTCOMES.values())),
        "problems": [synthetic_problem(args.nodes)],
    }
    page_file = Path(tempfile.mkdtemp(prefix="explorer-")) / "explorer.html"
    page_file.write_text(render_html(data), encoding="utf-8")
    print(f"page: {page_file} ({page_file.stat().st_size / 1e6:.2f} MB, {args.nodes} nodes)")
    drawn = f"document.querySelectorAll('#view li.node').length === {args.nodes}"
    times = []
    with chromium_page() as page:
        for run in range(args.runs):
            start = time.perf_counter()
            page.goto(page_file.as_uri())  # returns after the load event: the script has run
            page.click("#expand-all")
            page.wait_for_function(drawn)
            times.append(time.perf_counter() - start)
            print(f"run {run + 1}: {times[-1]:.3f} s")
    print(f"open_{args.nodes}_nodes_s={statistics.median(times):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
