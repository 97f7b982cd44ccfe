"""The held-out split of a problem: one rule, hashed on the problem id.

Every record of a problem carries the same ``split`` ("train" or "test"), so a
model trained on the train rows never saw a test problem in any table, and the
split does not move when a run is resumed, re-run or merged with other runs:
it depends only on the problem id and ``records.test_fraction``.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Split = Literal["train", "test"]
SPLITS: tuple[Split, ...] = ("train", "test")


def split_of(problem_id: str, test_fraction: float) -> Split:
    """ "test" for about `test_fraction` of problem ids, the same answer every time."""
    if test_fraction <= 0:
        return "train"
    digest = hashlib.blake2b(problem_id.encode("utf-8"), digest_size=8).digest()
    position = int.from_bytes(digest, "big") / 2**64  # uniform in [0, 1)
    return "test" if position < test_fraction else "train"


__all__ = ["SPLITS", "Split", "split_of"]
