"""Every token computed once: what the embedded engines compute of what they are sent,
before and after a tree's requests find their own prefix, side by side in one invocation.

    python -m benchmarks.prefix_reuse [--work-dir DIR] [--before REV] [--quick]

A child's prompt is its parent's prompt plus one step, so most of what the CPU engines are
sent is a prefix they have already read for the same tree.  This benchmark runs the
embedded default (configs/local.yaml: SmolLM2-135M on llama.cpp, policy and GenPRM) and
its one-pass twin (configs/local-prm.yaml: the policy on llama.cpp, the one-pass PRM on
transformers) on the same problems and seeds, twice each:

* `before`: the code and shipped configs of revision `--before` (default: the landed
  commit before the engines kept a tree's prefix), checked out beside this one with `git
  worktree` and run from there with this venv;
* `after`: this checkout.

Stages, each a real `python -m jobs...` child process with its log in the work dir, each
skipped when its marker says it finished (an interrupted benchmark goes on where it
stopped): `before`, `after` (the GenPRM runs), `prm` (`bgmcts train-prm` on the `after`
run's prm rows, the checkpoint both one-pass runs score with), `one_pass_before`,
`one_pass_after`.  The GenPRM pair runs first and back to back, so that their wall times
are measured as close together as the machine allows.

The tables come from the engines' own counters, as run.json reads them
(`pipeline.report.engine_reads`: tokens sent per engine call, those the engine said it
served from its cache, computed = sent - cached).  Last lines:
`policy_computed_fraction=`, `genprm_computed_fraction=` (computed over sent, `after`),
`one_pass_cpu_computed_per_policy_token=` (the one-pass scorer's computed tokens per
policy output token, `one_pass_after`), `synth_job_seconds=` and
`synth_job_seconds_before=` (the wall seconds of the `after` and `before` GenPRM jobs,
Ray's start-up and the model loads included, as `make synth` pays them).

`--quick`: 4 problems at B=100 (a smoke test of the benchmark, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.support.commands import REPO, run_module
from benchmarks.support.stages import MARKER, write_whole
from benchmarks.support.synthesis import (
    LOCAL,
    LOCAL_PRM,
    base_config,
    edited,
    open_run,
    quick_or_scored_by,
)
from benchmarks.support.synthesis import write_config as write_run_config
from pipeline.config import RunConfig
from pipeline.report.engine_reads import EngineReads, engine_reads

# The landed commit before llama.cpp's slots kept a tree's prefix, GenPRM's prompts
# extended their parent's, and the CPU one-pass engine kept a path's KV.
BEFORE = "0a46448"


@dataclass(frozen=True)
class Run:
    """One run of the comparison: which config, which checkout."""

    name: str
    config: Path
    before: bool


GENPRM_RUNS = (Run("before", LOCAL, before=True), Run("after", LOCAL, before=False))
ONE_PASS_RUNS = (
    Run("one_pass_before", LOCAL_PRM, before=True),
    Run("one_pass_after", LOCAL_PRM, before=False),
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.prefix_reuse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--work-dir", type=Path, default=REPO / "out" / "bench-prefix-reuse")
    parser.add_argument("--before", default=BEFORE, help="the revision to compare against")
    parser.add_argument("--quick", action="store_true", help="4 problems at B=100")
    return parser.parse_args(argv)


def checkout(work: Path, revision: str) -> Path:
    """`revision` checked out (detached) in ``work/before-src``, once."""
    folder = work / "before-src"
    if not (folder / ".git").exists():
        add = ["worktree", "add", "--detach", "--force", str(folder), revision]
        subprocess.run(["git", "-C", str(REPO), *add], check=True, capture_output=True)
    return folder


def run_config(run: Run, work: Path, quick: bool, checkpoint: Path | None) -> RunConfig:
    """`run`'s shipped config (from its own checkout: the settings of that revision), its
    output under `work`; smaller with `quick`; the one-pass runs score with `checkpoint`."""
    source_root = work / "before-src" if run.before else REPO
    config = base_config(source_root / run.config.relative_to(REPO))
    config = edited(config, run_id=run.name, output_root=work)
    return quick_or_scored_by(config, quick, checkpoint)


def synthesize_once(run: Run, config: RunConfig, work: Path) -> float:
    """The job's wall seconds: run now, or read from the marker of an earlier run."""
    marker = work / f"{run.name}{MARKER}"
    if marker.is_file():
        seconds = float(json.loads(marker.read_text())["seconds"])
        print(f"[{run.name}] done before ({seconds:.0f} s), reused", file=sys.stderr)
        return seconds
    path = write_run_config(config, work / f"{run.name}.yaml")
    root = work / "before-src" if run.before else REPO
    seconds = run_module(
        "jobs.synthesize", ["--config", str(path)], work / f"{run.name}.log", root=root
    )
    write_whole(marker, json.dumps({"seconds": seconds}) + "\n")
    print(f"[{run.name}] {seconds:.0f} s", file=sys.stderr)
    return seconds


