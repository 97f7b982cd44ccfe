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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# engine -> (the trees column of tokens sent, the column of those served from cache)
COLUMNS = {
    "policy": ("policy_prompt_sent_tokens", "policy_prompt_cached_tokens"),
    "scorer": ("prm_input_tokens", "prm_prompt_cached_tokens"),
}


@dataclass(frozen=True)
class EngineReads:
    sent: int
    cached: int

    @property
    def computed(self) -> int:
        return self.sent - self.cached

    @property
    def hit_rate(self) -> float | None:
        return self.cached / self.sent if self.sent else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "cached": self.cached,
            "computed": self.computed,
            "hit_rate": self.hit_rate,
        }


def engine_reads(trees: Any) -> dict[str, EngineReads]:
    """Per engine, the run's totals from a `trees` frame (pandas); a run written before
    the cache reads were counted has no such columns: zeros."""

    def total(column: str) -> int:
        return int(trees[column].fillna(0).sum()) if column in trees.columns else 0

    return {
        name: EngineReads(total(sent), total(cached)) for name, (sent, cached) in COLUMNS.items()
    }


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


HEADER = ["engine", "prompt tokens sent", "served from its cache", "computed", "hit rate"]
