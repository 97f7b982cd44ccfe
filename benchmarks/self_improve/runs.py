"""The benchmark's pipeline runs: their configs, the runs themselves, what they made.

Every run is a real ``python -m jobs.synthesize`` (`benchmarks.support.synthesis`) under
``WORK/runs``; a run whose ``WORK/<name>.done`` marker exists is not run again, so an
interrupted benchmark resumes.

* round 0: configs/local.yaml (the base SmolLM2 policy, GenPRM, BG-MCTS, B = 300 output
  tokens) on round 0's problems of one or two operations, with one- and two-step
  few-shot examples;
* round 1: configs/local-prm.yaml with the round-0 policy (its GGUF export) prompted
  with the bare problem as it was trained, the one-pass PRM trained on round 0's trees,
  the round-1 problems, and a budget that counts every token the search pays for
  (policy output + PRM input + PRM output: the yield's denominator), so that BG-MCTS
  and repeated sampling spend the same total tokens per problem.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.self_improve.plan import ROUND0_MAX_STEPS, ROUND0_SEED, Mode, Problem
from benchmarks.support.commands import REPO
from benchmarks.support.synthesis import LOCAL, LOCAL_PRM, base_config, edited, run_variant
from pipeline.config import RunConfig

ROUND0_PROMPT = REPO / "configs" / "prompts" / "arithmetic-fewshot-multistep.txt"
# the process gate's threshold on the one-pass PRM's step values: its own decision
# boundary (a step more likely wrong than right), fixed before any run was looked at
STEP_VALUE_THRESHOLD = 0.5
PROCESS_GATE_KEYS = ("false_equation", "low_step_value")
# what a round-1 method changes in `search:`; a multi-step solution is ~3 lines of
# ~20 tokens, so 160 caps a runaway sample without cutting a real one
SEARCHES: dict[str, dict[str, Any]] = {
    "bg_mcts": {"algorithm": "bg_mcts"},
    "repeated_sampling": {"algorithm": "repeated_sampling", "full_max_tokens": 160},
}
# round 1's `search.cost`: policy output, PRM input and PRM output tokens all count
ROUND1_COST = {
    "policy_output": 1.0,
    "prm_input": 1.0,
    "prm_output": 1.0,
    # a path is the problem and a few short lines: 384 tokens cover any score
    "prm_reserve_input_tokens": 384,
    "prm_reserve_output_tokens": 0,
}


def round0_config(mode: Mode, work: Path) -> RunConfig:
    """configs/local.yaml on round 0's problems of one or two operations, its few-shot
    prompt with two-step examples beside the one-step one (the base model copies the
    form it is shown: with one-step examples only it never writes a second step)."""
    base = base_config(LOCAL)
    count = mode.round0_problems
    config = run_variant(
        base,
        "self-improve-round0",
        work / "runs",
        source={
            "kind": "arithmetic",
            "count": count,
            "seed": ROUND0_SEED,
            "max_steps": ROUND0_MAX_STEPS,
        },
        count=count,
        budget=mode.round0_budget,
        search={"algorithm": "bg_mcts"},
    )
    prompts = edited(
        config.policy.prompts, policy_instruction=ROUND0_PROMPT.read_text(encoding="utf-8")
    )
    return edited(config, policy=edited(config.policy, prompts=prompts))


def round1_config(
    method: str,
    seed: int,
    *,
    mode: Mode,
    work: Path,
    problems: Path,
    policy_gguf: Path,
    prm: Path,
) -> RunConfig:
    """configs/local-prm.yaml turned into one round-1 run of `method` with search seed
    `seed`, both halves of the process gate on (other gates: `rows_under`)."""
    base = base_config(LOCAL_PRM)
    config = run_variant(
        base,
        f"self-improve-r1-{method.replace('_', '-')}-s{seed}",
        work / "runs",
        source={
            "kind": "jsonl",
            "path": str(problems),
            "columns": {"problem": "problem", "reference": "answer", "id": "id"},
        },
        count=mode.round1_problems,
        budget=mode.round1_budget,
        # every paid token counts against B: the same total for every method
        search={**SEARCHES[method], "cost": ROUND1_COST},
    )
    policy = edited(
        config.policy,
        engine=edited(config.policy.engine, model=str(policy_gguf)),
        # the round-0 policy was fine-tuned on the bare problem as the user turn: no few-shot
        prompts={"policy_instruction": "{problem}", "policy_stop": ["Problem:"]},
    )
    scorer = edited(
        config.scorer,
        engine=edited(config.scorer.engine, model=str(prm)),
        # a node's value is its path's lowest step value, so the process gate's threshold
        # reads "some step scored below it" for tree nodes and whole samples alike
        one_pass=edited(config.scorer.one_pass, node_value="min"),
    )
    gates = edited(config.records.gates, false_equation=True, min_step_value=STEP_VALUE_THRESHOLD)
    return edited(
        config,
        seed=seed,
        policy=policy,
        scorer=scorer,
        records=edited(config.records, gates=gates),
    )


def write_problems(problems: Sequence[Problem], path: Path) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return path


@dataclass
class RunData:
    """What one run searched, spent and wrote."""

    name: str
    trees: list[dict[str, Any]]
    tables: dict[str, list[dict[str, Any]]]
    gate_drops: Counter[str] = field(default_factory=Counter)

    @property
    def total_tokens(self) -> int:
        return sum(
            t["policy_output_tokens"] + t["prm_input_tokens"] + t["prm_output_tokens"]
            for t in self.trees
        )

    def process_drops(self) -> dict[str, int]:
        """What the process gate kept out, per check, over every table."""
        out = dict.fromkeys(PROCESS_GATE_KEYS, 0)
        for gate, dropped in self.gate_drops.items():
            check = gate.rsplit(".", 1)[-1]
            if check in out:
                out[check] += dropped
        return out


TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")


def read_run(work: Path, run_id: str) -> RunData:
    from pipeline.store.run_folder import RunFolder

    folder = RunFolder.open(work / "runs", run_id)
    trees = folder.read("trees").to_pylist()
    drops: Counter[str] = Counter()
    for t in trees:
        for d in t["gate_drops"] or []:
            drops[d["gate"]] += d["dropped"]
    tables = {name: folder.read(name).to_pylist() for name in (*TABLES, "nodes")}
    return RunData(run_id, trees, tables, drops)


def rebuilt(work: Path, run_id: str, records: dict[str, Any], extraction: str) -> RunData:
    """A run's training rows built again from its trees (``tree_nodes``, ``trees``) under
    another `records:` config: the same searches, other gates."""
    from pipeline.records.build import records_for
    from pipeline.records.config import RecordsConfig
    from pipeline.records.rebuild import rebuild_result
    from pipeline.store.run_folder import RunFolder
    from search.answers import AnswerExtraction

    folder = RunFolder.open(work / "runs", run_id)
    trees = folder.read("trees").to_pylist()
    nodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in folder.read("tree_nodes").to_pylist():
        nodes[str(row["problem_id"])].append(row)
    config = RecordsConfig.model_validate(records)

    async def build_all() -> list[dict[str, list[dict[str, Any]]]]:
        return await asyncio.gather(
            *(
                records_for(
                    rebuild_result(nodes[str(t["problem_id"])], t),
                    t["reference"],
                    problem_id=str(t["problem_id"]),
                    run_id=run_id,
                    config=config,
                    contamination=t["contaminated"],
                    instruction="{problem}",
                    extraction=AnswerExtraction(extraction),
                )
                for t in trees
            )
        )

    built = asyncio.run(build_all())
    tables = {name: [r for b in built for r in b[name]] for name in (*TABLES, "nodes")}
    new_trees = [b["trees"][0] for b in built]
    drops: Counter[str] = Counter()
    for t in new_trees:
        for d in t["gate_drops"] or []:
            drops[d["gate"]] += d["dropped"]
    return RunData(f"{run_id} (rebuilt)", new_trees, tables, drops)


def rows_under(work: Path, config: RunConfig, gates: dict[str, Any]) -> RunData:
    """The rows of `config`'s run rebuilt with some of its `records.gates` changed."""
    records = edited(config.records, gates=edited(config.records.gates, **gates))
    return rebuilt(
        work,
        config.resolved_run_id,
        records.model_dump(exclude_unset=True),
        config.search.answer_extraction,
    )


def write_sft(data: RunData, path: Path) -> Path:
    """The run's sft rows as the TRL half reads them (prompt and completion messages)."""
    path.write_text(
        "".join(
            json.dumps({"prompt": r["prompt"], "completion": r["completion"]}) + "\n"
            for r in data.tables["sft"]
        )
    )
    return path