def summary(config: RunConfig, seconds: float) -> dict[str, Any]:
    folder = open_run(config)
    trees = folder.read("trees").drop_columns(["trace", "node_scores"]).to_pandas()
    return {
        "trees": len(trees),
        "answered": int(trees["n_answered"].sum()),
        "policy_output": int(trees["policy_output_tokens"].sum()),
        "reads": engine_reads(trees),
        "seconds": seconds,
    }


def _fraction(reads: EngineReads) -> float:
    return reads.computed / reads.sent if reads.sent else 0.0


def table(before: dict[str, Any], after: dict[str, Any], scorer: str) -> str:
    """Per engine: tokens sent and computed, before and after (computed over sent)."""
    lines = [
        "| engine | sent before | computed before | sent after | computed after |",
        "|---|---|---|---|---|",
    ]
    for engine, label in (("policy", "policy (llama.cpp)"), ("scorer", scorer)):
        b, a = before["reads"][engine], after["reads"][engine]
        lines.append(
            f"| {label} | {b.sent:,} | {b.computed:,} ({_fraction(b):.1%}) | {a.sent:,} | "
            f"{a.computed:,} ({_fraction(a):.1%}) |"
        )
    for name, run in (("before", before), ("after", after)):
        per = run["reads"]["scorer"].computed / max(run["policy_output"], 1)
        lines.append(
            f"\n{name}: {run['trees']} trees, {run['answered']} answered nodes, policy output "
            f"{run['policy_output']:,} tokens, scorer computed {per:.2f} per policy token, "
            f"job {run['seconds']:.0f} s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    work: Path = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    checkout(work, args.before)
    results: dict[str, dict[str, Any]] = {}
    for run in GENPRM_RUNS:
        config = run_config(run, work, args.quick, None)
        results[run.name] = summary(config, synthesize_once(run, config, work))
    checkpoint = work / "prm"
    if not (work / f"prm{MARKER}").is_file():
        trained_on = open_run(run_config(GENPRM_RUNS[1], work, args.quick, None))
        run_module(
            "jobs.train_prm",
            [str(trained_on.location), "--output", str(checkpoint), "--overwrite"],
            work / "prm.log",
        )
        write_whole(work / f"prm{MARKER}", "ok\n")
    for run in ONE_PASS_RUNS:
        config = run_config(run, work, args.quick, checkpoint)
        results[run.name] = summary(config, synthesize_once(run, config, work))
    print("GenPRM runs (configs/local.yaml):")
    print(table(results["before"], results["after"], "GenPRM (llama.cpp)"))
    print("\nOne-pass runs (configs/local-prm.yaml):")
    print(table(results["one_pass_before"], results["one_pass_after"], "one-pass PRM (torch)"))
    after, one_pass = results["after"], results["one_pass_after"]
    per_policy = one_pass["reads"]["scorer"].computed / max(one_pass["policy_output"], 1)
    print(f"policy_computed_fraction={_fraction(after['reads']['policy']):.4f}")
    print(f"genprm_computed_fraction={_fraction(after['reads']['scorer']):.4f}")
    print(f"one_pass_cpu_computed_per_policy_token={per_policy:.4f}")
    print(f"synth_job_seconds={after['seconds']:.1f}")
    print(f"synth_job_seconds_before={results['before']['seconds']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
