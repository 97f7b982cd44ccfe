"""Ray Serve deployments of the policy LLM and the PRM, shared by every search actor.

One policy deployment and one scorer deployment serve all trees of all actors;
that sharing is what lets the engine batch thousands of expansions.  Search
code talks to them through `ServePolicy` / `ServeScorer`, which implement the
search core's `Policy` / `Scorer` protocols on a deployment handle and add a
per-request timeout and bounded retries: a request that still fails becomes a
failed node, never an exception in the search actor.

Requests leave a client coalesced (`actors.coalesce`: one `generate_many` /
`score_many` call carries every request that arrived within
`coalesce_window_s`, at most `coalesce_max_batch`), and the replica fans them
out to its engine at once and streams the results back in groups (whatever has
finished, so no request waits for a slower neighbour).  With `affinity` and more
than one replica, the tree of each request (`actors.affinity`) hashes into a
bucket, the bucket is the call's Serve `session_id` and Serve's consistent-hash
router keeps a bucket (so each of its trees) on one replica, so a tree's shared
prefixes hit that replica's prefix cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ray import serve
from ray.serve.handle import DeploymentHandle

from actors.affinity import CONSISTENT_HASH_ROUTER, EVEN_BUCKET_ROUTER, bucket, current_tree
from actors.coalesce import Coalescer, RequestFailed, fan_out_stream
from actors.config import ScorerConfig, ServiceConfig
from actors.engines.base import Completion, Sampling, engine_capacity, engine_load
from actors.engines.factory import build_engine, check_engine
from actors.policy import EnginePolicy
from actors.redact import install_log_redaction, redact_text
from search.protocols import (
    FinishReason,
    Generation,
    GenerationRequest,
    Score,
    ScoreRequest,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

POLICY_APP = "policy"
SCORER_APP = "scorer"


class EngineFailure(RuntimeError):
    """Every choice of a request failed inside the engine: worth a retry."""


class _CountingEngine:
    """Counts engine calls so tests and metrics can see reuse and load."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.name = engine.name
        self.context_length = engine.context_length
        self.calls = 0

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        self.calls += 1
        completion: Completion = await self._engine.complete(prompt, sampling)
        return completion

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def stats(self) -> dict[str, Any]:
        """Engine calls, plus the engine's own counters (llama.cpp: prompt tokens
        evaluated vs served from its prefix cache) and which replica this is."""
        stats: dict[str, Any] = {"engine_calls": self.calls, "replica": _replica_id()}
        cache_stats = getattr(self._engine, "cache_stats", None)
        if cache_stats is not None:
            stats.update(cache_stats())
        return stats


def _replica_id() -> str:
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # not inside a replica (direct use in tests and benchmarks)
        return ""


@serve.deployment
class PolicyServer:
    """The policy LLM behind one Serve deployment (engine chosen in config)."""

    def __init__(self, config: dict[str, Any]) -> None:
        install_log_redaction()  # engine errors may quote an endpoint URL with credentials
        service = ServiceConfig.model_validate(config)
        self.engine = _CountingEngine(build_engine(service.engine))
        self.policy = EnginePolicy(
            self.engine,
            instruction=service.prompts.policy_instruction,
            solution_stops=service.prompts.policy_stop,
        )
        self.linger_s = service.coalesce_linger_s

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        return await self.policy.generate(request)

    async def generate_many(
        self, requests: list[GenerationRequest]
    ) -> AsyncIterator[list[tuple[int, list[Generation] | RequestFailed]]]:
        """A coalesced call: all at once, so the engine batches them; one failure each;
        results streamed back in groups, each as soon as it is done (no head-of-line wait)."""
        async for group in fan_out_stream(self.policy.generate, requests, linger_s=self.linger_s):
            yield group

    async def count_tokens(self, text: str) -> int:
        return await self.policy.count_tokens(text)

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        return await self.policy.prompt_tokens(problem, assistant_prefix)

    async def stats(self) -> dict[str, Any]:
        return {"name": self.policy.name, **self.engine.stats()}

    async def capacity(self) -> dict[str, Any]:
        """The engine's slots, KV tokens and hit rate (`actors.admission`)."""
        return asdict(engine_capacity(self.engine._engine))

    async def load(self) -> dict[str, Any]:
        """The engine's batch now and prompt-token counters, and which replica answered
        (`actors.admission.LoadTracker` steers admission by them at run time)."""
        return {**asdict(engine_load(self.engine._engine)), "replica": _replica_id()}


