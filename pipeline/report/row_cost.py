"""What a kept training row cost: the run's tokens (and money) per row of each table.

Every training table of a run comes from the same searches, so a row's cost is the whole
run's spend divided by that table's rows, not a share of it: "the run spent 320 policy
output tokens per SFT row it kept, and 640 per DPO pair".  The costs of two tables do
not add up; each says what one table would have cost had it been the only one wanted.

Per table (`TRAINING_TYPES`), per row, in the names the `trees` columns and the engines'
table use (`pipeline.report.engine_reads`: sent, cached, computed = sent - cached):

* `policy_output_tokens`: what the policy generated;
* `policy_prompt_sent_tokens`, `policy_prompt_computed_tokens`: the prompt tokens the
  policy's engine was sent (every call's prompt), and of those the ones it did not read
  from its prefix cache;
* `prm_input_tokens`, `prm_prompt_computed_tokens`: the same for the scorer (every path
  it read; its sent tokens are the `prm_input_tokens` column);
* `prm_output_tokens`: what the scorer generated (0 for a one-pass PRM);
* `money`: with `prices` set, the run's money (as the report's Totals weigh it) per row.

A count the run cannot know is None ("unknown" in the report), never 0: the cache
columns of trees written before they were counted are null, and an engine that reports no
prompt tokens at all (an OpenAI-compatible server without `usage`) leaves the policy's
sent count at 0 while it generated.  A table without rows has no cost per row ("no rows").
The sums are the engines' table's (each tree's counts checked first, `engine_reads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.config import PricesConfig
from pipeline.records import TRAINING_TYPES
from pipeline.report.engine_reads import COLUMNS, engine_reads

COST_PER_ROW_KEY = "cost_per_row"  # in run.json's summary and in report.json

# the per-row token counts, in the order the report's table shows them
TOKEN_FIELDS = (
    "policy_output_tokens",
    "policy_prompt_sent_tokens",
    "policy_prompt_computed_tokens",
    "prm_input_tokens",
    "prm_prompt_computed_tokens",
    "prm_output_tokens",
)
# the trees columns they come from (and the charged prompt tokens the money weighs)
COLUMNS_READ = (
    "policy_output_tokens",
    "policy_input_tokens",
    "prm_input_tokens",
    "prm_output_tokens",
    *COLUMNS["policy"],
    COLUMNS["scorer"][1],
)
# the counts `PricesConfig.weigh` weighs (non-null in every run's trees)
_WEIGHED = ("policy_output_tokens", "policy_input_tokens", "prm_input_tokens", "prm_output_tokens")
UNKNOWN = "unknown"
NO_ROWS = "no rows"
_HEADER = [
    "table",
    "rows",
    "policy output tokens",
    "policy prompt tokens sent",
    "policy prompt tokens computed",
    "PRM input tokens sent",
    "PRM input tokens computed",
    "PRM output tokens",
]


def _known(frame: Any, column: str) -> bool:
    """Whether every tree has the column (absent or null in a run written before it)."""
    return column in frame.columns and not frame[column].isna().any()


def _total(frame: Any, column: str) -> int:
    return int(sum(int(v) for v in frame[column].tolist())) if len(frame) else 0


def run_tokens(trees: Any) -> dict[str, int | None]:
    """The run's totals of `TOKEN_FIELDS` (and `policy_input_tokens`, which money weighs)
    from a `trees` frame (pandas); None for a count the run cannot know."""
    totals: dict[str, int | None] = {
        c: _total(trees, c) if c in trees.columns else 0 for c in _WEIGHED
    }
    reads = engine_reads(trees)
    policy_sent, policy_cached = COLUMNS["policy"]
    # a prompt is never empty: none sent while the policy generated is an engine that
    # reports no prompt tokens, not a free prompt
    reported = reads["policy"].sent > 0 or not totals["policy_output_tokens"]
    sent_known = _known(trees, policy_sent) and reported
    computed_known = sent_known and _known(trees, policy_cached)
    totals["policy_prompt_sent_tokens"] = reads["policy"].sent if sent_known else None
    totals["policy_prompt_computed_tokens"] = reads["policy"].computed if computed_known else None
    scorer_known = _known(trees, COLUMNS["scorer"][1])
    totals["prm_input_tokens"] = reads["scorer"].sent
    totals["prm_prompt_computed_tokens"] = reads["scorer"].computed if scorer_known else None
    return totals


def _per(value: float | None, rows: int) -> float | None:
    return None if value is None or not rows else value / rows


def cost_per_row(
    trees: Any, rows: Mapping[str, int], prices: PricesConfig | None = None
) -> dict[str, Any]:
    """`cost_per_row` of run.json's summary and report.json: the run's totals, its money
    and, per training table, its rows and each count per row (None: unknown, or no rows).

    `trees`: the `trees` frame (pandas; only `COLUMNS_READ` are read), `rows`: the run's
    counted rows per record type (`RunFolder.counts`)."""
    totals = run_tokens(trees)
    money = None
    if prices is not None:
        # weighed as the report's Totals weigh them: the prompt charged once per request
        money = prices.weigh({k: float(totals[k] or 0) for k in _WEIGHED}) / 1e6
    tables = {}
    for name in TRAINING_TYPES:
        n = int(rows.get(name, 0))
        per = {k: _per(totals[k], n) for k in TOKEN_FIELDS}
        tables[name] = {"rows": n, **per, "money": _per(money, n)}
    return {
        "tokens": {k: totals[k] for k in TOKEN_FIELDS},
        "money": money,
        "currency": None if prices is None else prices.currency,
        "tables": tables,
    }


def tokens_text(value: float | None) -> str:
    """A count per row as the report shows it (one decimal)."""
    return UNKNOWN if value is None else f"{value:,.1f}"


def money_text(value: float | None) -> str:
    """Money per row as the report shows it (six decimals: a row costs fractions of a cent)."""
    return UNKNOWN if value is None else f"{value:,.6f}"


def cost_per_row_markdown(cost: Mapping[str, Any]) -> str:
    """The report's table of `cost_per_row`, and what an "unknown" means where one shows."""
    priced = cost.get("money") is not None
    header = _HEADER + ([f"money ({cost['currency']})"] if priced else [])
    lines = [header, [":--"] + ["--:"] * (len(header) - 1)]
    for name, table in cost["tables"].items():
        if not table["rows"]:
            lines.append([name, "0"] + [NO_ROWS] * (len(header) - 2))
            continue
        cells = [tokens_text(table[k]) for k in TOKEN_FIELDS]
        cells += [money_text(table["money"])] if priced else []
        lines.append([name, f"{table['rows']:,}", *cells])
    table_text = "\n".join("| " + " | ".join(line) + " |" for line in lines)
    notes = []
    tokens = cost["tokens"]
    if tokens["policy_prompt_sent_tokens"] is None:
        notes.append(
            "The policy's prompt tokens are unknown: its trees were written before the "
            "engines' cache reads were counted, or its engine reports no prompt tokens."
        )
    elif tokens["policy_prompt_computed_tokens"] is None:
        notes.append(
            "The policy's computed prompt tokens are unknown: its trees were written before "
            "the engines' cache reads were counted."
        )
    if tokens["prm_prompt_computed_tokens"] is None:
        notes.append(
            "The scorer's computed prompt tokens are unknown: its trees were written before "
            "the engines' cache reads were counted."
        )
    return "\n\n".join([table_text, *notes])


def rows_per_gpu_hour_markdown(block: Mapping[str, Any] | None) -> str | None:
    """The report's sentence and table of run.json's `gpu_hours` (measured at the end of
    the invocation that wrote run.json); None where the run has no GPU shape."""
    if not block:
        return None
    hours = block.get("gpu_hours")
    shape = block.get("shape", "")
    if hours is None:
        return f"Kept rows per GPU-hour: unknown ({block.get('unknown', shape)})."
    rows = block.get("rows") or {}
    lines = [["table", "rows written", "rows per GPU-hour"], [":--", "--:", "--:"]]
    for name, per_hour in (block.get("rows_per_gpu_hour") or {}).items():
        lines.append([name, f"{rows.get(name, 0):,}", tokens_text(per_hour)])
    table = "\n".join("| " + " | ".join(line) + " |" for line in lines)
    return (
        f"Measured over the invocation that wrote run.json: {block['wall_time_s']:,.0f} s "
        f"on {shape}, {hours:,.3f} GPU-hours (engine start-up included: a GPU is held "
        "from it); its rows written per GPU-hour:\n\n" + table
    )
