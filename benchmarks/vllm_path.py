"""The GPU path as one piece, on vLLM's CPU build: the embedded default on llama.cpp and on
vLLM inside Ray Serve, side by side, and the one-pass scorer on vLLM's pooling runner.

    python -m benchmarks.vllm_path [--work-dir DIR] [--quick] [--vllm-python PATH]

Run from the project's venv (`make .venv/.installed`): it runs the llama.cpp job and trains
the one-pass PRM there, and hands the vLLM jobs to `--vllm-python` (default
./.venv-vllm/bin/python, which `scripts/vllm-cpu-venv.sh` builds).  Stages, each a real
`python -m jobs...` child process with its log in the work dir, each skipped when its
marker says it finished (an interrupted benchmark goes on where it stopped):

1. `llamacpp`: configs/local.yaml (SmolLM2-135M on llama.cpp, GenPRM; 16 problems, B=300);
2. `vllm`: configs/local-vllm.yaml, the same problems, search and budget with the policy
   and GenPRM on vLLM in Serve replicas (SmolLM2's weights dequantized to float32);
3. `prm`: `bgmcts train-prm` on the llama.cpp run's prm rows (SmolLM2 + a token head);
4. `vllm_one_pass`: configs/local-vllm-prm.yaml with that checkpoint on `vllm_pooling`.

What differs between the two engines, besides the engine: llama.cpp runs the GGUF's 4-bit
(Q4_1) weights with 8-bit activations in its dot products, vLLM the same weights
dequantized to float32; each samples with its own random streams (same seeds, different
generators), so the trees differ from the first sampled token on and the table compares
distributions, not trees.  `--quick`: 4 problems at B=100 (a smoke test, not a measurement).

Then the cost at a GPU's shape, simulated (`benchmarks.scorer_value.gpu_hour`: the load
model's H100 curve, policy and PRM on one GPU, BG-MCTS at B=10,000): trees, hence training
rows, per GPU-hour with the one-pass PRM over GenPRM, once as vLLM serves it stock (the
prefix cache written for token classification, never read: every path computed whole) and
once reading it, as `vllm_pooling` now asks (each scorer at its best of the settings).

Last lines (on the vLLM runs; hit rate = cached / sent, over each engine's prompts):
`vllm_run_trees=`, `vllm_dirty_rows=`, `vllm_one_pass_dirty_rows=`,
`policy_prefix_hit_rate=`, `scorer_prefix_hit_rate=` (the one-pass run's scorer),
`one_pass_computed_per_policy_token=` (the one-pass scorer's computed prefill per policy
output token), `rows_per_gpu_hour_ratio_stock=`, `rows_per_gpu_hour_ratio_prefix_read=`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.scorer_value.gpu_hour import QUICK_SETTINGS, SETTINGS, run_gpu_hour
from benchmarks.support.commands import REPO, run_module
from benchmarks.support.synthesis import (
    base_config,
    edited,
    open_run,
    quick_or_scored_by,
    write_config,
)
from pipeline.config import RunConfig
from pipeline.report.engine_reads import EngineReads, engine_reads
from search.scorer_kinds import GENPRM, ONE_PASS, ScorerKindName

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


@dataclass(frozen=True)
class Stage:
    """One run of the comparison: its name, shipped config and the venv that runs it."""

    name: str
    config: str
    vllm: bool


STAGES = (
    Stage("llamacpp", "configs/local.yaml", vllm=False),
    Stage("vllm", "configs/local-vllm.yaml", vllm=True),
    Stage("vllm_one_pass", "configs/local-vllm-prm.yaml", vllm=True),
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_path", description=__doc__)
    parser.add_argument("--work-dir", type=Path, default=REPO / "out" / "bench-vllm-path")
    parser.add_argument("--quick", action="store_true", help="4 problems at B=100")
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    return parser.parse_args(argv)


def stage_config(stage: Stage, work: Path, quick: bool, checkpoint: Path | None) -> RunConfig:
    """The shipped config of `stage`, its output under `work`; smaller with `quick`."""
    config = edited(base_config(REPO / stage.config), run_id=stage.name, output_root=work)
    return quick_or_scored_by(config, quick, checkpoint)


def once(work: Path, name: str, run: Any) -> None:
    """`run()` unless ``work/<name>.done`` says it finished before."""
    marker = work / f"{name}.done"
    if marker.is_file():
        print(f"[{name}] done before, reused", file=sys.stderr)
        return
    seconds = run()
    marker.write_text(json.dumps({"seconds": seconds}) + "\n")
    print(f"[{name}] {seconds:.0f} s", file=sys.stderr)


def synthesize(config: RunConfig, work: Path, python: Path) -> float:
    path = write_config(config, work / f"{config.resolved_run_id}.yaml")
    log = work / f"{config.resolved_run_id}.log"
    return run_module("jobs.synthesize", ["--config", str(path)], log, python=python)


def dirty_rows(run_dir: Path, work: Path, name: str) -> int:
    """`bgmcts check`'s count for a run folder (its last line, `dirty_rows=<int>`)."""
    log = work / f"{name}-check.log"
    with contextlib.suppress(RuntimeError):  # exit 1: dirty rows, counted below
        run_module("jobs.check", [str(run_dir)], log)
    last = log.read_text().strip().splitlines()[-1]
    return int(last.split("=", 1)[1])