@serve.deployment
class ScorerServer:
    """GenPRM (the paper's reward-model protocol) behind one Serve deployment."""

    def __init__(self, config: dict[str, Any]) -> None:
        from actors.genprm import GenPRMScorer

        install_log_redaction()
        scorer = ScorerConfig.model_validate(config)
        self.engine = _CountingEngine(build_engine(scorer.engine))
        self.linger_s = scorer.coalesce_linger_s
        self.scorer = GenPRMScorer(
            self.engine,
            samples=scorer.genprm.samples,
            max_analysis_tokens=scorer.genprm.max_analysis_tokens,
            temperature=scorer.genprm.temperature,
            top_p=scorer.genprm.top_p,
            top_k=scorer.genprm.top_k,
            analysis_turn=scorer.genprm.analysis_turn,
            after_answer=scorer.genprm.prm_after_answer,
            system_prompt=scorer.prompts.prm_system,
        )

    async def score(self, request: ScoreRequest) -> Score:
        return await self.scorer.score(request)

    async def score_many(
        self, requests: list[ScoreRequest]
    ) -> AsyncIterator[list[tuple[int, Score | RequestFailed]]]:
        """A coalesced call (the k children of a leaf arrive together), streamed back."""
        async for group in fan_out_stream(self.scorer.score, requests, linger_s=self.linger_s):
            yield group

    async def stats(self) -> dict[str, Any]:
        return {"name": self.scorer.name, **self.engine.stats()}

    async def capacity(self) -> dict[str, Any]:
        """The engine's slots, KV tokens and hit rate (`actors.admission`)."""
        return asdict(engine_capacity(self.engine._engine))

    async def load(self) -> dict[str, Any]:
        """The engine's batch now and prompt-token counters, and which replica answered
        (`actors.admission.LoadTracker` steers admission by them at run time)."""
        return {**asdict(engine_load(self.engine._engine)), "replica": _replica_id()}


def _bind(deployment: Any, service: ServiceConfig, name: str) -> Any:
    options: dict[str, Any] = {
        "name": name,
        "ray_actor_options": {"num_cpus": service.num_cpus, "num_gpus": service.num_gpus},
        "max_ongoing_requests": service.max_ongoing_requests,
    }
    if service.autoscaling is not None:
        options["autoscaling_config"] = service.autoscaling
    else:
        options["num_replicas"] = service.num_replicas
    if service.routes_by_tree:
        from ray.serve.config import RequestRouterConfig

        router = EVEN_BUCKET_ROUTER if service.affinity_router == "even" else CONSISTENT_HASH_ROUTER
        options["request_router_config"] = RequestRouterConfig(
            request_router_class=router,  # type: ignore[arg-type]  # str is valid
            request_router_kwargs={"num_fallback_replicas": service.affinity_fallback_replicas},
        )
    return deployment.options(**options).bind(service.model_dump(mode="json"))


def deploy_policy(service: ServiceConfig, app: str = POLICY_APP) -> ServePolicy:
    """Start (or update) the policy deployment and return a client for it."""
    check_engine(service.engine)  # a clear error here, not a replica crash later
    serve.start(proxy_location="Disabled")
    handle = serve.run(_bind(PolicyServer, service, "PolicyServer"), name=app, route_prefix=None)
    return ServePolicy(handle, service)


def deploy_scorer(service: ScorerConfig, app: str = SCORER_APP) -> ServeScorer:
    check_engine(service.engine)
    serve.start(proxy_location="Disabled")
    handle = serve.run(_bind(ScorerServer, service, "ScorerServer"), name=app, route_prefix=None)
    return ServeScorer(handle, service)


