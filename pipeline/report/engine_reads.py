"""What the engines read and what they computed: one definition for every report.

An engine is sent prompts; some of each prompt it reads from its prefix cache (the tree's
path, shared with the parent's request), the rest it computes.  Per engine:

* sent: every engine call's prompt tokens (the policy: one call per choice, so a request
  for n children counts its prompt n times; the scorer: every path it read);
* cached: of those, the tokens the engine said it served from its cache (vLLM's
  `num_cached_tokens`, llama.cpp's `cache_n`, an OpenAI-compatible server's
  `prompt_tokens_details.cached_tokens`, the load model's simulated cache);
* computed = sent - cached: what the engine paid for in prefill;
* hit rate = cached / sent.

The trees table carries the counts per tree (`policy_prompt_sent_tokens`,
`policy_prompt_cached_tokens`, `prm_input_tokens`, `prm_prompt_cached_tokens`); the run's
totals are their sums.  An engine that does not report its cache reads counts as computing
every token.

The engines' answers are checked as they enter (`actors.engines.read_counts`), but a
trees part may come from an older run, another tool or a damaged file, so each tree's
counts are checked again here: a negative count is read as 0 and a cached count above
the sent one as the sent one.  The trees clamped are counted per engine (`clamped`) and
the report says so; no hit rate outside [0, 1] is ever shown (`share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def share(part: float, whole: float) -> float | None:
    """`part / whole` as a rate in [0, 1]; None when there is no whole, or when the
    counts cannot be (a part below 0 or above the whole): never a rate that lies."""
    if not whole or whole < 0 or part < 0 or part > whole:
        return None
    return part / whole


# engine -> (the trees column of tokens sent, the column of those served from cache)
COLUMNS = {
    "policy": ("policy_prompt_sent_tokens", "policy_prompt_cached_tokens"),
    "scorer": ("prm_input_tokens", "prm_prompt_cached_tokens"),
}


@dataclass(frozen=True)
class EngineReads:
    sent: int
    cached: int
    clamped: int = 0  # trees whose counts could not be (negative, cached > sent), clamped

    @property
    def computed(self) -> int:
        return max(self.sent - self.cached, 0)

    @property
    def hit_rate(self) -> float | None:
        return share(self.cached, self.sent)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "cached": self.cached,
            "computed": self.computed,
            "hit_rate": self.hit_rate,
            "clamped_trees": self.clamped,
        }


def _counts(trees: Any, column: str) -> list[int]:
    """A trees column as Python ints, exact at any size (numpy's int64 sum would wrap
    round to a negative total); 0 where null or not a finite number, and for a column
    absent from an older run."""
    if column not in trees.columns:
        return [0] * len(trees)
    out = []
    for value in trees[column].tolist():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        out.append(int(value) if math.isfinite(number) else 0)
    return out


def engine_reads(trees: Any) -> dict[str, EngineReads]:
    """Per engine, the run's totals from a `trees` frame (pandas), each tree's counts
    checked first (module docstring); a run written before the cache reads were counted
    has no such columns: zeros."""
    reads = {}
    for name, (sent_column, cached_column) in COLUMNS.items():
        sent_total = cached_total = clamped = 0
        pairs = zip(_counts(trees, sent_column), _counts(trees, cached_column), strict=True)
        for sent, cached in pairs:
            clamped += sent < 0 or cached < 0 or cached > sent
            sent = max(sent, 0)
            sent_total += sent
            cached_total += min(max(cached, 0), sent)
        reads[name] = EngineReads(sent_total, cached_total, clamped)
    return reads


def engine_reads_rows(reads: dict[str, EngineReads]) -> list[list[str]]:
    """The report's table: engine, sent, served from cache, computed, hit rate."""
    return [
        [
            engine,
            f"{r.sent:,}",
            f"{r.cached:,}",
            f"{r.computed:,}",
            "–" if r.hit_rate is None else f"{r.hit_rate:.1%}",
        ]
        for engine, r in reads.items()
    ]


def clamped_note(reads: dict[str, EngineReads]) -> str | None:
    """The report's sentence on trees whose counts could not be; None when none."""
    named = [
        f"{engine} in {r.clamped} tree{'s' if r.clamped != 1 else ''}"
        for engine, r in reads.items()
        if r.clamped
    ]
    if not named:
        return None
    return (
        "Counts that cannot be were clamped before these sums (a negative count read as "
        "0, more tokens served from the cache than sent read as those sent): "
        + ", ".join(named)
        + ". The engine, or whatever wrote those trees, reported them."
    )


HEADER = ["engine", "prompt tokens sent", "served from its cache", "computed", "hit rate"]