def summary_row(config: RunConfig, work: Path) -> dict[str, Any]:
    """What one run wrote and what its engines computed."""
    folder = open_run(config)
    trees = folder.read("trees").drop_columns(["trace", "node_scores"]).to_pandas()
    counts = folder.counts()
    reads = engine_reads(trees)
    manifest = folder.read_manifest().get("summary", {})
    return {
        "run": config.resolved_run_id,
        "trees": len(trees),
        "answered": int(trees["n_answered"].sum()),
        "correct": int(trees["n_correct"].sum()),
        "sft / dpo / prm rows": f"{counts.get('sft', 0)} / {counts.get('dpo', 0)} / "
        f"{counts.get('prm', 0)}",
        "policy output": int(trees["policy_output_tokens"].sum()),
        "reads": reads,
        "wall_s": float(manifest.get("wall_time_s", 0.0)),
        "dirty": dirty_rows(Path(folder.location), work, config.resolved_run_id),
    }


def _reads(r: EngineReads) -> str:
    rate = "–" if r.hit_rate is None else f"{r.hit_rate:.2f}"
    return f"{r.sent:,} / {r.computed:,} / {rate}"


def table(rows: list[dict[str, Any]]) -> str:
    header = [
        "run",
        "trees",
        "answered",
        "correct",
        "sft / dpo / prm rows",
        "policy output",
        "policy sent / computed / hit",
        "scorer sent / computed / hit",
        "wall s",
        "dirty rows",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [
            row["run"],
            str(row["trees"]),
            str(row["answered"]),
            str(row["correct"]),
            row["sft / dpo / prm rows"],
            f"{row['policy output']:,}",
            _reads(row["reads"]["policy"]),
            _reads(row["reads"]["scorer"]),
            f"{row['wall_s']:.0f}",
            str(row["dirty"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gpu_hour_ratios(quick: bool) -> tuple[float, float]:
    """One-pass over GenPRM trees per simulated GPU-hour, the cache not read and read
    (each variant at its best setting); prints the table of every setting."""
    best: dict[str, float] = {}
    print("| scorer | prefix cache | trees in flight x expansions | trees per GPU-hour | hit |")
    print("|---|---|---|---|---|")
    for setting in QUICK_SETTINGS if quick else SETTINGS:
        variants: tuple[tuple[str, ScorerKindName, bool], ...] = (
            ("genprm", GENPRM, True),
            ("one_pass stock", ONE_PASS, False),
            ("one_pass read", ONE_PASS, True),
        )
        for name, scorer, read in variants:
            result = run_gpu_hour(scorer, setting, read_prefix_cache=read)
            rate = float(result["trees_per_gpu_hour"])
            best[name] = max(best.get(name, 0.0), rate)
            cache = "read" if read else "written, not read"
            shape = f"{setting.trees} x {setting.inflight}"
            print(f"| {scorer} | {cache} | {shape} | {rate:,.0f} | {result['hit']:.2f} |")
    return best["one_pass stock"] / best["genprm"], best["one_pass read"] / best["genprm"]


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    work: Path = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    if not args.vllm_python.is_file():
        print(f"error: no vLLM venv at {args.vllm_python} (scripts/vllm-cpu-venv.sh)")
        return 2
    checkpoint = work / "prm"
    configs: dict[str, RunConfig] = {}
    for stage in STAGES:
        if stage.name == "vllm_one_pass":
            llama = configs["llamacpp"]
            runs = str(open_run(llama).location)
            once(
                work,
                "prm",
                lambda runs=runs: run_module(
                    "jobs.train_prm",
                    [runs, "--output", str(checkpoint), "--overwrite"],
                    work / "prm.log",
                ),
            )
        config = stage_config(
            stage, work, args.quick, checkpoint if stage.name == "vllm_one_pass" else None
        )
        configs[stage.name] = config
        python = args.vllm_python if stage.vllm else Path(sys.executable)
        once(work, stage.name, lambda c=config, p=python: synthesize(c, work, p))
    rows = [summary_row(configs[stage.name], work) for stage in STAGES]
    print(table(rows))
    by = {row["run"]: row for row in rows}
    vllm, one_pass = by["vllm"], by["vllm_one_pass"]
    scorer = one_pass["reads"]["scorer"]
    print(f"vllm_run_trees={vllm['trees']}")
    print(f"vllm_dirty_rows={vllm['dirty']}")
    print(f"vllm_one_pass_dirty_rows={one_pass['dirty']}")
    print(f"policy_prefix_hit_rate={vllm['reads']['policy'].hit_rate or 0.0:.4f}")
    print(f"scorer_prefix_hit_rate={scorer.hit_rate or 0.0:.4f}")
    computed = scorer.computed / one_pass["policy output"] if one_pass["policy output"] else 0.0
    stock, read = gpu_hour_ratios(args.quick)
    print(f"one_pass_computed_per_policy_token={computed:.4f}")
    print(f"rows_per_gpu_hour_ratio_stock={stock:.4f}")
    print(f"rows_per_gpu_hour_ratio_prefix_read={read:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
