"""A byte-identity guard of the records builders: every row they build, fingerprinted.

Every record type's rows (and each tree's data yield) for a fixed set of trees under
every records config the tests use, so a change to `pipeline.records` that should not
change a row can prove it did not.  The trees: the real SmolLM2 trees of
`tests/fixtures/smollm2_trees.jsonl` (rebuilt from their ``tree_nodes`` rows) and seeded
scripted searches (`search.scripted`), with a reference, another reference and none;
the configs: defaults, every pairing rule, self-correction include/only, each gate
opened or tightened, prm variants, pseudo labels, the training prompt's three sources,
the split, blank-line folding, decontamination.  The simulated evaluation's rows
(`pipeline.evaluation.runner`, which grades and counts yields on its own path) are in too.

The fingerprints are sha256 of each row as sorted-key JSON (the search's wall time set
to 0: it is the only field a clock writes).  Regenerate after a change that is meant to
change rows, and say why in the commit::

    python -m tests.pipeline.records.golden
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.records import RecordsConfig, RecordsSpec, records_for
from pipeline.records.rebuild import rebuild_result
from search import SearchResult, parse_search_config, run_search
from search.answers import AnswerExtraction
from search.scripted import ScriptedPolicy, ScriptedScorer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TREES = FIXTURES / "smollm2_trees.jsonl"
GOLDEN = FIXTURES / "records_golden.json"

SCRIPTED_PROBLEM = "What is the value of the expression?"
INSTRUCTION = "Solve this, step by step: {problem}"
OPEN = {"min_edit_distance": 0, "sft_top_k": 0, "near_duplicate": 1.0}
OPEN_ALL = {**OPEN, "rejected_states_reference": False}

# name -> the `records:` section (what the tests' RecordsConfig(...) calls set)
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "open": {"gates": OPEN_ALL},
    "open_include": {"gates": OPEN_ALL, "self_correction": "include"},
    "include": {"self_correction": "include"},
    "only": {"self_correction": "only", "gates": OPEN},
    "every_gate_open": {
        "gates": {
            **OPEN_ALL,
            "drop_truncated": False,
            "require_statement": False,
        },
        "prm": {"unanswered_branches": True},
    },
    "best_vs_worst": {"pairing": "best_vs_worst", "max_pairs_per_problem": 2, "gates": OPEN},
    "random": {"min_sft_score": 0.3, "max_pairs_per_problem": 1, "pairing": "random", "seed": 5},
    "random_open": {"pairing": "random", "seed": 3, "gates": OPEN_ALL},
    "prefix": {"dpo": {"pair_types": ["siblings", "cousins", "root", "prefix"]}, "gates": OPEN},
    "only_prefix": {"dpo": {"pair_types": ["prefix"]}, "gates": OPEN},
    "strict": {"gates": {"min_edit_distance": 1000, "min_q_margin": 0.9}},
    "margin": {"gates": {"min_q_margin": 0.1}, "max_pairs_per_problem": 8},
    "top1": {"gates": {"sft_top_k": 1}},
    "top0": {"gates": {"sft_top_k": 0}},
    "near1": {"gates": {"near_duplicate": 1.0}},
    "near_low": {"gates": {"near_duplicate": 0.6, "sft_top_k": 0}},
    "mixed_only": {"gates": {"unpaired_from": "mixed"}},
    "no_dedupe": {"dedupe": False, "gates": OPEN},
    "prm_branches": {"prm": {"unanswered_branches": True}},
    "prm_pseudo": {"prm": {"pseudo_labels": True}, "pseudo_threshold": 0.6},
    "majority": {"pseudo_label": "majority", "prm": {"pseudo_labels": True}},
    "template": {"prompt": {"template": "Problem: {problem}\nAnswer in a box."}},
    "search_prompt": {"prompt": {"search_prompt": True}, "gates": OPEN},
    "split": {"test_fraction": 0.5, "max_pairs_per_problem": 0},
    "raw_lines": {"fold_blank_lines": False, "gates": OPEN},
}
# the configs a tree without a reference is run under (the rest differ only in what a
# reference enables)
PSEUDO_CONFIGS = ("default", "open_include", "prm_pseudo", "majority", "every_gate_open")


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _fixture_inputs() -> Iterator[tuple[str, SearchResult, str | None, AnswerExtraction]]:
    for line in TREES.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        tree = entry["tree"]
        result = rebuild_result(entry["nodes"], tree)
        yield (
            f"smollm2/{tree['problem_id']}",
            result,
            tree["reference"],
            AnswerExtraction.LAST_NUMBER,
        )


Input = tuple[str, SearchResult, str | None, AnswerExtraction]


async def _scripted_inputs() -> list[Input]:
    out: list[Input] = []
    runs = [(s, "bg_mcts", 4000.0) for s in range(3)] + [(7, "repeated_sampling", 3000.0)]
    for seed, algorithm, budget in runs:
        config = parse_search_config({"algorithm": algorithm})
        policy = ScriptedPolicy(seed=seed, p_answer=0.5, answers=("12", "7", "\\frac{1}{2}"))
        result = await run_search(
            SCRIPTED_PROBLEM, config, policy, ScriptedScorer(seed=seed), budget, seed
        )
        result = replace(result, wall_time_s=0.0)
        for reference in ("12", "0.5"):
            name = f"scripted/{algorithm}/{seed}/ref={reference}"
            out.append((name, result, reference, AnswerExtraction.BOXED))
    return out


async def _records_cases() -> dict[str, dict[str, Any]]:
    inputs = list(_fixture_inputs()) + await _scripted_inputs()
    cases: dict[str, dict[str, Any]] = {}
    for name, result, reference, extraction in inputs:
        runs: list[tuple[str, str | None, str, str | None]] = [
            (config, reference, f"{name}/{config}", None) for config in CONFIGS
        ]
        runs += [(c, None, f"{name}/noref/{c}", None) for c in PSEUDO_CONFIGS]
        runs.append(("default", reference, f"{name}/contaminated", "math500"))
        for config_name, ref, case, contamination in runs:
            # a generous grading limit: a comparison cut off on a busy machine would change
            # a label, not the code
            config = RecordsConfig.model_validate({**CONFIGS[config_name], "grade_timeout_s": 120})
            records = await records_for(
                result,
                ref,
                RecordsSpec(
                    problem_id=case.split("/noref")[0].split("/contaminated")[0],
                    run_id="golden",
                    config=config,
                    policy_model="policy-model",
                    prm_model="prm-model",
                    contamination=contamination,
                    instruction=INSTRUCTION,
                    extraction=extraction,
                ),
            )
            cases[case] = records
    return cases


def _evaluation_rows() -> dict[str, dict[str, Any]]:
    """The simulated evaluation's two tables for a small grid (wall time zeroed)."""
    from pipeline.config import parse_config
    from pipeline.evaluation.config import EvalConfig
    from pipeline.evaluation.runner import _simulated_chunk, grid
    from search.simulated import SimParams, simulated_problems

    cases: dict[str, dict[str, Any]] = {}
    for records_name in ("default", "open_include", "top1"):
        config = parse_config(
            {
                "name": "golden",
                "output_dir": "/nonexistent/golden",
                "methods": ["bg_mcts", "repeated_sampling"],
                "budgets": [3000],
                "seeds": [0, 1],
                "environment": {"kind": "simulated", "problems": 4, "workers": 1},
                "records": CONFIGS[records_name],
            },
            EvalConfig,
        )
        env = config.environment
        params = SimParams(**env.params)  # type: ignore[union-attr]
        problems = [
            {"problem_id": p.problem_id, "problem": p.problem, "reference": p.reference}
            for p in simulated_problems(env.problems, seed=env.seed, params=params)  # type: ignore[union-attr]
        ]
        tasks = grid(config, problems)
        trees, nodes = _simulated_chunk(
            env.model_dump(mode="json"), config.records.model_dump(mode="json"), tasks
        )
        tree_rows = [{**r, "wall_time_s": 0.0} for r in trees.to_pylist()]
        cases[f"evaluation/{records_name}"] = {
            "eval_trees": tree_rows,
            "eval_nodes": nodes.to_pylist(),
        }
    return cases


