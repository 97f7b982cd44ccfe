"""The real half of the scorer benchmark: SmolLM2 runs through the pipeline, a one-pass PRM
trained on one set of problems, and every figure read on problems it never saw.

1. **Problems.** A train selection (generated arithmetic, seed 0) and a held-out selection
   (seed 1, any problem whose text is in the train selection dropped), the embedded
   default's one-step problems (configs/local.yaml).
2. **Round 0, train problems:** BG-MCTS with GenPRM (configs/local.yaml as it is) through
   ``python -m jobs.synthesize``; its `prm` rows (steps labelled from the answers below
   them) train the one-pass PRM (``bgmcts train-prm``), on a seeded share of the rows for
   each point of the learning curve.
3. **Held-out problems, same B:** BG-MCTS and repeated sampling, each once with GenPRM and
   once with the trained one-pass PRM (configs/local-prm.yaml's scorer) - four runs.
4. **Step quality:** the held-out GenPRM BG-MCTS run's `prm` rows: each step's label and
   GenPRM's Q of its node (`q_values`), and the one-pass PRM's value of the same step in the
   same layout it serves (`TransformersPRMEngine.score_steps`); AUC of each.
5. **Cost:** scorer tokens per policy output token of each held-out run (prefill plus
   decode; the one-pass engine on CPU has no prefix cache, so every prefill token is
   computed), and scorer CPU-seconds per node (the scorer replica's CPU time over the
   run's nodes, `benchmarks.support.cpu_by_process`).
6. **Yield:** correct trajectories per 1k total tokens (policy output + PRM input + PRM
   output) of BG-MCTS over repeated sampling's, with DPO and step pairs.

Runs live under ``<work>/runs`` with fixed run ids, so a rerun with the same work folder
resumes them (the pipeline skips finished problems) instead of searching again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.config import ScorerConfig
from actors.engines.step_layout import TrainedLayout

# the same train and held-out selections as the data-value benchmark (one-step problems)
from benchmarks.data_value.measure import SEARCHES, selections
from benchmarks.scorer_value.auc import CurvePoint, StepAUC, step_auc
from benchmarks.support.commands import REPO, child_env, log_tail, run_logged
from benchmarks.support.cpu_by_process import run_measured
from benchmarks.support.synthesis import (
    LOCAL,
    LOCAL_PRM,
    base_config,
    edited,
    run_variant,
    write_config,
)
from pipeline.config import RunConfig
from search.scorer_kinds import GENPRM, ONE_PASS, SCORER_KIND_NAMES

SCORERS = SCORER_KIND_NAMES
METHODS = ("bg_mcts", "repeated_sampling")


@dataclass(frozen=True)
class RealMode:
    train: int  # train problems searched with GenPRM (round 0)
    heldout: int  # held-out problems, searched four times
    curve: tuple[float, ...]  # shares of the training rows, one checkpoint each
    epochs: int = 2
    budget: int = 300  # configs/local.yaml's B


REAL_QUICK = RealMode(train=16, heldout=12, curve=(1.0,))
REAL_FULL = RealMode(train=64, heldout=32, curve=(0.25, 0.5, 1.0))


# --------------------------------------------------------------------------- problems
def train_source(count: int) -> dict[str, Any]:
    """The train selection as a source (configs/local.yaml's, with `count` problems)."""
    return {"kind": "arithmetic", "count": count, "seed": 0, "max_steps": 1}


def heldout_source(problems: Sequence[dict[str, Any]], path: Path) -> dict[str, Any]:
    """The held-out selection written to `path` as a JSON-lines source."""
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    columns = {"problem": "problem", "reference": "answer", "id": "id"}
    return {"kind": "jsonl", "path": str(path), "columns": columns}


# --------------------------------------------------------------------------- configs
def one_pass_scorer(checkpoint: Path) -> ScorerConfig:
    """configs/local-prm.yaml's scorer with `checkpoint` as its model."""
    scorer = base_config(LOCAL_PRM).scorer
    return edited(scorer, engine=edited(scorer.engine, model=str(checkpoint)))


def run_config(
    run_id: str,
    source: dict[str, Any],
    count: int,
    method: str,
    budget: int,
    output_root: Path,
    scorer: ScorerConfig | None = None,
) -> RunConfig:
    """configs/local.yaml with `source` (`count` problems), B, only `search` and (for
    one_pass) `scorer` changed."""
    config = run_variant(
        base_config(LOCAL),
        run_id,
        output_root,
        source=source,
        count=count,
        budget=budget,
        search=SEARCHES[method],
    )
    return config if scorer is None else edited(config, scorer=scorer)


# --------------------------------------------------------------------------- runs
@dataclass
class RunData:
    """What one run searched, spent and yielded."""

    name: str
    folder: Path  # <output_root>/run=<run_id>
    trees: list[dict[str, Any]] = field(default_factory=list)
    scorer_cpu_s: float | None = None
    wall_s: float | None = None

    def total(self, key: str) -> int:
        return sum(int(t[key] or 0) for t in self.trees)

    @property
    def nodes(self) -> int:
        return self.total("n_nodes")

    @property
    def policy_tokens(self) -> int:
        return self.total("policy_output_tokens")

    @property
    def prm_tokens(self) -> int:
        return self.total("prm_input_tokens") + self.total("prm_output_tokens")

    @property
    def total_tokens(self) -> int:
        return self.policy_tokens + self.prm_tokens

    def per_1k_total(self, key: str) -> float:
        return 1000.0 * self.total(key) / max(self.total_tokens, 1)


def synthesize(config: RunConfig, work: Path, count: int) -> RunData:
    """One `jobs.synthesize` run, or the finished one already in `work` (resumed when it is
    not finished); the scorer replica's CPU seconds of the last sitting are kept beside it."""
    from pipeline.store.run_folder import RunFolder

    run_id = config.resolved_run_id
    output_root = Path(config.output_root)
    cpu_path = work / f"{run_id}.cpu.json"
    data = RunData(run_id, output_root / f"run={run_id}")
    if _trees(output_root, run_id) < count or not cpu_path.exists():
        path = write_config(config, work / f"{run_id}.yaml")
        command = [sys.executable, "-m", "jobs.synthesize", "--config", str(path)]
        log = work / f"{run_id}.log"
        # the runner of `support.commands`, but polling the CPU time of the run's processes
        code, cpu, wall = run_measured(command, cwd=REPO, env=child_env(), log=log)
        if code != 0:
            raise RuntimeError(f"synthesis {run_id} failed (exit {code}):\n{log_tail(log)}")
        cpu_path.write_text(json.dumps({"cpu_s": cpu, "wall_s": wall}))
        print(f"[synth] {run_id}: {wall:.0f} s, CPU {cpu}", file=sys.stderr)
    measured = json.loads(cpu_path.read_text())
    data.scorer_cpu_s = float(measured["cpu_s"].get("scorer replica", 0))
    data.wall_s = float(measured["wall_s"])
    data.trees = RunFolder.open(output_root, run_id).read("trees").to_pylist()
    return data


def _trees(output_root: Path, run_id: str) -> int:
    from pipeline.store.run_folder import RunFolder

    if not (output_root / f"run={run_id}").exists():
        return 0
    try:
        return RunFolder.open(output_root, run_id).count("trees")
    except Exception:  # a run killed before its first tree: search it again
        return 0


def prm_rows(folder: Path) -> list[dict[str, Any]]:
    from pipeline.store.run_folder import RunFolder

    run_id = folder.name.removeprefix("run=")
    rows: list[dict[str, Any]] = RunFolder.open(folder.parent, run_id).read("prm").to_pylist()
    return rows


# --------------------------------------------------------------------------- training
def train_prm(
    runs: Sequence[Path],
    out: Path,
    *,
    exclude: Path,
    max_rows: int | None,
    epochs: int,
    log: Path,
) -> dict[str, Any]:
    """`bgmcts train-prm` on `runs` into `out` (reused when its metadata is there)."""
    meta_path = TrainedLayout.path(out)
    if not meta_path.exists():
        command = [
            sys.executable,
            "-m",
            "jobs.cli",
            "train-prm",
            *map(str, runs),
            "--out",
            str(out),
            "--exclude-problems",
            str(exclude),
            "--epochs",
            str(epochs),
            "--overwrite",
        ]
        if max_rows is not None:
            command += ["--max-rows", str(max_rows)]
        seconds = run_logged(command, log, what="train-prm")
        print(f"[train] {out.name}: {seconds:.0f} s", file=sys.stderr)
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    return meta


# --------------------------------------------------------------------------- step values
async def one_pass_values(checkpoint: Path, rows: Sequence[dict[str, Any]]) -> list[list[float]]:
    """The one-pass PRM's value of every step of `rows`, served as a run serves it."""
    import asyncio

    from actors.engines.transformers_prm import TransformersPRMConfig, TransformersPRMEngine

    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), threads=2), step_separator="\n"
    )
    try:
        results = await asyncio.gather(
            *(engine.score_steps(row["prompt"], list(row["completions"])) for row in rows)
        )
    finally:
        await engine.close()
    values: list[list[float]] = []
    for row, result in zip(rows, results, strict=True):
        if result.error is not None:
            raise RuntimeError(f"scoring {row['problem_id']} failed: {result.error}")
        values.append(list(result.values))
    return values


