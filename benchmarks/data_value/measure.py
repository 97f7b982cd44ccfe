"""What the data is worth: synthesize, fine-tune on it, measure the held-out gain.

    python -m benchmarks.data_value [--quick] [--methods bg_mcts repeated_sampling beam]

On generated arithmetic problems (`pipeline.problems.arithmetic`) with the embedded
SmolLM2-135M-Instruct (configs/local.yaml: llama.cpp policy and GenPRM scorer):

1. a train selection (seed 0) and a disjoint held-out selection (seed 1, any problem
   whose text is also in the train selection dropped) of the same one-step problems;
2. each method synthesizes the train selection through the real pipeline - one
   ``python -m jobs.synthesize`` run per method with configs/local.yaml and only
   ``search`` changed, at the same per-problem budget B;
3. the TRL venv (``--trl-python``, default ``.venv-trl/bin/python``; ``make test-trl``
   creates it) fine-tunes SmolLM2-135M on each method's `sft` rows with TRL's
   SFTTrainer - full fine-tune, the same steps and hyper-parameters for every method -
   and answers every held-out problem with base and each checkpoint, greedy, the
   prompt being the training prompt (``records.prompt``: the bare problem, no few-shot
   scaffold) in SmolLM2's chat template (`benchmarks.data_value.train`, transformers'
   own generate: not one of the project's engines);
4. back here each completion is cut at the policy's stop strings, its answer read
   with the search's ``answer_extraction`` and graded with math-verify
   (`common.grading.compare_all`) against the reference; accuracy with a Wilson 95%
   interval.

It prints one table (method, train problems, SFT rows, DPO pairs, policy and PRM
tokens spent, held-out accuracy [95% CI], gain over base), paired comparisons on the same
held-out problems (exact McNemar) and, last, the lines
``heldout_base=``, ``heldout_gain_bg_mcts=``, ``heldout_gain_repeated_sampling=``.

Starts its own local Ray cluster (``RAY_ADDRESS=local``) unless RAY_ADDRESS is set.
Full mode: 48 train problems, 200 held-out, 40 steps (65 minutes on the shared 2-core
machine); ``--quick``: 16 train problems, 100 held-out, 20 steps (22 minutes there).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.support import synthesis
from benchmarks.support.grading import grade_now
from benchmarks.support.stats import discordant, mcnemar_p, wilson
from benchmarks.support.synthesis import LOCAL, base_config, open_run, run_variant
from benchmarks.support.trl import DEFAULT_TRL_PYTHON, check_trl_python, run_job
from pipeline.config import RunConfig
from pipeline.problems.arithmetic import generate, make_problem
from search.answers import AnswerExtraction

# what a method changes in configs/local.yaml's `search:` (the rest is the same for all)
SEARCHES: dict[str, dict[str, Any]] = {
    "bg_mcts": {"algorithm": "bg_mcts"},
    # whole solutions from the root; a one-step solution is ~30 tokens, so 96 caps one
    # runaway sample without cutting a real one
    "repeated_sampling": {"algorithm": "repeated_sampling", "full_max_tokens": 96},
    "beam": {"algorithm": "beam"},
}


@dataclass(frozen=True)
class Mode:
    train: int
    heldout: int
    steps: int
    budget: int = 300  # configs/local.yaml's B (output tokens per problem)
    batch_size: int = 8
    learning_rate: float = 5e-5
    max_new_tokens: int = 80


QUICK = Mode(train=16, heldout=100, steps=20)
FULL = Mode(train=48, heldout=200, steps=40)


@dataclass
class MethodData:
    """What one method's synthesis run produced and spent."""

    method: str
    train_problems: int
    sft_rows: int
    dpo_pairs: int
    policy_tokens: int
    prm_tokens: int
    problem_ids: set[str]


