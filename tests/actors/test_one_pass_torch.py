"""The one-pass scorer on a real torch model: a tiny `LlamaForTokenClassification` the test
writes (random weights, nothing downloaded) behind the `StepScoringEngine` contract, its
sequence laid out by `actors.engines.step_layout` as every engine lays it out.

What a real model shows that a stand-in cannot: Q is the model's own positive-class
probability at the separator closing the node's last step, computed here from the whole
text tokenized at once; and a causal model gives an ancestor's steps the same values
however the path goes on, so a node's `min` never sees its children.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from actors.config import OnePassSettings
from actors.engines.base import StepScoringEngine, StepValues
from actors.engines.step_layout import layout, separator_id
from actors.one_pass import OnePassScorer
from search.protocols import ScoreRequest

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

BOS = 1


def _tokenize(text: str) -> list[int]:
    """One token per character (a vocabulary of 256 ids; 0-2 left for special tokens)."""
    return [3 + ord(c) % 253 for c in text]


class TinyTorchPRM:
    """A random-weight two-label token classifier, scoring as a one-pass PRM engine does."""

    name = "tiny-llama"

    def __init__(self, context_length: int = 512) -> None:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=256,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=context_length,
            num_labels=2,
        )
        self.model = transformers.LlamaForTokenClassification(config).eval()
        self.context_length = context_length
        self.separator = separator_id(_tokenize, "\n")

    def positive(self, ids: list[int]) -> list[float]:
        """P(good step) at every position of `ids`."""
        with torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0]
        return [float(p) for p in logits.softmax(-1)[:, 1]]

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        laid = layout(_tokenize, prompt, steps, self.separator, bos=BOS)
        tokens = len(laid.input_ids)
        if tokens > self.context_length:
            return StepValues((), tokens, error=f"{tokens} tokens > context {self.context_length}")
        probs = await asyncio.to_thread(self.positive, laid.input_ids)
        return StepValues(tuple(probs[i] for i in laid.positions), tokens)

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        raise NotImplementedError("this model has no chat template")

    async def tokenize(self, text: str) -> list[int]:
        return _tokenize(text)

    async def close(self) -> None:
        return None


def _request(*path: str) -> ScoreRequest:
    return ScoreRequest("What is 2 + 2?", path, None, False, None, False, 1e9)


async def test_q_is_the_models_probability_at_the_last_separator() -> None:
    engine = TinyTorchPRM()
    assert isinstance(engine, StepScoringEngine)
    scorer = OnePassScorer(engine)
    path = (" 2 + 2 = 4.  \n\n \nSo 4.", "\nStep 2: it is $\\boxed{4}$.")
    score = await scorer.score(_request(*path))
    text = "Step 1: 2 + 2 = 4.  \nSo 4.\nStep 2: it is $\\boxed{4}$."  # blank lines folded
    ids = [BOS, *_tokenize("What is 2 + 2?" + text + "\n")]
    assert score.input_tokens == len(ids) and score.output_tokens == 0
    assert score.value == pytest.approx(engine.positive(ids)[-1], abs=1e-6)
    assert 0.0 < score.value < 1.0 and score.error is None


async def test_an_ancestors_steps_keep_their_values_as_the_path_grows() -> None:
    engine = TinyTorchPRM()
    short = await engine.score_steps("What is 2 + 2?", ["Step 1: a", "b"])
    longer = await engine.score_steps("What is 2 + 2?", ["Step 1: a", "b", "c", "Step 2: d"])
    assert longer.values[:2] == pytest.approx(short.values, abs=1e-6)
    scorer = OnePassScorer(engine, OnePassSettings(node_value="min"))
    parent = await scorer.score(_request(" a\nb"))
    assert parent.value == pytest.approx(min(short.values), abs=1e-6)


async def test_a_path_longer_than_the_context_is_a_failed_node() -> None:
    score = await OnePassScorer(TinyTorchPRM(context_length=32)).score(_request(" x" * 40))
    assert score.value == 0.0 and score.error is not None and "> context 32" in score.error
