"""One round of the self-improvement loop, and whether the search's data beats sampling's.

    python -m benchmarks.self_improve [--quick] [--work-dir DIR]

See the package docstring for what each stage does; this module runs them in order,
each resumable (`benchmarks.support.synthesis.synthesize_once`,
`benchmarks.support.trl.run_job`), and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.engines.step_layout import TrainedLayout
from benchmarks.self_improve import report
from benchmarks.self_improve.plan import (
    MODES,
    Mode,
    Problem,
    Selections,
    choose_operations,
    hyper,
    selections,
)
from benchmarks.self_improve.runs import (
    RunData,
    read_run,
    round0_config,
    round1_config,
    rows_under,
    write_problems,
    write_sft,
)
from benchmarks.support.commands import run_module
from benchmarks.support.grading import grade_draws, grade_now
from benchmarks.support.stages import StageError, check_work_dir, prepare_work_dir, write_whole
from benchmarks.support.stats import pass_at
from benchmarks.support.synthesis import synthesize_once
from benchmarks.support.trl import DEFAULT_TRL_PYTHON, check_trl_python, run_job
from search.answers import AnswerExtraction

EXTRACTION = AnswerExtraction.LAST_NUMBER  # both configs' answer_extraction
# the stage outputs a rerun reuses (besides results and markers: `benchmarks.support.stages`)
PRM_CHECKPOINT = "prm-round0"
POLICY_GGUF = "round0-policy.gguf"
STOPS = ("Problem:",)
METHODS = ("bg_mcts", "repeated_sampling")


def log(message: str) -> None:
    print(f"[self_improve] {message}", file=sys.stderr, flush=True)


def graded(texts: Sequence[str], problems: Sequence[Problem]) -> list[bool]:
    references = [str(p["answer"]) for p in problems]
    return grade_now(texts, references, extraction=EXTRACTION, stops=STOPS)


def graded_samples(draws: Sequence[Sequence[str]], problems: Sequence[Problem]) -> list[list[bool]]:
    references = [str(p["answer"]) for p in problems]
    return grade_draws(draws, references, extraction=EXTRACTION, stops=STOPS)


# --------------------------------------------------------------------------- round 0
def round0(mode: Mode, sel: Selections, work: Path, trl: Path) -> dict[str, Any]:
    """Round 0's search, its SFT checkpoint, and both policies' pass@k on the probe."""
    config = round0_config(mode, work)
    synthesize_once(config, work)
    data = read_run(work, config.resolved_run_id)
    rows = write_sft(data, work / "round0.sft.jsonl")
    probe = [p for ops in sorted(sel.probe) for p in sel.probe[ops]]
    job = {
        "train": {"round0": {"rows": str(rows), "out_dir": str(work / "ckpt-round0")}},
        "models": {"base": None},
        "hyper": hyper(mode),
        "sample": {
            "prompts": [p["problem"] for p in probe],
            "models": ["base", "round0"],
            "samples": mode.probe_samples,
            "temperature": mode.probe_temperature,
            "seed": 0,
        },
    }
    result = run_job(trl, work, "round0", job, reuse=True)
    passes: dict[str, dict[int, tuple[float, float]]] = {}
    for model in ("base", "round0"):
        correct = graded_samples(result["samples"][model], probe)
        passes[model] = {}
        start = 0
        for ops in sorted(sel.probe):
            n = len(sel.probe[ops])
            passes[model][ops] = pass_at(correct[start : start + n])
            start += n
    return {"run": data, "passes": passes, "train": result["train"]["round0"]}


def train_prm(mode: Mode, work: Path, run_id: str) -> Path:
    out = work / PRM_CHECKPOINT
    if TrainedLayout.written(out):
        log(f"PRM in {out}: trained before, reused")
        return out
    run = str(work / "runs" / f"run={run_id}")
    args = [run, "--output", str(out), "--epochs", str(mode.prm_epochs), "--overwrite"]
    run_module("jobs.train_prm", args, work / "prm-round0.log")
    return out


def export_policy(work: Path) -> Path:
    """The round-0 checkpoint as a GGUF for the llama.cpp policy engine (the export
    writes it whole or not at all; `check_work_dir` refuses one that is not whole)."""
    out = work / POLICY_GGUF
    if out.is_file():
        return out
    args = [str(work / "ckpt-round0"), "--like", "embedded", "--output", str(out)]
    run_module("jobs.export_gguf", [*args, "--overwrite"], work / "export.log")
    return out


# --------------------------------------------------------------------------- round 1
def round1(
    mode: Mode, work: Path, problems: Path, policy: Path, prm: Path
) -> dict[str, dict[str, RunData]]:
    """Every round-1 run (method x seed) with its rows three ways: as written (both halves
    of the process gate: the counts), rebuilt with the false-equation half only (what the
    checkpoints train on: the PRM half at its threshold keeps almost nothing, see the
    docs), and, for BG-MCTS's first `mode.gate_seeds` seeds, rebuilt without any process
    gate (what the gate is worth)."""
    runs: dict[str, dict[str, RunData]] = {"written": {}, "gated": {}, "ungated": {}}
    for seed in range(mode.seeds):
        for method in METHODS:
            config = round1_config(
                method, seed, mode=mode, work=work, problems=problems, policy_gguf=policy, prm=prm
            )
            synthesize_once(config, work)
            name = f"{method}-s{seed}"
            runs["written"][name] = read_run(work, config.resolved_run_id)
            runs["gated"][name] = rows_under(work, config, {"min_step_value": None})
            if method == "bg_mcts" and seed < mode.gate_seeds:
                runs["ungated"][name] = rows_under(
                    work, config, {"min_step_value": None, "false_equation": False}
                )
    return runs


def train_round1(
    mode: Mode,
    work: Path,
    trl: Path,
    runs: dict[str, dict[str, RunData]],
    heldout: Sequence[Problem],
) -> dict[str, Any]:
    """Round-1 checkpoints (from round 0's) on each run's rows through the false-equation
    gate and on each ungated arm's rows; every checkpoint answers the held-out problems."""
    train: dict[str, dict[str, str]] = {}
    same: dict[str, str] = {}  # an ungated arm whose rows are its gated arm's
    for arm, label in (("gated", ""), ("ungated", "-ungated")):
        for name, data in runs[arm].items():
            key = f"{name}{label}"
            if not data.tables["sft"]:
                log(f"{key}: no sft rows, no checkpoint")
                continue
            rows = write_sft(data, work / f"r1-{key}.sft.jsonl")
            gated_rows = work / f"r1-{name}.sft.jsonl"
            if (
                arm == "ungated"
                and gated_rows.is_file()
                and rows.read_text() == gated_rows.read_text()
            ):
                # the same rows train the same checkpoint (one seed): no second training
                log(f"{key}: the same sft rows as with the gate, the same checkpoint")
                same[key] = name
                continue
            train[key] = {
                "rows": str(rows),
                "out_dir": str(work / f"ckpt-r1-{key}"),
                "init": str(work / "ckpt-round0"),
            }
    job = {
        "train": train,
        "models": {"base": None, "round0": str(work / "ckpt-round0")},
        "prompts": [p["problem"] for p in heldout],
        "hyper": hyper(mode),
    }
    result = run_job(trl, work, "round1", job, reuse=True)
    for key, name in same.items():
        if name in result["completions"]:
            result["completions"][key] = result["completions"][name]
    return result


# --------------------------------------------------------------------------- main
def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.self_improve", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="the quick mode (about 25 min)")
    parser.add_argument(
        "--mode", choices=sorted(MODES), help="full (default), quick, or tiny (the tests')"
    )
    parser.add_argument(
        "--round0-only",
        action="store_true",
        help="stop after one self-improvement step: round 0's search, its SFT checkpoint "
        "and the probe's pass@k (the landing gate's miniature of the loop)",
    )
    parser.add_argument("--trl-python", type=Path, default=DEFAULT_TRL_PYTHON)
    parser.add_argument(
        "--work-dir", type=Path, help="default: a new temporary folder; an old one resumes"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    check_trl_python(args.trl_python)
    name = args.mode or ("quick" if args.quick else "full")
    mode = MODES[name]
    try:
        work = prepare_work_dir(args.work_dir or Path(tempfile.mkdtemp(prefix="self-improve-")))
        # what an earlier run left is resumed from, so it must be whole: checked before
        # any stage runs, not met as a traceback an hour in
        check_work_dir(work, checkpoints=[work / PRM_CHECKPOINT], ggufs=[work / POLICY_GGUF])
        return _run(args, name, mode, work)
    except StageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, name: str, mode: Mode, work: Path) -> int:
    log(f"mode={name} {mode} work={work}")
    started = time.perf_counter()
    sel = selections(mode)
    write_whole(work / "heldout.jsonl", "".join(json.dumps(p) + "\n" for p in sel.heldout))
    first = round0(mode, sel, work, args.trl_python)
    if args.round0_only:
        for line in report.round0_lines(first["run"], first["train"], first["passes"]):
            print(line, flush=True)
        return 0
    at1 = {ops: first["passes"]["round0"][ops][0] for ops in sel.probe}
    operations = choose_operations(at1)
    log(f"round-0 policy pass@1 per operations {at1}: round 1 trains on {operations}")
    prm = train_prm(mode, work, first["run"].name)
    policy = export_policy(work)
    problems = write_problems(
        sel.round1(operations, mode.round1_problems), work / "round1-problems.jsonl"
    )
    runs = round1(mode, work, problems, policy, prm)
    result = train_round1(mode, work, args.trl_python, runs, sel.heldout)
    correct = {model: graded(texts, sel.heldout) for model, texts in result["completions"].items()}
    lines = report.lines(
        mode=mode,
        operations=operations,
        passes=first["passes"],
        runs=runs,
        correct=correct,
        heldout=sel.heldout,
        train=result["train"],
        seconds=time.perf_counter() - started,
    )
    for line in lines:
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