# --------------------------------------------------------------------------- problems
def selections(train: int, heldout: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train problems (seed 0) and held-out problems (seed 1) with no problem text in both."""
    train_set = generate(0, train, max_steps=1)
    seen = {p["problem"] for p in train_set}
    held: list[dict[str, Any]] = []
    index = 0
    while len(held) < heldout:
        candidate = make_problem(1, index, max_steps=1)
        index += 1
        if candidate["problem"] not in seen:
            held.append(candidate)
    return train_set, held


# --------------------------------------------------------------------------- statistics
def paired_lines(graded: dict[str, list[bool]]) -> list[str]:
    """Each trained model against base, and the first two trained models against each other,
    on the same held-out problems: who is right alone, and the exact McNemar p-value."""
    names = [n for n in graded if n != "base"]
    pairs = [(n, "base") for n in names] + ([(names[0], names[1])] if len(names) > 1 else [])
    lines = []
    for a, b in pairs:
        only_a, only_b = discordant(graded[a], graded[b])
        lines.append(
            f"paired {a} vs {b}: right only with {a} {only_a}, only with {b} {only_b}, "
            f"McNemar p={mcnemar_p(only_a, only_b):.3g}"
        )
    return lines


# --------------------------------------------------------------------------- table
def table_lines(rows: Sequence[dict[str, Any]], base_accuracy: float) -> list[str]:
    """The result table; each row: method, train_problems, sft_rows, dpo_pairs,
    policy_tokens, prm_tokens, correct, total (the base row has no data columns)."""
    header = (
        f"{'method':<18} {'train':>5} {'sft':>5} {'pairs':>5} {'policy tok':>10} "
        f"{'PRM tok':>10} {'held-out acc [95% CI]':>30} {'gain':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        acc = r["correct"] / r["total"]
        low, high = wilson(r["correct"], r["total"])
        data = r.get("sft_rows") is not None
        cells = [
            f"{r[key]:>{width},}" if data else f"{'-':>{width}}"
            for key, width in (
                ("train_problems", 5),
                ("sft_rows", 5),
                ("dpo_pairs", 5),
                ("policy_tokens", 10),
                ("prm_tokens", 10),
            )
        ]
        accuracy = f"{acc:.3f} [{low:.3f}, {high:.3f}] ({r['correct']}/{r['total']})"
        gain = f"{acc - base_accuracy:+.3f}" if data else "-"
        lines.append(f"{r['method']:<18} {' '.join(cells)} {accuracy:>30} {gain:>7}")
    return lines


def last_lines(base_accuracy: float, accuracies: dict[str, float]) -> list[str]:
    """``heldout_base=`` then ``heldout_gain_<method>=`` for bg_mcts and repeated_sampling
    (nan for a method that was not run or had no SFT rows to train on)."""
    lines = [f"heldout_base={base_accuracy:.4f}"]
    for method in ("bg_mcts", "repeated_sampling"):
        acc = accuracies.get(method)
        gain = math.nan if acc is None else acc - base_accuracy
        lines.append(f"heldout_gain_{method}={gain:.4f}")
    return lines


# --------------------------------------------------------------------------- synthesis
def run_config(method: str, train: int, budget: int, output_root: Path) -> RunConfig:
    """configs/local.yaml with the train selection, budget B and only `search` changed."""
    return run_variant(
        base_config(LOCAL),
        f"data-value-{method.replace('_', '-')}",
        output_root,
        source={"kind": "arithmetic", "count": train, "seed": 0, "max_steps": 1},
        count=train,
        budget=budget,
        search=SEARCHES[method],
    )


def synthesize(method: str, mode: Mode, work: Path) -> MethodData:
    """One `jobs.synthesize` run of `method` over the train selection; its rows and tokens."""
    config = run_config(method, mode.train, mode.budget, work / "runs")
    synthesis.synthesize(config, work, method)
    folder = open_run(config)
    trees = folder.read("trees").to_pylist()
    sft = folder.read("sft").to_pylist()
    rows_path = work / f"{method}.sft.jsonl"
    rows_path.write_text(
        "".join(
            json.dumps({"prompt": r["prompt"], "completion": r["completion"]}) + "\n" for r in sft
        )
    )
    return MethodData(
        method=method,
        train_problems=len(trees),
        sft_rows=len(sft),
        dpo_pairs=folder.count("dpo"),
        policy_tokens=sum(t["policy_output_tokens"] for t in trees),
        prm_tokens=sum(t["prm_input_tokens"] + t["prm_output_tokens"] for t in trees),
        problem_ids={str(t["problem_id"]) for t in trees},
    )


# --------------------------------------------------------------------------- training
def train_and_answer(
    trl_python: Path, work: Path, trained: Sequence[MethodData], prompts: Sequence[str], mode: Mode
) -> dict[str, Any]:
    """Run `benchmarks.data_value.train` in the TRL venv: train each set, answer `prompts`."""
    job = {
        "train": {
            d.method: {
                "rows": str(work / f"{d.method}.sft.jsonl"),
                "out_dir": str(work / f"ckpt-{d.method}"),
            }
            for d in trained
        },
        "prompts": list(prompts),
        "hyper": {
            "steps": mode.steps,
            "batch_size": mode.batch_size,
            "learning_rate": mode.learning_rate,
            "seed": 0,
            "max_length": 512,
            "eval_batch_size": 32,
            "max_new_tokens": mode.max_new_tokens,
        },
    }
    # every run trains again: the rows of this run's synthesis may differ from a last one's
    return run_job(trl_python, work, "train", job, reuse=False)


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.data_value", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="16 train / 100 held-out / 20 steps")
    parser.add_argument(
        "--methods", nargs="+", default=["bg_mcts", "repeated_sampling"], choices=sorted(SEARCHES)
    )
    parser.add_argument("--trl-python", type=Path, default=DEFAULT_TRL_PYTHON)
    parser.add_argument("--work-dir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    check_trl_python(args.trl_python)
    mode = QUICK if args.quick else FULL
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="data-value-"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"[data_value] mode={'quick' if args.quick else 'full'} {mode} work={work}", file=sys.stderr
    )
    started = time.perf_counter()
    train_set, held = selections(mode.train, mode.heldout)
    train_ids = {p["id"] for p in train_set}
    base = run_config(args.methods[0], mode.train, mode.budget, work)
    template = base.records.prompt.template
    extraction = base.search.answer_extraction
    stops = base.policy.prompts.policy_stop
    data = [synthesize(m, mode, work) for m in args.methods]
    for d in data:  # the runs searched exactly the train selection, nothing held out
        if d.problem_ids != train_ids:
            raise RuntimeError(f"{d.method} searched {sorted(d.problem_ids ^ train_ids)}")
    trained = [d for d in data if d.sft_rows > 0]
    prompts = [template.format(problem=p["problem"]) for p in held]
    result = train_and_answer(args.trl_python, work, trained, prompts, mode)
    for name, stats in result["train"].items():
        print(f"[train] {name}: {json.dumps(stats)}", file=sys.stderr)
    print(
        f"budget B={mode.budget} output tokens per train problem; {mode.steps} SFT steps x "
        f"batch {mode.batch_size}, lr {mode.learning_rate} (full fine-tune); held-out "
        f"{len(held)} problems, greedy, training prompt; "
        f"{time.perf_counter() - started:.0f} s"
    )
    for line in summarize(result, held, data, extraction=extraction, stops=stops):
        print(line)
    return 0


def summarize(
    result: dict[str, Any],
    held: Sequence[dict[str, Any]],
    data: Sequence[MethodData],
    *,
    extraction: AnswerExtraction,
    stops: Sequence[str],
) -> list[str]:
    """Grade the TRL half's completions (`result`) on `held`: the table, then the last lines."""
    references = [str(p["answer"]) for p in held]
    graded = {
        name: grade_now(texts, references, extraction=extraction, stops=stops)
        for name, texts in result["completions"].items()
    }
    total = len(held)
    base_acc = sum(graded["base"]) / total
    rows: list[dict[str, Any]] = [
        {"method": "base", "correct": sum(graded["base"]), "total": total}
    ]
    accuracies: dict[str, float] = {}
    for d in data:
        ok = graded.get(d.method)
        if ok is not None:
            accuracies[d.method] = sum(ok) / total
        rows.append(
            {
                "method": d.method if ok is not None else f"{d.method} (no rows)",
                "train_problems": d.train_problems,
                "sft_rows": d.sft_rows,
                "dpo_pairs": d.dpo_pairs,
                "policy_tokens": d.policy_tokens,
                "prm_tokens": d.prm_tokens,
                "correct": sum(ok) if ok is not None else 0,
                "total": total,
            }
        )
    return [
        *table_lines(rows, base_acc),
        *paired_lines(graded),
        *last_lines(base_acc, accuracies),
    ]


if __name__ == "__main__":
    sys.exit(main())
