"""Replay a tree's paid requests: policy and scorer clients that answer from a request log.

A killed tree (its search actor's node lost, the job killed) is searched again from its
root on the next attempt.  The search is deterministic given its seed and the answers it
gets, so if every request it makes again is answered with what the engines answered the
first time, it rebuilds the same tree node for node without paying for those requests.
`ReplayPolicy` / `ReplayScorer` wrap the Serve clients on the actor side (search/ stays
free of I/O): each request is looked up in the current tree's `Journal` (a context
variable, as the tree's affinity is) by its key, a hash of everything that decides its
answer (problem, prompt, sampling and the request's seed; for a score, the path and the
parent's context); a hit is returned without calling the engine, a miss goes to the
engine and its answer is recorded.  Failed answers are never recorded (a rerun retries
them).  The same key asked twice (two identical children) is answered in order.  A
recorded answer that its request could not have got (not decodable, the wrong number of
choices, more tokens than `max_tokens`, a score outside [0, 1]) is ignored with a
warning and the engine asked: the log is a saving, never a reason for a search to fail.

The journal's storage (the run folder, local disk or object storage) lives in
`pipeline.store.request_log`; here only the protocol and the encoding.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from actors.progress import Counters
from actors.scorer_kinds import SCORER_KINDS
from actors.wrappers import PolicyWrapper, ScorerWrapper
from search.protocols import (
    FinishReason,
    Generation,
    GenerationRequest,
    Policy,
    Score,
    Scorer,
    ScoreRequest,
)

log = logging.getLogger(__name__)


class Journal(Protocol):
    """One tree's request log: answers recorded earlier, and a place to record new ones."""

    def take(self, key: str) -> Any | None:
        """The next recorded answer for `key` (None: not recorded, call the engine)."""
        ...

    async def record(self, key: str, value: Any) -> None: ...


_journal: ContextVar[Journal | None] = ContextVar("request_journal", default=None)


@contextmanager
def tree_journal(journal: Journal | None) -> Iterator[None]:
    """Every request made inside (the tree's search) is replayed from / recorded in `journal`."""
    token = _journal.set(journal)
    try:
        yield
    finally:
        _journal.reset(token)


