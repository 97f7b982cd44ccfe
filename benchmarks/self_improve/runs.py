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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.self_improve.plan import ROUND0_MAX_STEPS, ROUND0_SEED, Mode, Problem
from benchmarks.support.commands import REPO
from benchmarks.support.stages import write_whole
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
    return write_whole(path, "".join(json.dumps(p) + "\n" for p in problems))


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
        """Paths the process gate kept out, per check, summed over the tables (a path kept
        out of sft and of kto counts once in each); prm's relabelled steps are not paths
        (`relabelled_steps`)."""
        from pipeline.records import gate_unit

        out = dict.fromkeys(PROCESS_GATE_KEYS, 0)
        for gate, dropped in self.gate_drops.items():
            check = gate.rsplit(".", 1)[-1]
            if check in out and gate_unit(gate) == "paths":
                out[check] += dropped
        return out

    def relabelled_steps(self) -> int:
        """prm steps the false-equation check relabelled from good to bad (their rows stay)."""
        from pipeline.records import gate_unit

        return sum(n for gate, n in self.gate_drops.items() if gate_unit(gate) == "steps")


TABLES = ("sft", "dpo", "step_dpo", "prm", "kto")


def read_run(work: Path, run_id: str) -> RunData:
    from pipeline.store.run_folder import RunFolder

    folder = RunFolder.open(work / "runs", run_id)
    trees = folder.read("trees").to_pylist()
    tables = {name: folder.read(name).to_pylist() for name in (*TABLES, "nodes")}
    return RunData(run_id, trees, tables, gate_drops(trees))


def gate_drops(trees: Sequence[dict[str, Any]]) -> Counter[str]:
    """The trees' ``gate_drops`` summed per gate (`pipeline.records.gate_unit`: each
    gate's unit)."""
    drops: Counter[str] = Counter()
    for t in trees:
        for d in t["gate_drops"] or []:
            drops[d["gate"]] += d["dropped"]
    return drops


def rebuilt(
    work: Path,
    run_id: str,
    records: dict[str, Any],
    extraction: str,
    instruction: str = "{problem}",
) -> RunData:
    """A run's training rows built again from its trees (``tree_nodes``, ``trees``) under
    another `records:` config (`pipeline.records.rebuild_records`): the same searches,
    other gates.  `extraction` and `instruction` are the run's (its search's answer
    extraction, its policy prompt: round 1's is the bare problem)."""
    from pipeline.records import RecordsConfig, rebuild_records
    from pipeline.store.run_folder import RunFolder
    from search.answers import AnswerExtraction

    folder = RunFolder.open(work / "runs", run_id)
    built = asyncio.run(
        rebuild_records(
            folder.read("trees").to_pylist(),
            folder.read("tree_nodes").to_pylist(),
            config=RecordsConfig.model_validate(records),
            extraction=AnswerExtraction(extraction),
            instruction=instruction,
        )
    )
    tables = {name: built.get(name, []) for name in (*TABLES, "nodes")}
    return RunData(f"{run_id} (rebuilt)", built["trees"], tables, gate_drops(built["trees"]))


def rows_under(work: Path, config: RunConfig, gates: dict[str, Any]) -> RunData:
    """The rows of `config`'s run rebuilt with some of its `records.gates` changed."""
    records = edited(config.records, gates=edited(config.records.gates, **gates))
    return rebuilt(
        work,
        config.resolved_run_id,
        records.model_dump(exclude_unset=True),
        config.search.answer_extraction,
        config.policy.prompts.policy_instruction,
    )


def write_sft(data: RunData, path: Path) -> Path:
    """The run's sft rows as the TRL half reads them (prompt and completion messages)."""
    return write_whole(
        path,
        "".join(
            json.dumps({"prompt": r["prompt"], "completion": r["completion"]}) + "\n"
            for r in data.tables["sft"]
        ),
    )
