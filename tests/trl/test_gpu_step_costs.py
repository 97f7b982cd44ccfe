"""benchmarks/gpu_step_costs.py's code path on CPU (`--tiny`): the benchmark itself runs on
the device machine (torch is only in this venv here, and there is no GPU)."""

from __future__ import annotations

import re
import sys

import pytest

from benchmarks import gpu_step_costs


def test_fit_line_recovers_base_and_slope() -> None:
    base, slope = gpu_step_costs.fit_line([(1, 5.02), (64, 5.02 + 63 * 0.03), (256, 12.67)])
    assert base == pytest.approx(4.99, abs=0.01) and slope == pytest.approx(0.03, abs=1e-3)


def test_kv_bytes_per_token_of_the_published_shapes() -> None:
    llama = gpu_step_costs.SHAPES["llama-3.1-8b"]
    assert llama.kv_bytes_per_token == 128 * 1024  # 2 x 32 layers x 8 heads x 128 x 2 bytes
    assert llama.params == pytest.approx(8.03e9, rel=0.01)
    assert gpu_step_costs.SHAPES["qwen2.5-7b"].params == pytest.approx(7.62e9, rel=0.01)


def test_tiny_run_prints_both_tables_and_the_last_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["gpu_step_costs", "--tiny"])
    gpu_step_costs.main()
    out = capsys.readouterr().out
    assert "| 2 x 64 |" in out
    assert re.search(r"^\| 32 \| [\d.]+ / [\d.]+ / [\d.]+ \|", out, re.MULTILINE), out
    assert re.search(r"^prefill_tokens_per_s=\d+$", out.strip().splitlines()[-1]), out


def test_prefill_after_an_empty_cache_is_the_plain_prefill() -> None:
    """The cache-hit path computes what the plain causal prefill does (same logits)."""
    import torch

    torch.manual_seed(0)
    shape = gpu_step_costs.SHAPES["tiny"]
    model = gpu_step_costs.Decoder(shape, torch.device("cpu"), torch.float32)
    tokens = torch.randint(0, shape.vocab, (2, 16))
    dims = (2, shape.kv_heads, 16, shape.head_dim)
    caches = [(torch.zeros(dims), torch.zeros(dims)) for _ in range(shape.layers)]
    with torch.inference_mode():
        assert torch.allclose(model.prefill(tokens), model.prefill_after(tokens, caches))
