"""Ray Serve deployments of the policy LLM and the PRM, shared by every search actor.

One policy deployment and one scorer deployment serve all trees of all actors;
that sharing is what lets the engine batch thousands of expansions.  Search
code talks to them through `ServePolicy` / `ServeScorer`, which implement the
search core's `Policy` / `Scorer` protocols on a deployment handle and add a
per-request timeout and bounded retries: a request that still fails becomes a
failed node, never an exception in the search actor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ray import serve
from ray.serve.handle import DeploymentHandle

from actors.config import ScorerConfig, ServiceConfig
from actors.engines.factory import build_engine, check_engine
from actors.policy import EnginePolicy
from actors.redact import install_log_redaction
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

    async def complete(self, prompt: str, **kwargs: Any) -> Any:
        self.calls += 1
        return await self._engine.complete(prompt, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@serve.deployment
class PolicyServer:
    """The policy LLM behind one Serve deployment (engine chosen in config)."""

    def __init__(self, config: dict[str, Any]) -> None:
        install_log_redaction()  # engine errors may quote an endpoint URL with credentials
        service = ServiceConfig.model_validate(config)
        self.engine = _CountingEngine(build_engine(service.engine))
        self.policy = EnginePolicy(self.engine, instruction=service.prompts.policy_instruction)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        return await self.policy.generate(request)

    async def count_tokens(self, text: str) -> int:
        return await self.policy.count_tokens(text)

    async def prompt_tokens(self, problem: str, assistant_prefix: str) -> int:
        return await self.policy.prompt_tokens(problem, assistant_prefix)

    async def stats(self) -> dict[str, Any]:
        return {"name": self.policy.name, "engine_calls": self.engine.calls}


@serve.deployment
class ScorerServer:
    """GenPRM (the paper's reward-model protocol) behind one Serve deployment."""

    def __init__(self, config: dict[str, Any]) -> None:
        from actors.genprm import GenPRMScorer

        install_log_redaction()
        scorer = ScorerConfig.model_validate(config)
        self.engine = _CountingEngine(build_engine(scorer.engine))
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

    async def stats(self) -> dict[str, Any]:
        return {"name": self.scorer.name, "engine_calls": self.engine.calls}


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
                    exc,
                    attempt + 1,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")


class ServePolicy:
    """`search.Policy` through a Serve handle: picklable, so search actors can hold it."""

    def __init__(
        self, handle: DeploymentHandle[Any], service: ServiceConfig, name: str = ""
    ) -> None:
        self.handle = handle
        self.name = name or f"serve:{service.engine.kind}"
        self._resilience = _Resilience(
            service.request_timeout_s, service.max_retries, service.retry_backoff_s
        )

    async def _generate_once(self, request: GenerationRequest) -> list[Generation]:
        generations: list[Generation] = await self.handle.generate.remote(request)
        if generations and all(g.finish is FinishReason.ERROR for g in generations):
            raise EngineFailure(generations[0].error or "engine error")
        return generations

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        try:
            return await self._resilience.call(
                "policy request", lambda: self._generate_once(request)
            )
        except Exception as exc:
            message = f"policy request failed after retries: {type(exc).__name__}: {exc}"
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

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.handle.stats.remote()
        return result


class ServeScorer:
    """`search.Scorer` through a Serve handle."""

    def __init__(
        self, handle: DeploymentHandle[Any], service: ScorerConfig, name: str = ""
    ) -> None:
        self.handle = handle
        self.name = name or f"serve:{service.kind}"
        self._resilience = _Resilience(
            service.request_timeout_s, service.max_retries, service.retry_backoff_s
        )

    async def score(self, request: ScoreRequest) -> Score:
        try:
            score: Score = await self._resilience.call(
                "score request", lambda: self.handle.score.remote(request)
            )
            return score
        except Exception as exc:
            return Score(0.0, error=f"scorer failed after retries: {type(exc).__name__}: {exc}")

    async def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.handle.stats.remote()
        return result
