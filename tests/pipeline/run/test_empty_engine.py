"""An engine that answers with nothing: its problems are retryable errors, never trees.

* Through the real pipeline (slow): the policy is a real OpenAI-compatible HTTP server
  on 127.0.0.1 (`tests.openai_server`, the stdlib server the engine tests use) reached by
  `OpenAIEngine` inside the Serve replica; the scorer is the load model.  First every
  completion is empty (text "", `completion_tokens` 0, finish "stop"): each request is
  retried, still empty, so each problem is an `errors` row, the job exits 1 and no
  training row is written.  Then the same server answers for real and a rerun of the
  same command searches both problems once.  Committed as trees instead, the empty
  searches would have made the job exit 0 and the rerun skip them.  The job's command
  (`jobs.synthesize`'s `main`) runs in this process and joins the session's cluster
  (`ray_cluster`).
* The rules one by one: `EnginePolicy` turns an empty or white-space completion from a
  real HTTP server into a failed request; `failure_reason` refuses a tree whose every
  step is empty (continuation prompts had spent its budget); the training builders never
  put an empty step in a row, every gate open.  The scripted policy of the last two is
  the search core's fake LLM: no model can be made to answer empty on purpose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine
from actors.policy import EnginePolicy
from actors.search_outcome import failure_reason
from jobs.synthesize import main as synthesize_main
from pipeline.records import GatesConfig, PrmConfig, RecordsConfig, RecordsSpec, records_for
from pipeline.store.run_folder import RunFolder
from search import parse_search_config, run_search
from search.protocols import FinishReason, Generation, GenerationRequest
from search.scripted import ScriptedPolicy, ScriptedScorer
from search.tree import Node
from tests.openai_server import FakeServer, chat_server_respond, completion
from tests.tiny_run import tiny_run_config

TRAINING = ("sft", "dpo", "step_dpo", "prm", "kto")
ANSWER = " 1 + 1 = 2, so the answer is $\\boxed{2}$."


class Engine:
    """What the server's completions say: nothing at all, or a short answered step."""

    def __init__(self) -> None:
        self.empty = True
        self.requests: Counter[tuple[str, int]] = Counter()  # (prompt, seed) -> times asked

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.requests[(str(body["prompt"]), int(body["seed"]))] += 1
        if self.empty:
            return completion({"text": "", "finish_reason": "stop", "stop_reason": None}, 0)
        words = ANSWER.split(" ")
        if len(words) + 1 > body["max_tokens"]:  # the cap cut it (every word is a token)
            cut = " ".join(words[: body["max_tokens"]])
            return completion({"text": cut, "finish_reason": "length"}, body["max_tokens"])
        return completion(
            {"text": ANSWER, "finish_reason": "stop", "stop_reason": None}, len(words) + 1
        )


@pytest.fixture()
def engine() -> Iterator[tuple[Engine, FakeServer]]:
    state = Engine()
    server = FakeServer(chat_server_respond(state.answer))
    yield state, server
    server.close()


