"""How many tokens a run may use, for `--dry-run`: the policy's, bounded by B, and the scorer's.

B caps cost units, by default the policy's output tokens only, and a search may stop
before B (no expansion fits in what is left, the algorithm is done, or early stop), so
problems x B is an upper bound on policy output.  The scorer reads the solution so far
(GenPRM also writes a verification for every step), all outside B unless `search.cost`
charges PRM tokens: with GenPRM it is about 20 times the policy's output, so a night sized
on problems x B alone is off by an order of magnitude; a one-pass PRM reads each node's
path once and writes nothing.  The scorer's share is estimated from this run's committed
trees when a resumed run has some; else, for the PUCT searches (BG-MCTS, MCTS), from the
model of path depth in `pipeline.run.scorer_model`, which follows B, the step length and
the search's width (the scorer re-reads each node's whole path, and paths get deeper as B
grows); else from the ratio measured for its scorer kind (`actors.scorer_kinds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.scorer_kinds import scorer_kind
from pipeline.config import RunConfig
from pipeline.records import SCHEMAS
from pipeline.run.scorer_model import model_estimate
from pipeline.store.run_folder import RunFolder

# A problem's length when the dry run is not given its problems: about a MATH500 problem
# (its 500 problems average 195 characters).
DEFAULT_PROBLEM_CHARS = 200.0

# The trees columns the estimate reads (not the trees themselves); the cache columns are
# null in runs written before they were counted (read as 0).
TOKEN_COLUMNS = (
    "policy_input_tokens",
    "prm_input_tokens",
    "prm_output_tokens",
    "prm_prompt_cached_tokens",
)


@dataclass(frozen=True)
class TokenEstimate:
    """What `--dry-run` prints about tokens; every number is for the problems left to do."""

    policy_output_max: int | None  # problems x B / cost weight; None: B does not cap it
    scorer: int | None  # PRM prompt + generated tokens, estimated; None: nothing to go on
    scorer_in_budget: bool  # search.cost charges PRM tokens, so B caps them too
    rests_on: str  # what the scorer estimate comes from, in words
    policy_input: int | None = None  # policy prompt tokens, only from this run's own trees
    # of `scorer`, what the scorer's engine computes: its prompt tokens not read from its
    # prefix cache, and what it generates (pipeline/report/engine_reads.py); from this
    # run's own trees only, since the engine's cache decides it
    scorer_computed: int | None = None


@dataclass(frozen=True)
class Committed:
    """The token totals of a run's committed trees (none for a new run)."""

    trees: int = 0
    totals: dict[str, int] = field(default_factory=dict)  # column -> sum over the trees

    @classmethod
    def read(cls, folder: RunFolder) -> Committed:
        """Sums of the token columns only (read-only: safe beside a running job)."""
        trees, totals = 0, dict.fromkeys(TOKEN_COLUMNS, 0)
        schema = SCHEMAS["trees"]  # a column an older part lacks is read as nulls
        for table in folder.tables("trees", columns=list(TOKEN_COLUMNS), schema=schema):
            trees += table.num_rows
            for column in TOKEN_COLUMNS:
                totals[column] += sum(v or 0 for v in table.column(column).to_pylist())
        return cls(trees, totals)


def estimate_tokens(
    config: RunConfig,
    todo: int,
    committed: Committed,
    problem_chars: float | None = None,
) -> TokenEstimate:
    """Estimate the tokens of `todo` problems, from this run's committed trees if any.

    `problem_chars`: the mean length of the problems to do, in characters (the scorer's
    prompt holds the problem); None: `DEFAULT_PROBLEM_CHARS`.
    """
    cost = config.search.cost
    policy_max = None
    if cost.policy_output > 0:
        policy_max = int(todo * config.budget / cost.policy_output)
    in_budget = cost.prm_input > 0 or cost.prm_output > 0
    if n := committed.trees:
        # This run's own trees: tokens per problem, as the same models and settings spent them.
        total = committed.totals
        scorer = total["prm_input_tokens"] + total["prm_output_tokens"]
        computed = scorer - total.get("prm_prompt_cached_tokens", 0)
        return TokenEstimate(
            policy_output_max=policy_max,
            scorer=round(todo * scorer / n),
            scorer_in_budget=in_budget,
            rests_on=f"from this run's {n:,} committed trees: {scorer / n:,.0f} per problem",
            policy_input=round(todo * total["policy_input_tokens"] / n),
            scorer_computed=round(todo * computed / n),
        )
    if policy_max is None:
        # a ratio per policy output token needs a bound on policy output to scale
        return TokenEstimate(policy_max, None, in_budget, "policy output is not capped by B")
    chars = DEFAULT_PROBLEM_CHARS if problem_chars is None else problem_chars
    model = model_estimate(config, chars)
    if model is not None:
        # the model of path depth: the scorer reads every node's path, deeper as B grows
        return TokenEstimate(
            policy_output_max=policy_max,
            scorer=round(policy_max * model.tokens.per_budget_token),
            scorer_in_budget=in_budget,
            rests_on=f"if every search spends B; {config.scorer.kind}: "
            f"~{model.tokens.per_policy_token:.1f} per policy output token, {model.rests_on}",
        )
    # another search: the ratio measured for this kind of scorer (`actors.scorer_kinds`)
    kind = scorer_kind(config.scorer)
    per_token = kind.tokens_per_policy_token
    return TokenEstimate(
        policy_output_max=policy_max,
        scorer=round(policy_max * per_token),
        scorer_in_budget=in_budget,
        rests_on=f"if every search spends B; {kind.name}: ~{per_token:.1f} per "
        f"policy output token, {kind.measured}",
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
    if estimate.scorer_computed is not None:
        rows.append(
            (
                "of those, computed by its engine",
                f"~ {estimate.scorer_computed:,} (the rest read from its prefix cache; same trees)",
            )
        )
    if estimate.policy_input is not None:
        rows.append(("policy prompt tokens", f"~ {estimate.policy_input:,} (same trees)"))
    return rows
