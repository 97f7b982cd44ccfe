"""The token layout a one-pass PRM is trained and served on, in one place.

TRL's stepwise PRM trainer (``PRMTrainer``, removed from TRL 1.x; this project trains with
transformers' ``Trainer`` on the same layout, `pipeline.training.prm_training`) builds one
sequence per path:

    [bos] + tokens(prompt) + tokens(step 1) + [sep] + tokens(step 2) + [sep] + ...

each piece tokenized on its own without special tokens, and the label of step i sits on
the separator that closes it.  Serving must build the very same ids, or the values are
read at positions the model never learned: every engine (transformers on CPU, vLLM's
pooling runner, the ``/pooling`` endpoint) and the trainer call `layout` here.

Qwen2.5-Math-PRM-7B is the same shape: its prompt is the chat template's system and user
turns and the assistant header, its separator ``<extra_0>``, and its tokenizer has no BOS.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from actors.engines.base import StepValues
from actors.json_file import read_json_object

Tokenize = Callable[[str], list[int]]  # text -> ids, no special tokens added


class SeparatorError(ValueError):
    """The step separator is not exactly one token of the model's vocabulary."""


@dataclass(frozen=True, slots=True)
class StepLayout:
    """One path as token ids, and where each step's value is read."""

    input_ids: list[int]
    positions: list[int]  # index in `input_ids` of the separator closing each step


class CheckpointLayoutError(ValueError):
    """A checkpoint's layout file is there but cannot be read as one."""


@dataclass(frozen=True)
class TrainedLayout:
    """How a checkpoint that `bgmcts train-prm` wrote lays paths out: the contract between
    the trainer, which writes it beside the weights, and the scorer checks, which refuse
    to serve the model any other way (values read where it learned none).

    The file also holds what the model learned from (`extra`: runs, rows, loss, time);
    only the layout fields are checked.
    """

    FILE: ClassVar[str] = "bgmcts_prm.json"
    # the `scorer.one_pass` settings a server must match, in the order they are checked
    SERVED: ClassVar[tuple[str, ...]] = ("step_separator", "prompt_format", "steps")

    step_separator: str
    prompt_format: str
    steps: str
    bos_token_id: int | None = None
    max_length: int | None = None

    @classmethod
    def path(cls, checkpoint: str | Path) -> Path:
        return Path(checkpoint).expanduser() / cls.FILE

    @classmethod
    def written(cls, checkpoint: str | Path) -> bool:
        """Whether the trainer finished this checkpoint (it writes the file last)."""
        return cls.path(checkpoint).is_file()

    @classmethod
    def read(cls, checkpoint: str | Path) -> TrainedLayout | None:
        """The layout of `checkpoint`; None for a checkpoint the trainer did not write (it
        says nothing, and nothing is checked).  A file that is not a layout is refused."""
        path = cls.path(checkpoint)
        if not path.is_file():
            return None
        data = read_json_object(path, "a PRM layout", CheckpointLayoutError)
        served = [data.get(name) for name in cls.SERVED]
        for name, value in zip(cls.SERVED, served, strict=True):
            if not isinstance(value, str):
                raise CheckpointLayoutError(f"{path}: {name} is missing or not a string")
        numbers = [data.get("bos_token_id"), data.get("max_length")]
        if not all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in numbers):
            raise CheckpointLayoutError(f"{path}: bos_token_id and max_length are whole numbers")
        separator, prompt_format, steps = (str(value) for value in served)
        return cls(separator, prompt_format, steps, numbers[0], numbers[1])

    def write(self, checkpoint: str | Path, extra: dict[str, Any]) -> None:
        """The file beside the weights: this layout, then what the model learned from."""
        text = json.dumps({**asdict(self), **extra}, indent=2) + "\n"
        self.path(checkpoint).write_text(text, encoding="utf-8")

    def mismatch(self, served: Any) -> tuple[str, str, str] | None:
        """The first served setting (an object with the SERVED attributes) that differs
        from how the model was trained: (name, served, trained); None when all match."""
        for name in self.SERVED:
            if getattr(served, name) != getattr(self, name):
                return name, getattr(served, name), getattr(self, name)
        return None


def separator_id(tokenize: Tokenize, separator: str) -> int:
    """The one token id of `separator`; a separator of 0 or several tokens is refused
    (its value would be read at a token the separator shares with the text)."""
    ids = tokenize(separator)
    if len(ids) != 1:
        raise SeparatorError(
            f"the step separator {separator!r} is {len(ids)} tokens in this model's "
            f"vocabulary ({ids}); it must be exactly one"
        )
    return ids[0]


def layout(
    tokenize: Tokenize,
    prompt: str,
    steps: Sequence[str],
    separator: int,
    bos: int | None = None,
) -> StepLayout:
    """The ids of `prompt` and `steps` with `separator` after each step, `bos` first."""
    ids: list[int] = [] if bos is None else [bos]
    ids.extend(tokenize(prompt))
    positions: list[int] = []
    for step in steps:
        ids.extend(tokenize(step))
        ids.append(separator)
        positions.append(len(ids) - 1)
    return StepLayout(ids, positions)


def unscorable(path: StepLayout, context_length: int) -> StepValues | None:
    """What an engine answers, without its model, for a path it must not send: one longer
    than the context (an error naming both lengths), or one with no step (nothing to read).
    None: the path is to be scored."""
    tokens = len(path.input_ids)
    if tokens > context_length:
        return StepValues(
            (),
            tokens,
            error=f"context overflow: {tokens} tokens, the PRM's context_length is "
            f"{context_length}",
        )
    if not path.positions:
        return StepValues((), tokens)
    return None


__all__ = ["SeparatorError", "StepLayout", "Tokenize", "layout", "separator_id", "unscorable"]