def step_labels_and_scores(
    rows: Sequence[dict[str, Any]], values: Sequence[Sequence[float]] | None = None
) -> tuple[list[bool], list[float]]:
    """Every step's label with GenPRM's Q of its node (`values` None) or the given values."""
    labels: list[bool] = []
    scores: list[float] = []
    for i, row in enumerate(rows):
        own = row["q_values"] if values is None else values[i]
        labels.extend(bool(x) for x in row["labels"])
        scores.extend(float(x) for x in own)
    return labels, scores


__all__ = [
    "METHODS",
    "REAL_FULL",
    "REAL_QUICK",
    "SCORERS",
    "RealMode",
    "RunData",
    "heldout_source",
    "one_pass_scorer",
    "one_pass_values",
    "prm_rows",
    "run_config",
    "selections",
    "step_labels_and_scores",
    "synthesize",
    "train_prm",
    "train_source",
]


# --------------------------------------------------------------------------- the whole half
@dataclass
class RealResult:
    """The real half's figures, and the runs and checkpoints they came from."""

    runs: dict[str, RunData]  # "train-bg_mcts-genprm", "heldout-<method>-<scorer kind>"
    curve: list[CurvePoint]  # one-pass step AUC on the held-out steps, by training rows
    auc: dict[str, StepAUC]  # scorer kind -> step AUC on the held-out GenPRM run's steps
    checkpoint: Path