@pytest.mark.e2e
def test_an_engine_that_answers_nothing_gives_error_rows_and_a_rerun_completes(
    ray_cluster: None,
    tmp_path: Path,
    engine: tuple[Engine, FakeServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    state, server = engine

    def _run(config: Path) -> tuple[int, str]:
        """The job's command on the session's cluster: its exit status and its stderr."""
        code = synthesize_main(["--config", str(config)])
        return code, capsys.readouterr().err

    rows = [
        {"id": "p0", "question": "What is 1 + 1?", "answer": "2"},
        {"id": "p1", "question": "What is 0 + 2?", "answer": "2"},
    ]
    config = tiny_run_config(
        tmp_path, rows, budget=64, engine={"kind": "load_model"}, run_id="empty", ray_num_cpus=2
    )
    config["policy"] = {
        "engine": {
            "kind": "openai",
            "base_url": f"{server.url}/v1",
            "model": "m",
            "api_key_env": None,
            "context_length": 2048,
        },
        "max_retries": 1,
        "retry_backoff_s": 0.05,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))

    code, err = _run(path)
    assert code == 1, err[-3000:]
    folder = RunFolder.open(tmp_path / "out", "empty")
    assert folder.read("trees").num_rows == 0  # before: both trees committed, exit 0
    errors = folder.read("errors").to_pylist()
    assert sorted(e["problem_id"] for e in errors) == ["p0", "p1"]
    assert all(e["stage"] == "search" and "empty" in e["message"] for e in errors), errors
    assert {kind: folder.count(kind) for kind in TRAINING} == dict.fromkeys(TRAINING, 0)
    assert max(state.requests.values()) == 2  # every empty request was retried once

    state.empty = False  # the engine is fixed: the same command again
    code, err = _run(path)
    assert code == 0, err[-3000:]
    trees = folder.read("trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter({"p0": 1, "p1": 1})
    # a problem that is now done counts only its finishing run's rows (the fenced-writer
    # rule, pipeline.store.run_folder); the run then compacted its folder, which keeps only
    # the rows that count, so the first run's failed attempts are gone from disk too
    assert folder.count("errors") == 0
    assert folder.store.names("errors") == []
    assert all(name.startswith("part-compact-") for name in folder.store.names("trees"))


# ------------------------------------------------------------------ the rules one by one
async def test_an_empty_or_white_space_completion_is_a_failed_request() -> None:
    answers = [
        completion({"text": "", "finish_reason": "stop", "stop_reason": None}, 0),
        completion({"text": " \n ", "finish_reason": "stop", "stop_reason": None}, 2),
        completion({"text": " six", "finish_reason": "stop", "stop_reason": None}, 2),
    ]
    server = FakeServer(chat_server_respond(lambda body: answers[int(body["seed"]) % 3]))
    engine = OpenAIEngine(OpenAIConfig(base_url=f"{server.url}/v1", model="m"), max_retries=0)
    try:
        request = GenerationRequest(
            problem="q",
            assistant_prefix="Step 1:",
            n=3,
            max_tokens=2,
            stop=(),
            temperature=1.0,
            seed=3,
        )
        empty, blank, ok = await EnginePolicy(engine).generate(request)
    finally:
        await engine.close()
        server.close()
    assert (empty.finish, empty.output_tokens) == (FinishReason.ERROR, 0)  # before: eos
    assert empty.error == "the engine returned an empty completion (0 tokens, finish eos)"
    assert blank.finish is FinishReason.ERROR and "white space only" in (blank.error or "")
    assert (ok.finish, ok.text, ok.output_tokens) == (FinishReason.EOS, " six", 2)


async def test_a_white_space_start_cut_by_max_tokens_is_an_answer_not_a_failure() -> None:
    """Near the end of the budget a request may ask for 1 token; a white-space start that
    the cap cut is charged like any step (retrying it with the same seed gives it again)."""
    server = FakeServer(
        chat_server_respond(lambda body: completion({"text": " ", "finish_reason": "length"}, 1))
    )
    engine = OpenAIEngine(OpenAIConfig(base_url=f"{server.url}/v1", model="m"), max_retries=0)
    try:
        request = GenerationRequest(
            problem="q",
            assistant_prefix="Step 1:",
            n=1,
            max_tokens=1,
            stop=(),
            temperature=1.0,
            seed=3,
        )
        [capped] = await EnginePolicy(engine).generate(request)
    finally:
        await engine.close()
        server.close()
    assert (capped.finish, capped.text, capped.output_tokens) == (FinishReason.LENGTH, " ", 1)


@dataclass
class EmptyPolicy:
    """Answers every request with nothing, as a policy that let the empty answers through
    did (the search core's view of the hostile engine)."""

    name: str = "empty"

    async def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        return [Generation("", 0, FinishReason.EOS)] * request.n


async def test_a_tree_whose_every_step_is_empty_is_a_failed_search() -> None:
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search("q?", config, EmptyPolicy(), ScriptedScorer(seed=0), 400, 0)
    assert result.c_used > 0  # the continuation prompts of the "answered" empty nodes
    reason = failure_reason(result, context_length=4096)
    assert reason is not None and "empty" in reason  # before: None, the tree was committed


@dataclass
class SometimesEmpty:
    """The scripted policy, but every third choice is empty: ended (eos), stopped at the
    step boundary (its children continue a path through it) or white space cut by the cap."""

    inner: ScriptedPolicy = field(default_factory=lambda: ScriptedPolicy(seed=1, p_answer=0.5))
    name: str = "sometimes-empty"
    calls: int = 0

    async def count_tokens(self, text: str) -> int:
        return await self.inner.count_tokens(text)

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        out = []
        for g in await self.inner.generate(request):
            self.calls += 1
            if self.calls % 3 == 0:
                kind = (self.calls // 3) % 3
                finish = (FinishReason.EOS, FinishReason.STOP_STRING, FinishReason.LENGTH)[kind]
                g = Generation("" if kind < 2 else "  ", min(1, request.max_tokens), finish)
            out.append(g)
        return out


def _empty(node: Node) -> bool:
    return not node.text.strip()


async def test_an_empty_step_is_never_in_a_training_row_or_a_prm_step() -> None:
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search(
        "Tom has 5 apples and buys 7 more. How many?",
        config,
        SometimesEmpty(),
        ScriptedScorer(seed=1),
        4000,
        1,
    )
    tree = result.tree
    assert any(_empty(n) for n in tree.nodes[1:])
    every_gate_open = RecordsConfig(
        gates=GatesConfig(
            drop_truncated=False,
            require_statement=False,
            rejected_states_reference=False,
            min_edit_distance=0,
            sft_top_k=0,
            near_duplicate=1.0,
        ),
        prm=PrmConfig(unanswered_branches=True),
    )
    records = await records_for(
        result, "12", RecordsSpec(problem_id="p", run_id="r", config=every_gate_open)
    )
    ends = [r["node_id"] for kind in ("sft", "kto", "prm") for r in records[kind]]
    ends += [
        r[f"{side}_node_id"]
        for kind in ("dpo", "step_dpo")
        for r in records[kind]
        for side in ("chosen", "rejected")
    ]
    assert records["kto"] and records["prm"]  # rows were built, just none through an empty step
    for node_id in ends:
        assert not any(_empty(step) for step in tree.path(tree[node_id])[1:]), node_id
    steps = [i for r in records["prm"] for i in r["step_node_ids"]]
    assert not any(_empty(tree[i]) for i in steps)
    drops = {d["gate"]: d["dropped"] for d in records["trees"][0]["gate_drops"]}
    assert drops.get("kto.empty_step", 0) > 0 and drops.get("prm.empty_step", 0) > 0
