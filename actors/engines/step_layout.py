"""The token layout a one-pass PRM is trained and served on, in one place.

TRL's stepwise PRM trainer (``PRMTrainer``, removed from TRL 1.x; this project trains with
transformers' ``Trainer`` on the same layout, `jobs.train_prm`) builds one sequence per path:

    [bos] + tokens(prompt) + tokens(step 1) + [sep] + tokens(step 2) + [sep] + ...

each piece tokenized on its own without special tokens, and the label of step i sits on
the separator that closes it.  Serving must build the very same ids, or the values are
read at positions the model never learned: every engine (transformers on CPU, vLLM's
pooling runner, the ``/pooling`` endpoint) and the trainer call `layout` here.

Qwen2.5-Math-PRM-7B is the same shape: its prompt is the chat template's system and user
turns and the assistant header, its separator ``<extra_0>``, and its tokenizer has no BOS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actors.engines.base import StepValues

Tokenize = Callable[[str], list[int]]  # text -> ids, no special tokens added


class SeparatorError(ValueError):
    """The step separator is not exactly one token of the model's vocabulary."""


@dataclass(frozen=True, slots=True)
class StepLayout:
    """One path as token ids, and where each step's value is read."""

    input_ids: list[int]
    positions: list[int]  # index in `input_ids` of the separator closing each step


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