def measure_real(mode: RealMode, work: Path) -> RealResult:
    """Every run, checkpoint and step value of the real half (resumed from `work`)."""
    import asyncio

    work.mkdir(parents=True, exist_ok=True)
    root = work / "runs"
    train_set, held = selections(mode.train, mode.heldout)
    exclude = work / "heldout-problem-ids.txt"
    exclude.write_text("".join(f"{p['id']}\n" for p in held))
    runs: dict[str, RunData] = {}
    train_id = "scorer-value-train-bg-mcts-genprm"
    train_config = run_config(
        train_id, train_source(mode.train), mode.train, "bg_mcts", mode.budget, root
    )
    runs["train-bg_mcts-genprm"] = synthesize(train_config, work, mode.train)
    searched = {str(t["problem_id"]) for t in runs["train-bg_mcts-genprm"].trees}
    if searched != {p["id"] for p in train_set}:  # the held-out guard rests on this
        raise RuntimeError(f"the train run searched {sorted(searched)[:5]}...")
    source = heldout_source(held, work / "heldout.jsonl")

    def heldout(method: str, kind: str, scorer: ScorerConfig | None) -> None:
        run_id = f"scorer-value-heldout-{method}-{kind}".replace("_", "-")
        config = run_config(run_id, source, mode.heldout, method, mode.budget, root, scorer)
        runs[f"heldout-{method}-{kind}"] = synthesize(config, work, mode.heldout)

    for method in METHODS:
        heldout(method, GENPRM, None)
    train_rows = len(prm_rows(runs["train-bg_mcts-genprm"].folder))
    rows = prm_rows(runs["heldout-bg_mcts-genprm"].folder)
    labels, genprm_scores = step_labels_and_scores(rows)
    curve: list[CurvePoint] = []
    checkpoint = work / "checkpoints" / "prm-all"
    for share in mode.curve:
        limit = None if share >= 1.0 else max(1, round(share * train_rows))
        out = checkpoint if limit is None else work / "checkpoints" / f"prm-{limit}"
        meta = train_prm(
            [runs["train-bg_mcts-genprm"].folder],
            out,
            exclude=exclude,
            max_rows=limit,
            epochs=mode.epochs,
            log=work / f"train-{out.name}.log",
        )
        values = asyncio.run(one_pass_values(out, rows))
        _, one_pass_scores = step_labels_and_scores(rows, values)
        used = int(meta.get("rows", {}).get("used", limit or train_rows))
        curve.append(CurvePoint(used, step_auc(one_pass_scores, labels)))
    scorer = one_pass_scorer(checkpoint)
    for method in METHODS:
        heldout(method, ONE_PASS, scorer)
    return RealResult(
        runs=runs,
        curve=curve,
        auc={GENPRM: step_auc(genprm_scores, labels), ONE_PASS: curve[-1].auc},
        checkpoint=checkpoint,
    )
