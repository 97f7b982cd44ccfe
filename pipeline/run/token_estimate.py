"""How many tokens a run may use, for `--dry-run`: the policy's, bounded by B, and the scorer's.

B caps cost units, by default the policy's output tokens only, and a search may stop
before B (no expansion fits in what is left, the algorithm is done, or early stop), so
problems x B is an upper bound on policy output.  The scorer reads the solution so far
(GenPRM also writes a verification for every step), all outside B unless `search.cost`
charges PRM tokens: with GenPRM it is about 20 times the policy's output, so a night sized
on problems x B alone is off by an order of magnitude; a one-pass PRM reads each node's
path once and writes nothing.  The scorer's share is estimated from this run's committed
trees when a resumed run has some, else from a ratio per scorer kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config import RunConfig
from pipeline.store.run_folder import RunFolder

# Scorer tokens (PRM prompt + generated) per policy output token, by `scorer.kind`, with
# where it was measured.  GenPRM: BG-MCTS on the embedded default (SmolLM2-135M as policy
# and as GenPRM scorer on llama.cpp, 48 arithmetic problems, B = 300) used 231,056 scorer
# tokens for 11,493 policy output tokens (docs/benchmarks.md, "Data value: held-out gain",
# 2026-11-26).  A larger GenPRM on longer solutions may differ: a resumed run measures its own.
SCORER_TOKENS_PER_POLICY_TOKEN: dict[str, tuple[float, str]] = {
    "genprm": (
        231_056 / 11_493,
        "measured with BG-MCTS on the embedded default, docs/benchmarks.md "
        "'Data value: held-out gain'",
    ),
    # A one-pass PRM reads the prompt and the node's whole path once per scored node and
    # decodes nothing.  BG-MCTS on the embedded default with the one-pass PRM trained from
    # the pipeline's own trees (32 held-out arithmetic problems, B = 300, the CPU engine
    # with no prefix cache): 27,625 scorer tokens for 7,689 policy output tokens
    # (docs/benchmarks.md, "Scorer value", 2026-11-27).  Deeper trees (larger B) read more.
    "one_pass": (
        27_625 / 7_689,
        "measured with BG-MCTS on the embedded default, docs/benchmarks.md 'Scorer value'",
    ),
}


# The trees columns the estimate reads (not the trees themselves).
TOKEN_COLUMNS = ("policy_input_tokens", "prm_input_tokens", "prm_output_tokens")


@dataclass(frozen=True)
class TokenEstimate:
    """What `--dry-run` prints about tokens; every number is for the problems left to do."""

    policy_output_max: int | None  # problems x B / cost weight; None: B does not cap it
    scorer: int | None  # PRM prompt + generated tokens, estimated; None: nothing to go on
    scorer_in_budget: bool  # search.cost charges PRM tokens, so B caps them too
    rests_on: str  # what the scorer estimate comes from, in words
    policy_input: int | None = None  # policy prompt tokens, only from this run's own trees


@dataclass(frozen=True)
class Committed:
    """The token totals of a run's committed trees (none for a new run)."""

    trees: int = 0
    totals: dict[str, int] = field(default_factory=dict)  # column -> sum over the trees

    @classmethod
    def read(cls, folder: RunFolder) -> Committed:
        """Sums of the token columns only (read-only: safe beside a running job)."""
        trees, totals = 0, dict.fromkeys(TOKEN_COLUMNS, 0)
        for table in folder.tables("trees", columns=list(TOKEN_COLUMNS)):
            trees += table.num_rows
            for column in TOKEN_COLUMNS:
                totals[column] += sum(v or 0 for v in table.column(column).to_pylist())
        return cls(trees, totals)


def estimate_tokens(config: RunConfig, todo: int, committed: Committed) -> TokenEstimate:
    """Estimate the tokens of `todo` problems, from this run's committed trees if any."""
    cost = config.search.cost
    policy_max = None
    if cost.policy_output > 0:
        policy_max = int(todo * config.budget / cost.policy_output)
    in_budget = cost.prm_input > 0 or cost.prm_output > 0
    if n := committed.trees:
        # This run's own trees: tokens per problem, as the same models and settings spent them.
        total = committed.totals
        scorer = total["prm_input_tokens"] + total["prm_output_tokens"]
        return TokenEstimate(
            policy_output_max=policy_max,
            scorer=round(todo * scorer / n),
            scorer_in_budget=in_budget,
            rests_on=f"from this run's {n:,} committed trees: {scorer / n:,.0f} per problem",
            policy_input=round(todo * total["policy_input_tokens"] / n),
        )
    ratio = SCORER_TOKENS_PER_POLICY_TOKEN.get(config.scorer.kind)
    if ratio is None or policy_max is None:
        return TokenEstimate(policy_max, None, in_budget, "no measured ratio for this scorer")
    per_token, where = ratio
    return TokenEstimate(
        policy_output_max=policy_max,
        scorer=round(policy_max * per_token),
        scorer_in_budget=in_budget,
        rests_on=f"if every search spends B; {config.scorer.kind}: ~{per_token:.1f} per "
        f"policy output token, {where}",
    )


def token_rows(estimate: TokenEstimate, todo: int, budget: int) -> list[tuple[str, str]]:
    """The dry run's rows about tokens: (what, value)."""
    rows = []
    if estimate.policy_output_max is None:
        rows.append(("policy output tokens", "not capped by B (search.cost.policy_output is 0)"))
    else:
        rows.append(
            (
                "policy output tokens",
                f"<= {estimate.policy_output_max:,} ({todo} problems x B={budget:,}; "
                "B caps these, and a search may stop before B)",
            )
        )
    where = "inside B (search.cost charges them)" if estimate.scorer_in_budget else "outside B"
    scorer = "unknown" if estimate.scorer is None else f"~ {estimate.scorer:,}"
    rows.append(("scorer tokens (PRM in + out)", f"{scorer}, {where} ({estimate.rests_on})"))
    if estimate.policy_input is not None:
        rows.append(("policy prompt tokens", f"~ {estimate.policy_input:,} (same trees)"))
    return rows
