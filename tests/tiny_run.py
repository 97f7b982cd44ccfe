"""The small run config the pipeline's integration tests share: a JSONL problem file,
BG-MCTS with short steps, the same engine for policy and GenPRM scorer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# One thread per engine, as the shipped configs: the test tiers run two files at once,
# each with a policy and a scorer engine, on two cores, where two threads per engine wait
# on each other (docs/benchmarks.md, "llama.cpp's threads on shared cores").
LLAMACPP = {"kind": "llamacpp", "context_length": 2048, "threads": 1, "parallel": 2}
COLUMNS = {"problem": "question", "reference": "answer", "id": "id"}


def tiny_run_config(
    tmp_path: Path,
    rows: list[dict[str, str]],
    *,
    budget: int,
    engine: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A run config (as a dict) over `rows` written to tmp_path/problems.jsonl."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return run_config(problems, tmp_path / "out", budget=budget, engine=engine, **extra)


def run_config(
    problems: Path,
    output_root: Path,
    *,
    budget: int,
    engine: dict[str, Any] | None = None,
    step_max_tokens: int = 16,
    analysis_tokens: int = 4,
    **extra: Any,
) -> dict[str, Any]:
    """BG-MCTS over a JSONL problem file, one engine for policy and scorer; `extra` overrides."""
    engine = engine or LLAMACPP
    return {
        "output_root": str(output_root),
        "budget": budget,
        "source": {"kind": "jsonl", "path": str(problems), "columns": COLUMNS},
        "search": {"algorithm": "bg_mcts", "step_max_tokens": step_max_tokens},
        "policy": {"engine": engine},
        "scorer": {"engine": engine, "genprm": {"max_analysis_tokens": analysis_tokens}},
        "trees_per_actor": 2,
        **extra,
    }


def start_synthesize_job(
    config: Path, *, stderr: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """`python -m jobs.synthesize --config CONFIG` on a local Ray of its own.

    Its own process group (`start_new_session`), so a test's kill of the group takes
    its Ray down with it; RAY_ADDRESS is dropped so it never joins another cluster.
    SIGINT is set back to its default in the child, as a command started from a terminal
    has it: a test run started in the background by a non-interactive shell (a CI runner)
    ignores SIGINT, and a child would inherit that.
    """
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.synthesize", "--config", str(config)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=_sigint_default,
    )


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def one_pass_scorer(checkpoint: Path, **engine: Any) -> dict[str, Any]:
    """A `scorer:` block of kind one_pass: the `transformers_prm` engine on `checkpoint`
    (a test's tiny PRM, `tests/prm_checkpoint.py`), laid out as `bgmcts train-prm` trains."""
    return {
        "kind": "one_pass",
        "engine": {"kind": "transformers_prm", "model": str(checkpoint), "threads": 1, **engine},
        "num_cpus": 0,
        "one_pass": {"step_separator": "\n", "steps": "lines", "node_value": "last"},
    }


def local_prm_config(
    output_root: Path, checkpoint: Path, *, problems: int, budget: int, **extra: Any
) -> dict[str, Any]:
    """configs/local-prm.yaml (as a dict) made small: `problems` generated arithmetic
    problems at `budget`, the scorer's checkpoint `checkpoint`; `extra` overrides."""
    import yaml

    config: dict[str, Any] = yaml.safe_load((REPO / "configs" / "local-prm.yaml").read_text())
    config["source"]["count"] = problems
    config["scorer"]["engine"]["model"] = str(checkpoint)
    return {
        **config,
        "output_root": str(output_root),
        "budget": budget,
        "trees_per_actor": problems,
        **extra,
    }
