"""benchmarks/self_improve/runs.py: the round-1 config is a valid run config that spends
one total-token budget, and a run's rows rebuilt from its trees under the same gates are
the rows the run wrote (so the ungated arm differs from the gated one only by the gate).

The run is the real SmolLM2 trees of tests/fixtures/smollm2_trees.jsonl written through
the real records code and Parquet sink (`tests.test_jobs_check.write_run`)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.self_improve.plan import TINY
from benchmarks.self_improve.runs import (
    STEP_VALUE_THRESHOLD,
    read_run,
    rebuilt,
    round0_config,
    round1_config,
)
from benchmarks.support.synthesis import write_config
from pipeline.config import load_run_config
from tests.test_jobs_check import write_run


def test_round1_config_parses_and_charges_every_token_against_one_budget(tmp_path: Path) -> None:
    policy, prm = tmp_path / "policy.gguf", tmp_path / "prm"
    config = round1_config(
        "repeated_sampling",
        2,
        mode=TINY,
        work=tmp_path,
        problems=tmp_path / "problems.jsonl",
        policy_gguf=policy,
        prm=prm,
    )
    # as jobs.synthesize reads it: the file the benchmark writes
    parsed = load_run_config(write_config(config, tmp_path / "round1.yaml"))
    assert parsed.seed == 2 and parsed.budget == TINY.round1_budget
    cost = parsed.search.cost
    assert (cost.policy_output, cost.prm_input, cost.prm_output) == (1.0, 1.0, 1.0)
    assert parsed.search.algorithm == "repeated_sampling"
    assert parsed.policy.prompts.policy_instruction == "{problem}"
    assert parsed.scorer.kind == "one_pass" and parsed.scorer.one_pass.node_value == "min"
    assert parsed.records.gates.false_equation is True
    assert parsed.records.gates.min_step_value == STEP_VALUE_THRESHOLD


def test_round0_config_is_the_embedded_default_on_one_and_two_step_problems(
    tmp_path: Path,
) -> None:
    parsed = load_run_config(write_config(round0_config(TINY, tmp_path), tmp_path / "r0.yaml"))
    assert parsed.source.kind == "arithmetic" and parsed.source.max_steps == 2
    assert "Step 2: Leo has 5 x 2 = 10 cards." in parsed.policy.prompts.policy_instruction
    assert parsed.scorer.kind == "genprm" and parsed.budget == TINY.round0_budget


def test_rows_rebuilt_under_the_same_gates_are_the_rows_the_run_wrote(tmp_path: Path) -> None:
    write_run(tmp_path / "runs", "real", run_on=False)
    written = read_run(tmp_path, "real")
    again = rebuilt(tmp_path, "real", {}, "last_number")
    assert written.tables["sft"], "the fixture run has sft rows"
    for table in ("sft", "dpo", "step_dpo", "prm", "kto"):
        key = "completion" if table == "sft" else None
        a = [(r["problem_id"], r.get(key) if key else len(r)) for r in written.tables[table]]
        b = [(r["problem_id"], r.get(key) if key else len(r)) for r in again.tables[table]]
        assert sorted(map(str, a)) == sorted(map(str, b)), table
    assert written.gate_drops == again.gate_drops
    assert written.total_tokens == again.total_tokens > 0