def _canonical(value: Any) -> Any:
    """A request field in a form whose JSON does not depend on tuple vs list."""
    if isinstance(value, tuple | list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    return value


def service_salt(service: Any) -> str:
    """What else decides a service's answers: its engine (model, settings), prompts and
    scoring settings, as the config's JSON (a pydantic model).

    A scorer's settings count only for its own kind: a GenPRM run's salt leaves the
    one-pass settings out (so it is what it was before there were any), and a one-pass
    run's leaves GenPRM's out (they change nothing it scores)."""
    fields = set(ANSWER_FIELDS)
    kind = getattr(service, "kind", None)
    fields -= {other.settings_field for other in SCORER_KINDS.values() if other.name != kind}
    return _key("service", (service.model_dump(mode="json", include=fields),))


# the service config fields that change answers (not replicas, timeouts, routing): the
# engine, the prompts, and a scorer's kind and the settings of each kind
ANSWER_FIELDS = {"engine", "prompts", "kind", *(k.settings_field for k in SCORER_KINDS.values())}


def _key(kind: str, fields: Sequence[Any]) -> str:
    text = json.dumps([kind, *(_canonical(f) for f in fields)], ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def generation_key(request: GenerationRequest, salt: str = "") -> str:
    """Problem, prompt (assistant prefix), sampling and the request's seed (and `salt`:
    the service's model and prompts, so a rerun with another model replays nothing)."""
    return _key(
        "g",
        (
            salt,
            request.problem,
            request.assistant_prefix,
            request.n,
            request.max_tokens,
            request.stop,
            request.temperature,
            request.seed,
        ),
    )


def score_key(request: ScoreRequest, salt: str = "") -> str:
    """Problem, path, the parent's context (GenPRM's conversation so far) and the limits.

    `answer_end` (where a one-pass PRM cuts an answered node's text) joins the key only
    when set, so the key of a request without it is what it was before the field."""
    fields = [
        salt,
        request.problem,
        request.path,
        request.parent_context,
        request.answered,
        request.answer,
        request.full_generation,
        request.max_cost,
        request.parent_answered,
    ]
    if request.answer_end is not None:
        fields.append(request.answer_end)
    return _key("s", fields)


def encode_generations(generations: Sequence[Generation]) -> list[list[Any]]:
    return [
        [g.text, g.output_tokens, g.finish.value, g.input_tokens, g.cached_input_tokens]
        for g in generations
    ]


def decode_generations(value: list[list[Any]]) -> list[Generation]:
    """A logged request's choices; one logged before the cache count was kept has 4 fields."""
    return [
        Generation(t, int(o), FinishReason(f), int(i), cached_input_tokens=int(c[0] if c else 0))
        for t, o, f, i, *c in value
    ]


def encode_score(score: Score, parent_context: Any) -> list[Any]:
    """A score; its context (GenPRM: the parent's conversation plus this step's turn) as
    the part after the parent's, so a deep node's log line does not repeat its ancestors'."""
    context = score.context
    shape: Any = None
    if isinstance(context, tuple | list) and isinstance(parent_context, tuple | list):
        head = len(parent_context)
        if len(context) >= head and _canonical(context[:head]) == _canonical(parent_context):
            shape = {"tail": _canonical(context[head:]), "tuple": isinstance(context, tuple)}
    if shape is None:
        shape = {"full": _canonical(context), "tuple": isinstance(context, tuple)}
    return [score.value, score.input_tokens, score.output_tokens, shape, score.cached_input_tokens]


def decode_score(value: list[Any], parent_context: Any) -> Score:
    """A logged score; one logged before the cache count was kept has 4 fields."""
    score, input_tokens, output_tokens, shape, *cached = value
    if "tail" in shape:
        context: Any = [*parent_context, *shape["tail"]]
    else:
        context = shape["full"]
    if shape["tuple"] and isinstance(context, list):
        context = tuple(dict(m) if isinstance(m, dict) else m for m in context)
    return Score(
        float(score),
        context,
        int(input_tokens),
        int(output_tokens),
        cached_input_tokens=int(cached[0] if cached else 0),
    )


def _ignored(what: str, exc: BaseException | None = None) -> None:
    reason = "" if exc is None else f" ({type(exc).__name__})"
    log.warning("request log: a recorded %s does not fit its request%s: asked anew", what, reason)


def replayed_generations(value: Any, request: GenerationRequest) -> list[Generation] | None:
    """A recorded answer to `request`, or None when it is not one it could have got."""
    try:
        generations = decode_generations(value)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        _ignored("generation", exc)
        return None
    if len(generations) != request.n or any(
        not 0 <= g.output_tokens <= request.max_tokens or g.input_tokens < 0 for g in generations
    ):
        _ignored("generation")
        return None
    return generations


def replayed_score(value: Any, request: ScoreRequest) -> Score | None:
    """A recorded score for `request`, or None when it is not one it could have got."""
    try:
        score = decode_score(value, request.parent_context)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        _ignored("score", exc)
        return None
    if not 0.0 <= score.value <= 1.0 or score.input_tokens < 0 or score.output_tokens < 0:
        _ignored("score")
        return None
    return score


class ReplayPolicy(PolicyWrapper):
    """`policy` with the current tree's journal in front of it."""

    def __init__(self, policy: Policy, counts: Counters, salt: str = "") -> None:
        super().__init__(policy)
        self._counts = counts
        self._salt = salt

    async def generate(self, request: GenerationRequest) -> Sequence[Generation]:
        journal = _journal.get()
        if journal is None:
            return await self.policy.generate(request)
        key = generation_key(request, self._salt)
        recorded = journal.take(key)
        generations = None if recorded is None else replayed_generations(recorded, request)
        if generations is not None:
            self._counts.replayed_requests += 1
            self._counts.replayed_policy_output_tokens += sum(g.output_tokens for g in generations)
            return generations
        generations = list(await self.policy.generate(request))
        if not any(g.finish is FinishReason.ERROR for g in generations):
            await journal.record(key, encode_generations(generations))
        return generations

    async def count_tokens(self, text: str) -> int:
        journal = _journal.get()
        if journal is None:
            return await self.policy.count_tokens(text)
        key = _key("c", (self._salt, text))
        recorded = journal.take(key)
        if isinstance(recorded, int) and recorded >= 0:
            return recorded
        if recorded is not None:
            _ignored("token count")
        tokens = await self.policy.count_tokens(text)
        await journal.record(key, tokens)
        return tokens


class ReplayScorer(ScorerWrapper):
    """`scorer` with the current tree's journal in front of it."""

    def __init__(self, scorer: Scorer, counts: Counters, salt: str = "") -> None:
        super().__init__(scorer)
        self._counts = counts
        self._salt = salt

    async def score(self, request: ScoreRequest) -> Score:
        journal = _journal.get()
        if journal is None:
            return await self.scorer.score(request)
        key = score_key(request, self._salt)
        recorded = journal.take(key)
        score = None if recorded is None else replayed_score(recorded, request)
        if score is not None:
            self._counts.replayed_requests += 1
            self._counts.replayed_prm_output_tokens += score.output_tokens
            return score
        score = await self.scorer.score(request)
        if score.error is None:
            await journal.record(key, encode_score(score, request.parent_context))
        return score
