"""The loss, class weights and batches of `bgmcts train-prm` (torch, no model download)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from pipeline.training.prm_data import IGNORE, Encoded
from pipeline.training.prm_trainer import class_weights, collate, step_loss

pytestmark = pytest.mark.integration

torch = pytest.importorskip("torch")


def test_hard_targets_without_weights_are_the_models_own_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 2)
    labels = torch.tensor([[IGNORE, 1, IGNORE, 0, IGNORE], [IGNORE, IGNORE, 1, IGNORE, IGNORE]])
    targets = (labels == 1).float()
    expected = torch.nn.functional.cross_entropy(logits.view(-1, 2), labels.view(-1))
    assert torch.allclose(step_loss(logits, labels, targets, None), expected)
    weights = torch.tensor([3.0, 0.5])
    weighted = torch.nn.functional.cross_entropy(
        logits.view(-1, 2), labels.view(-1), weight=weights
    )
    assert torch.allclose(step_loss(logits, labels, targets, weights), weighted)


def test_soft_targets_are_minimised_at_the_target() -> None:
    labels = torch.tensor([[IGNORE, 1]])
    targets = torch.tensor([[0.0, 0.7]])
    losses = []
    for p in (0.5, 0.7, 0.9):
        logit = torch.log(torch.tensor(p / (1 - p)))
        logits = torch.tensor([[[0.0, 0.0], [0.0, float(logit)]]])
        losses.append(float(step_loss(logits, labels, targets, None)))
    assert losses[1] < losses[0] and losses[1] < losses[2]


def test_class_weights() -> None:
    assert class_weights(60, 40, "auto") is None  # balanced enough
    assert class_weights(90, 10, "auto") == pytest.approx((5.0, 100 / 180))
    assert class_weights(60, 40, "balanced") == pytest.approx((100 / 80, 100 / 120))
    assert class_weights(90, 10, "none") is None
    assert class_weights(10, 0, "balanced") is None  # one class only: nothing to balance


def test_batches_pad_right_and_ignore_the_padding() -> None:
    short = Encoded("a", [5, 6], [IGNORE, 1], [0.0, 1.0])
    long = Encoded("b", [5, 6, 7, 8], [IGNORE, 0, IGNORE, 1], [0.0, 0.2, 0.0, 0.9])
    batch = collate([asdict(short), asdict(long)], pad_id=2)
    assert batch["input_ids"].tolist() == [[5, 6, 2, 2], [5, 6, 7, 8]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch["labels"].tolist() == [[IGNORE, 1, IGNORE, IGNORE], [IGNORE, 0, IGNORE, 1]]
    assert batch["targets"][1].tolist() == pytest.approx([0.0, 0.2, 0.0, 0.9])