def _yields(records: dict[str, Any]) -> dict[str, int]:
    from pipeline.records import YIELD_COUNTS

    trees = records.get("trees") or records.get("eval_trees") or []
    return {k: sum(int(r[k]) for r in trees) for k in YIELD_COUNTS}


def fingerprints() -> dict[str, Any]:
    """{case: {"yields": {...}, "sha256": {record type: sha256 of its rows},
    "rows": {record type: [the first 8 hex digits of each row's sha256]}}}."""
    cases = asyncio.run(_records_cases())
    cases.update(_evaluation_rows())
    out: dict[str, Any] = {}
    for case, records in cases.items():
        for row in records.get("trees", []):
            row["wall_time_s"] = 0.0
        out[case] = {
            "yields": _yields(records),
            "sha256": {kind: _digest(rows) for kind, rows in records.items()},
            "rows": {kind: [_digest(r)[:8] for r in rows] for kind, rows in records.items()},
        }
    return out


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Where `actual` differs from `expected`: case, record type and row, one line each."""
    lines = [f"{case}: case missing" for case in expected if case not in actual]
    lines += [f"{case}: case not in the golden file" for case in actual if case not in expected]
    for case in sorted(set(expected) & set(actual)):
        want, got = expected[case], actual[case]
        if want["yields"] != got["yields"]:
            lines.append(f"{case}: yields {got['yields']} != {want['yields']}")
        for kind in sorted(set(want["sha256"]) | set(got["sha256"])):
            if want["sha256"].get(kind) == got["sha256"].get(kind):
                continue
            rows_want, rows_got = want["rows"].get(kind, []), got["rows"].get(kind, [])
            changed = [
                i
                for i in range(max(len(rows_want), len(rows_got)))
                if rows_want[i : i + 1] != rows_got[i : i + 1]
            ]
            lines.append(
                f"{case}: {kind}: {len(rows_got)} rows (golden {len(rows_want)}), "
                f"rows {changed[:10]} differ"
            )
    return lines


def write() -> Path:
    GOLDEN.write_text(json.dumps(fingerprints(), sort_keys=True, separators=(",", ":")) + "\n")
    return GOLDEN


if __name__ == "__main__":
    path = write()
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)
