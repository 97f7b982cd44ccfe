"""Build a run folder for the TRL client tests: `python -m tests.trl.build_run OUTPUT_ROOT`.

The TRL trainers need rows with correct AND incorrect answers in one tree, which
SmolLM2-135M does not produce (it writes no ``\\boxed{}`` answer: shared FACTS),
and the model-free load model answers "42" everywhere.  So the searches
run the scripted policy and scorer of `search.scripted` (a fake LLM: the only
fake here), and everything after the search is the real code a pipeline run
uses: `pipeline.records.records_for` (math-verify grading, every record type),
the decontamination index over the bundled MATH500 and GSM8K test sets, the
crash-safe `ParquetSink` and the run manifest `publish` reads.  One problem is
copied from MATH500, so decontamination must keep it out of the training rows.

The run also holds the real SmolLM2 trees of `tests/fixtures/smollm2_trees.jsonl`
(problem ids ``smollm2-...``), replayed through the same `records_for`, so the
trainers also see real model text (the tests check that no trained token lies
after a row's answer).  A third of the problems are held out (``test`` split), so
the published repo has both splits.

Runs in the project's main virtualenv (`scripts/test-trl.sh` calls it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.problems.decontamination import DecontaminationConfig, build_decontaminator
from pipeline.records import RecordsConfig, RecordsSpec, records_for
from pipeline.records.rebuild import rebuild_result
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from search import parse_search_config, run_search
from search.answers import AnswerExtraction
from search.scripted import ScriptedPolicy, ScriptedScorer

REAL_TREES = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2_trees.jsonl"

RUN_ID = "trl"
REFERENCE = "12"
PROBLEMS = [
    "Tom has 5 apples and buys 7 more. How many apples does he have now?",
    "A box holds 3 rows of 4 eggs. How many eggs are in the box?",
    "What is 48 divided by 4?",
    "Sara reads 2 pages a day for 6 days. How many pages does she read?",
    "What number is 20 less than 32?",
    "Compute 3 + 4 + 5.",
]


def math500_problem() -> str:
    from pipeline.problems.decontamination import bundled_benchmark

    return bundled_benchmark("math500")[0]


async def build(output_root: Path) -> Path:
    """Search every problem, write all records of the run, return the run folder."""
    records_config = RecordsConfig(max_pairs_per_problem=4, test_fraction=0.3)
    decontaminator = build_decontaminator(DecontaminationConfig())
    assert decontaminator is not None
    sink = ParquetSink(RunFolder.open(output_root, RUN_ID))
    search = parse_search_config({"algorithm": "bg_mcts"})
    for i, problem in enumerate([*PROBLEMS, math500_problem()]):
        policy = ScriptedPolicy(seed=i, p_answer=0.45, step_tokens=(3, 8))
        result = await run_search(problem, search, policy, ScriptedScorer(seed=i), 600, i)
        records = await records_for(
            result,
            REFERENCE,
            RecordsSpec(
                problem_id=f"p{i}",
                run_id=RUN_ID,
                config=records_config,
                policy_model=policy.name,
                prm_model="scripted-prm",
                contamination=decontaminator.match(problem),
            ),
        )
        sink.write_batch(records)
    for entry in _real_trees():
        tree = entry["tree"]
        records = await records_for(
            rebuild_result(entry["nodes"], tree),
            tree["reference"],
            RecordsSpec(
                problem_id=f"smollm2-{tree['problem_id']}",
                run_id=RUN_ID,
                config=records_config,
                policy_model=tree["policy_model"],
                prm_model=tree["prm_model"],
                extraction=AnswerExtraction.LAST_NUMBER,
            ),
        )
        sink.write_batch(records)
    manifest = {
        "run_id": RUN_ID,
        "config": {
            "budget": 600,
            "search": {"algorithm": "bg_mcts"},
            "policy": {"engine": {"model": "scripted"}},
            "scorer": {"engine": {"model": "scripted-prm"}},
            "records": records_config.model_dump(mode="json"),
        },
    }
    (sink.run_dir / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return sink.run_dir


def _real_trees() -> list[dict[str, Any]]:
    text = REAL_TREES.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


if __name__ == "__main__":
    print(asyncio.run(build(Path(sys.argv[1]))))
