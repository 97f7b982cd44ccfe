"""`bgmcts synth --dry-run` of a GPU config on a machine without the GPU packages.

The laptop that writes a cluster's config has no vLLM: the dry run validates and plans
the config and names the packages the cluster's nodes need (exit 0); a real run there
refuses to start, one line, exit 2, before Ray starts or anything is written.  Run through
the real command line (`python -m jobs.cli`), with `vllm` absent from this environment.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.synthesize import main
from tests.deadlines import JOB_DEADLINE_S

GPU_CONFIG = "configs/math500-qwen2.5-7b.yaml"
NEEDS_VLLM = "the cluster's nodes need: vllm (pip install '.[gpu]')"
REPO = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is not None, reason="checks a machine without vllm"
    ),
]


def _bgmcts(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "synth", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
    )


def test_dry_run_of_a_gpu_config_plans_it_and_names_what_the_cluster_needs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    done = _bgmcts("--config", GPU_CONFIG, "--output-root", str(out), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert re.search(r"problems to search\s+│?\s*134", done.stdout), done.stdout
    assert "4,020,000 cost units at most (134 problems x B=30,000)" in done.stdout
    # B caps the policy's output only; the scorer's tokens are estimated beside it from the
    # model of path depth at this B (a new run has no trees of its own): GenPRM re-reads
    # deeper paths at B = 30,000 than the ~20 per policy token of the embedded default
    flat = " ".join(re.sub(r"[│┌┐└┘├┤─]", " ", done.stdout).split())
    assert "policy output tokens <= 4,020,000 (134 problems x B=30,000; B caps these" in flat
    found = re.search(
        r"scorer tokens \(PRM in \+ out\) ~ ([\d,]+), outside B \(if every search spends B; "
        r"genprm: ~([\d.]+) per policy output token, model of path depth at B=30,000: "
        r"~\d+ nodes of ~180 tokens, mean depth [\d.]+ \(k=2, 1 in flight\), calibrated on "
        r"the simulated grid at B=300-30k and the embedded default at B=300 and 1,000; "
        r"docs/sizing.md\)",
        flat,
    )
    assert found is not None, flat
    assert int(found[1].replace(",", "")) > 20 * 4_020_000 and float(found[2]) > 20
    # the GPUs it holds; rows per GPU-hour only after a run (docs/sizing.md says why)
    assert "GPUs held 2 (policy 1 x 1 GPU, scorer 1 x 1 GPU)" in flat
    assert "kept rows per GPU-hour not estimated before a run" in flat
    assert "vllm:Qwen/Qwen2.5-7B-Instruct" in done.stdout
    assert "vllm:GenPRM/GenPRM-7B" in done.stdout
    # policy and scorer both need vLLM: one line, the package named once
    lines = done.stdout.splitlines()
    assert lines.count(NEEDS_VLLM) == 1 and lines[-1] == NEEDS_VLLM, done.stdout[-500:]
    assert "warning" not in done.stdout  # hub ids: nothing to look for offline
    # a problem's LaTeX is printed as written (rich would read "\[" as an escaped "[")
    assert "Define \\[p = \\sum" in done.stdout, done.stdout
    assert not out.exists()  # started and wrote nothing


def test_a_real_run_without_vllm_is_one_line_exit_2_before_anything_starts(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    done = _bgmcts("--config", GPU_CONFIG, "--output-root", str(out))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: policy: engine.kind='vllm' needs the 'vllm' package: pip install '.[gpu]'\n"
    )
    assert done.stdout == ""
    assert not out.exists()  # no run folder, lease or run.json: Ray was never reached


def _config(tmp_path: Path, policy: dict[str, object], scorer: dict[str, object]) -> Path:
    path = tmp_path / "run.yaml"
    config = {
        "run_id": "plan",
        "output_root": str(tmp_path / "out"),
        "budget": 100,
        "source": {"kind": "arithmetic", "count": 2},
        "search": {"algorithm": "bg_mcts"},
        "policy": {"engine": policy},
        "scorer": {"engine": scorer},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_model_folders_not_here_are_warnings_a_missing_gguf_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(
        tmp_path,
        policy={"kind": "vllm", "model": "/models/qwen"},
        scorer={
            "kind": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "model": "genprm",
            "chat_template": str(tmp_path / "tokenizer"),
        },
    )
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: policy.engine.model: /models/qwen is not a folder here (the nodes that run "
        "the engine need it)"
    ) in out
    assert f"warning: scorer.engine.chat_template: {tmp_path / 'tokenizer'} is not a folder" in out
    assert out.splitlines()[-1] == NEEDS_VLLM

    (tmp_path / "tokenizer").mkdir()  # a folder that is here: no warning
    assert main(["--config", str(path), "--dry-run"]) == 0
    assert "scorer.engine.chat_template" not in capsys.readouterr().out

    # llama.cpp runs where the config is: a GGUF path that is not here is a typo to fix
    gguf = tmp_path / "nope.gguf"
    path = _config(
        tmp_path, policy={"kind": "llamacpp", "model": str(gguf)}, scorer={"kind": "load_model"}
    )
    assert main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: policy: model file not found: {gguf} (engine.model in the config)\n"
