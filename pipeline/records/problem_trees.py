"""A problem searched by more than one tree: the later tree's training rows, given the earlier's.

The gates of `pipeline.records.paths` judge one tree: its duplicate gate cannot see a
trajectory that another tree of the same problem already gave, and its per-problem caps
(``gates.sft_top_k`` SFT rows, ``max_pairs_per_problem`` DPO and step-DPO pairs) would
hold per tree.  The night allocator (`pipeline.run.allocation`) searches a problem twice
(a probe, then a second tree), and the probe's rows are committed first, so:

* `forest` joins the problem's trees under one root (the problem), so the builders see
  every answered path of the problem at once: a right answer of one tree pairs with a
  wrong one of the other (a ``root`` pair, as two root children of one tree make), and
  the tree's own duplicate gate sees both trees;
* the forest's rows are built under `uncapped` (the caps lifted: every candidate in
  the builders' own order, best first);
* `further_rows` then drops a row that is a near duplicate of a committed row of the same
  table (every text of the row at least ``gates.near_duplicate`` similar to that earlier
  row's, the gate the trees apply inside themselves; exact copies only when
  ``records.dedupe`` is off and the similarity is 1), and keeps the first rows up to what
  the earlier tree left of each cap.

Within one tree, building uncapped and keeping the first k rows gives the capped rows:
the builders stop at the cap in the same order.  A problem's two trees together so
give at most the caps a single tree gives, and no trajectory twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from rapidfuzz.distance import Indel

from pipeline.records.config import RecordsConfig
from pipeline.records.schema import Row
from search.driver import SearchResult
from search.protocols import TokenCounts
from search.tree import Tree

# far above any per-problem pool of pairs (`PAIR_POOL` candidates a side)
_NO_CAP = 1_000_000


def uncapped(config: RecordsConfig) -> RecordsConfig:
    """`config` without its per-problem caps (for a later tree's rows, `further_rows`)."""
    gates = config.gates.model_copy(update={"sft_top_k": 0})
    return config.model_copy(update={"gates": gates, "max_pairs_per_problem": _NO_CAP})


def forest(first: SearchResult, *later: SearchResult) -> SearchResult:
    """One problem's trees as one: every later tree's nodes hang below the first's root
    (ids after the first's, in each tree's order), tokens and costs summed.  The chosen
    answer is the first tree's."""
    tree = Tree(first.tree.problem, first.tree.response_prefix)
    tokens = TokenCounts()
    for result in (first, *later):
        if result.problem != first.problem:
            raise ValueError("a forest joins trees of one problem")
        tokens.add(result.tokens)
        ids = {0: 0}
        for node in list(result.tree)[1:]:
            if node.parent_id is None or node.finish is None:  # only the root has neither
                raise ValueError(f"node {node.id} of a tree has no parent or no finish")
            ids[node.id] = tree.add_child(
                tree[ids[node.parent_id]],
                text=node.text,
                inserted_text=node.inserted_text,
                q=node.q,
                answered=node.answered,
                answer=node.answer,
                finish=node.finish,
                output_tokens=node.output_tokens,
                inserted_tokens=node.inserted_tokens,
                full_generation=node.full_generation,
                from_generative=node.from_generative,
                iteration=node.iteration,
                c_used=node.c_used,
                error=node.error,
            ).id
    return replace(
        first,
        budget=sum(r.budget for r in (first, *later)),
        c_used=sum(r.c_used for r in (first, *later)),
        tree=tree,
        tokens=tokens,
        trace=[],
        iterations=sum(r.iterations for r in (first, *later)),
        wall_time_s=sum(r.wall_time_s for r in (first, *later)),
    )


def _turns(messages: Sequence[Mapping[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def row_texts(table: str, row: Row) -> tuple[str, ...]:
    """The texts that make one row of `table` what it is (compared across trees)."""
    if table == "sft":
        return (_turns(row["completion"]),)
    if table == "kto":
        return (str(row["label"]), _turns(row["completion"]))
    if table == "dpo":
        return (_turns(row["chosen"]), _turns(row["rejected"]))
    if table == "step_dpo":
        return (row["full_chosen"], row["full_rejected"])
    if table == "prm":
        return ("\n".join(row["completions"]), str(row["labels"]))
    raise ValueError(f"no training table named {table!r}")


def _near(a: tuple[str, ...], b: tuple[str, ...], similarity: float) -> bool:
    if a == b:
        return True
    return similarity < 1 and all(
        Indel.normalized_similarity(x, y, score_cutoff=similarity)
        for x, y in zip(a, b, strict=True)
    )


def caps(config: RecordsConfig) -> dict[str, int | None]:
    """Each training table's per-problem cap (None: none)."""
    pairs = config.max_pairs_per_problem
    return {
        "sft": config.gates.sft_top_k or None,
        "dpo": pairs,
        "step_dpo": pairs,
        "prm": None,
        "kto": None,
    }


def further_rows(
    earlier: Mapping[str, Sequence[Row]], rows: Mapping[str, Sequence[Row]], config: RecordsConfig
) -> dict[str, list[Row]]:
    """Of a later tree's training rows (built under `uncapped`), the ones the problem keeps:
    no near duplicate of a row in `earlier` (the problem's committed rows, table by table),
    and no more than the per-problem caps leave."""
    similarity = config.gates.near_duplicate if config.dedupe else 1.0
    limits = caps(config)
    out: dict[str, list[Row]] = {}
    for table, limit in limits.items():
        seen = [row_texts(table, r) for r in earlier.get(table, ())]
        room = None if limit is None else max(0, limit - len(seen))
        kept: list[Row] = []
        for row in rows.get(table, ()):
            if room is not None and len(kept) >= room:
                break
            texts = row_texts(table, row)
            if not any(_near(texts, s, similarity) for s in seen):
                kept.append(row)
        out[table] = kept
    return out


__all__ = ["caps", "forest", "further_rows", "row_texts", "uncapped"]
