"""The scorer kinds' names, and what each kind is before any engine or config gets involved.

A run scores its nodes with one of two kinds of process reward model (`scorer.kind`):

* ``genprm``: GenPRM, a generative PRM (the paper's, Sec. 4.1).  It writes an analysis
  and a judgement for every step, so it decodes output tokens, and it re-reads its own
  growing conversation at each deeper node.
* ``one_pass``: a discriminative PRM (Qwen2.5-Math-PRM; the checkpoints `bgmcts
  train-prm` writes).  It reads the prompt and the path in one forward pass and writes
  nothing.

The names are written here and nowhere else: configs, the simulated scorer, the replicas,
reports and benchmarks import them (and `actors.scorer_kinds` holds what each kind needs
from the services: how its scorer is built and checked, its token estimate, its label).
This module sits at the bottom of the layers (no Ray, no I/O), so every layer can.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# The values `scorer.kind` (and the simulated scorer's `prm_cost`) accepts.
ScorerKindName = Literal["genprm", "one_pass"]

GENPRM: Final = "genprm"
ONE_PASS: Final = "one_pass"

# Every kind, in the order configs and reports list them.
SCORER_KIND_NAMES: Final[tuple[ScorerKindName, ...]] = get_args(ScorerKindName)

# The kind a config that names none gets: the paper's protocol.
DEFAULT_SCORER_KIND: Final = GENPRM


def decodes(kind: ScorerKindName) -> bool:
    """Whether a scorer of `kind` generates text (GenPRM's analyses: output tokens, and an
    engine that generates) rather than reading the path in one forward pass (a one-pass
    PRM: no output tokens, an engine that scores steps)."""
    return kind != ONE_PASS


__all__ = [
    "DEFAULT_SCORER_KIND",
    "GENPRM",
    "ONE_PASS",
    "SCORER_KIND_NAMES",
    "ScorerKindName",
    "decodes",
]