@dataclass
class _Resilience:
    timeout_s: float
    retries: int
    backoff_s: float

    async def call(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """`make()` under a timeout, retried with exponential backoff; re-raises the last error."""
        for attempt in range(self.retries + 1):
            try:
                return await asyncio.wait_for(make(), self.timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if attempt == self.retries:
                    raise
                delay = self.backoff_s * 2**attempt
                log.warning(
                    "%s failed (%s: %s); retry %d in %.1fs",
                    what,
                    type(exc).__name__,
                    redact_text(exc),
                    attempt + 1,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")


class _Client:
    """What both Serve clients share: the handle, retries, coalescing and the tree key."""

    def __init__(self, handle: DeploymentHandle[Any], service: ServiceConfig) -> None:
        self.handle = handle
        self._resilience = _Resilience(
            service.request_timeout_s, service.max_retries, service.retry_backoff_s
        )
        self._window_s = service.coalesce_window_s
        self._max_batch = service.coalesce_max_batch
        self._by_tree = service.routes_by_tree
        self._buckets = service.affinity_buckets
        self._coalescers: dict[str, Coalescer[Any, Any]] = {}
        self._streams: dict[Hashable, DeploymentHandle[Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # pending futures belong to one event loop: a copy starts with none
        return {**self.__dict__, "_coalescers": {}, "_streams": {}}

    def _key(self) -> str | None:
        """The routing key of a request made here: its tree's bucket (None: any replica)."""
        if not self._by_tree:
            return None
        tree = current_tree()
        return None if tree is None else bucket(tree, self._buckets)

    def _target(self, key: Hashable) -> DeploymentHandle[Any]:
        """The handle for one call: the bucket as Serve's session id (routing)."""
        return self.handle if key is None else self.handle.options(session_id=str(key))

    def _stream(self, key: Hashable) -> DeploymentHandle[Any]:
        """The streaming handle for `key`'s coalesced calls (made once per key)."""
        handle = self._streams.get(key)
        if handle is None:
            handle = self._streams[key] = self._target(key).options(stream=True)
        return handle

    def _coalescer(self, method: str) -> Coalescer[Any, Any]:
        coalescer = self._coalescers.get(method)
        if coalescer is None:

            async def send(
                key: Hashable, requests: list[Any]
            ) -> AsyncIterator[list[tuple[int, Any]]]:
                # stream=True: results come back in groups as they finish, not with the slowest
                check = self._check
                async for group in getattr(self._stream(key), method).remote(requests):
                    yield [(index, check(result)) for index, result in group]

            coalescer = Coalescer(send, window_s=self._window_s, max_batch=self._max_batch)
            self._coalescers[method] = coalescer
        return coalescer

    def _check(self, result: Any) -> Any:
        """Turn a result worth retrying into a `RequestFailed` (default: none is)."""
        return result

    @property
    def coalesced(self) -> bool:
        return self._max_batch > 1

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.handle.stats.remote()
        return result


class ServePolicy(_Client):
    """`search.Policy` through a Serve handle: picklable, so search actors can hold it."""

    def __init__(
        self, handle: DeploymentHandle[Any], service: ServiceConfig, name: str = ""
    ) -> None:
        super().__init__(handle, service)
        self.name = name or f"serve:{service.engine.kind}"

    def _check(self, result: Any) -> Any:
        if (
            isinstance(result, list)
            and result
            and all(g.finish is FinishReason.ERROR for g in result)
        ):
            return RequestFailed(f"{EngineFailure.__name__}: {result[0].error or 'engine error'}")
        return result

    async def _generate_once(self, request: GenerationRequest, key: str | None) -> list[Generation]:
        """One call per request (`coalesce_max_batch: 1`): the path before coalescing."""
        generations: list[Generation] = await self._target(key).generate.remote(request)
        if generations and all(g.finish is FinishReason.ERROR for g in generations):
            raise EngineFailure(generations[0].error or "engine error")
        return generations

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        key = self._key()  # read here: the caller's context holds its tree
        make: Callable[[], Awaitable[list[Generation]]]
        if self.coalesced:
            coalescer = self._coalescer("generate_many")
            make = lambda: coalescer.submit(request, key)  # noqa: E731 - a future, no task
        else:
            make = lambda: self._generate_once(request, key)  # noqa: E731
        try:
            return await self._resilience.call("policy request", make)
        except Exception as exc:
            message = redact_text(
                f"policy request failed after retries: {type(exc).__name__}: {exc}"
            )
            return [Generation("", 0, FinishReason.ERROR, error=message)] * request.n

    async def count_tokens(self, text: str) -> int:
        result: int = await self._resilience.call(
            "count_tokens", lambda: self.handle.count_tokens.remote(text)
        )
        return result

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        result: int = await self._resilience.call(
            "prompt_tokens", lambda: self.handle.prompt_tokens.remote(problem, assistant_prefix)
        )
        return result


class ServeScorer(_Client):
    """`search.Scorer` through a Serve handle."""

    def __init__(
        self, handle: DeploymentHandle[Any], service: ScorerConfig, name: str = ""
    ) -> None:
        super().__init__(handle, service)
        self.name = name or f"serve:{service.kind}"

    async def score(self, request: ScoreRequest) -> Score:
        key = self._key()
        make: Callable[[], Awaitable[Score]]
        if self.coalesced:
            coalescer = self._coalescer("score_many")
            make = lambda: coalescer.submit(request, key)  # noqa: E731 - a future, no task
        else:
            make = lambda: self._target(key).score.remote(request)  # noqa: E731
        try:
            score: Score = await self._resilience.call("score request", make)
            return score
        except Exception as exc:
            error = f"scorer failed after retries: {type(exc).__name__}: {exc}"
            return Score(0.0, error=redact_text(error))
