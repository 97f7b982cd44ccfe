"""Budget-guided tree search over LLM reasoning steps: pure Python and asyncio.

No Ray, no HTTP, no file I/O lives here, so every algorithm is testable in
milliseconds against the scripted policy and scorer.
"""

from search import protocols
from search.algorithms import Expansion, SearchAlgorithm, make_algorithm
from search.answers import extract_boxed, is_answered
from search.budget import Budget, BudgetViolation, TokenWeights
from search.config import ALGORITHMS, AnswerRule, NodeUnit, SearchConfig, parse_search_config
from search.driver import SearchResult, TracePoint, derive_seed, run_search, trace_rows
from search.protocols import *  # noqa: F403  (the engine contract: protocols.__all__)
from search.tree import Node, Tree

__all__ = [
    *protocols.__all__,
    "ALGORITHMS",
    "AnswerRule",
    "Budget",
    "BudgetViolation",
    "Expansion",
    "Node",
    "NodeUnit",
    "SearchAlgorithm",
    "SearchConfig",
    "SearchResult",
    "TokenWeights",
    "TracePoint",
    "Tree",
    "derive_seed",
    "extract_boxed",
    "is_answered",
    "make_algorithm",
    "parse_search_config",
    "run_search",
    "trace_rows",
]
