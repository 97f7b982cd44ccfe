"""The long named scenarios: what each protects, and its small real version in the gate.

CI has two gates.  The landing gate (`.ci/run`) runs every tier except the tests marked
``@pytest.mark.scenario("name")``; `make test-scenarios` runs those in full.  A scenario
leaves the landing gate only with a small real version of it that stays there and checks
the same property (`gate`), so a change that breaks the property is still stopped at
landing; the full scenario then tells whether it also holds at size.
docs/testing.md lists them with the paths whose changes call for a scenario run.

tests/test_scenarios.py checks that every marker names a scenario here, that every
scenario here is marked on some test, and that every gate version exists and is not
itself a scenario.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    protects: str  # the property, in a user's words
    gate: tuple[str, ...]  # the landing gate's small real versions (pytest node ids)
    paths: tuple[str, ...]  # a change under one of these calls for a scenario run


SCENARIOS = {
    "node-loss": Scenario(
        protects="a lost search node or policy node on a four-node cluster (head, two GPU "
        "nodes, a CPU node): every problem exactly once, the search actors restarted on a "
        "replacement node and their trees resumed from their request logs, the policy "
        "replica moved to the other GPU node with no request lost",
        gate=(
            "tests/pipeline/run/test_node_loss.py::"
            "test_lost_search_node_of_a_two_node_cluster_resumes_its_trees_on_a_replacement",
        ),
        paths=("pipeline/run/", "actors/replay.py", "actors/serve.py", "pipeline/store/"),
    ),
    "random-kills": Scenario(
        protects="three SIGKILLs of the whole job at seeded moments mid-run over a source "
        "with bad rows and duplicate ids, then a rerun: every valid problem one tree, every "
        "bad row one error row, no node row twice",
        gate=(
            "tests/pipeline/store/test_request_replay.py::"
            "test_rerun_replays_the_killed_trees_requests_and_rebuilds_them_node_for_node",
            "tests/pipeline/problems/test_hostile_sources.py::"
            "test_a_run_over_hostile_lines_writes_one_error_row_each_and_searches_the_rest",
        ),
        paths=("pipeline/store/", "pipeline/run/", "pipeline/problems/"),
    ),
    "kill-resume-real-model": Scenario(
        protects="a job on SmolLM2 (llama.cpp), with GenPRM and with the one-pass PRM "
        "(transformers_prm), SIGKILLed after its first commit and rerun: every problem "
        "once, no node row twice, the one-pass trees scored by the one-pass PRM",
        gate=(
            "tests/pipeline/store/test_request_replay.py::"
            "test_rerun_replays_the_killed_trees_requests_and_rebuilds_them_node_for_node",
            "tests/pipeline/store/test_object_storage.py::"
            "test_run_on_a_bucket_killed_and_resumed_exactly_once_then_reported_and_published",
            "tests/pipeline/run/test_one_pass_run.py::"
            "test_local_prm_config_runs_with_one_pass_scores",
        ),
        paths=("pipeline/store/", "pipeline/run/", "actors/one_pass.py", "actors/engines/"),
    ),
    "ctrl-c-mid-run": Scenario(
        protects="SIGINT to a running job after its first committed tree: exit 130, the "
        "run stops rather than finishes, a rerun resumes",
        gate=(
            "tests/pipeline/run/test_ctrl_c.py::"
            "test_ctrl_c_while_ray_and_the_engines_start_exits_130",
        ),
        paths=("jobs/exits.py", "pipeline/run/synthesis.py", "pipeline/run/cluster.py"),
    ),
    "multi-node-submit": Scenario(
        protects="`ray job submit` to a four-node cluster writing its run to a bucket: the "
        "engines and search actors placed by the config's resources, request-log segments "
        "in the bucket while it runs",
        gate=(
            "tests/test_ray_job_submit.py::test_ray_job_submit_runs_the_synthesize_job",
            "tests/pipeline/run/test_node_loss.py::"
            "test_lost_search_node_of_a_two_node_cluster_resumes_its_trees_on_a_replacement",
        ),
        paths=("jobs/", "pipeline/run/cluster.py", "pipeline/store/", "configs/"),
    ),
    "fenced-writers": Scenario(
        protects="a lease holder on a bucket that stalls past its TTL and is overtaken by a "
        "real job: it commits nothing more, and check, report and publish count every "
        "problem once",
        gate=(
            "tests/pipeline/store/test_fenced_writers.py::"
            "test_an_overtaken_holder_stops_at_its_next_commit_without_committing",
            "tests/pipeline/store/test_fenced_writers.py::"
            "test_readers_count_each_problem_from_one_generation",
        ),
        paths=("pipeline/store/",),
    ),
    "nightly-at-size": Scenario(
        protects="`nightly.budget_per_night` on real runs (a night admits only the problems "
        "whose whole budget B fits the cap, every search runs to its end, the next night "
        "starts after what was admitted), and a night started while the previous one still "
        "searches: every problem searched once",
        gate=(
            "tests/pipeline/run/test_nightly.py::"
            "test_nightly_job_takes_the_next_slice_publishes_and_resumes",
            "tests/pipeline/run/test_nightly.py::"
            "test_nights_racing_on_a_local_root_get_disjoint_slices",
            "tests/pipeline/run/test_nightly_spend_cap.py::"
            "test_early_stopped_searches_leave_room_for_more_problems",
        ),
        paths=(
            "pipeline/run/nightly.py",
            "pipeline/run/night_ledger.py",
            "jobs/nightly.py",
            "pipeline/publish/",
        ),
    ),
    "self-improvement": Scenario(
        protects="the self-improvement loop in miniature on real parts: round 0's search, "
        "SFT, a one-pass PRM trained on its trees, the SFT checkpoint exported to GGUF and "
        "served by llama.cpp in round 1 (BG-MCTS and repeated sampling at one token "
        "budget), round-1 SFT and held-out answers from every checkpoint",
        gate=(
            "tests/trl/test_self_improve.py::test_one_round_searches_then_trains_sft_on_its_rows",
        ),
        paths=("benchmarks/self_improve/", "pipeline/training/", "jobs/train_prm.py"),
    ),
    "vllm-whole-runs": Scenario(
        protects="on vLLM inside Ray Serve with real weights: the GenPRM job killed after its "
        "first commit and rerun (every problem once, no node twice), and a whole job with "
        "the one-pass scorer on vLLM's pooling runner (clean rows, both engines reading "
        "vLLM's prefix cache)",
        gate=(
            "tests/vllm/test_pipeline_on_vllm.py::"
            "test_the_genprm_run_on_vllm_writes_every_problem_once_with_clean_rows",
            "tests/vllm/test_pooling_engines.py::"
            "test_a_child_reads_its_parents_path_from_the_cache_and_computes_only_its_step",
        ),
        paths=("actors/engines/", "configs/local-vllm.yaml", "configs/local-vllm-prm.yaml"),
    ),
}


def check_scenario_marker(nodeid: str, args: tuple[object, ...]) -> None:
    """A `scenario` marker names exactly one scenario of SCENARIOS (at collection)."""
    import pytest

    if len(args) != 1 or args[0] not in SCENARIOS:
        raise pytest.UsageError(
            f"{nodeid}: @pytest.mark.scenario takes one name of tests/scenarios.py "
            f"({', '.join(SCENARIOS)}), not {args!r}"
        )
