"""A tiny random `Qwen2ForProcessRewardModel` checkpoint, written offline, and its reference.

No real PRM weights can be downloaded here, and the engines' contract is about where the
values are read and how they are turned into probabilities, not about good values: random
weights do.  The folder has what vLLM loads for Qwen2.5-Math-PRM-7B's architecture: a
`config.json` naming `Qwen2ForProcessRewardModel` (2 labels), safetensors weights of a
2-layer Qwen2 body (`model.*`) and the reward head (`score.0` Linear, ReLU, `score.2`
Linear, as vLLM's qwen2_rm.py and Qwen's own modeling file build it), and a character
tokenizer (as `tiny_model.py`'s) with the separator `<extra_0>` as one added token and a
ChatML template.

`reference_step_values` is the plain transformers/torch forward of the same tensors: the
engines must agree with it.  Needs `torch`, `transformers` and `safetensors`.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

from tests.vllm.tiny_model import CHAT_TEMPLATE, EOS, START

SEPARATOR = "<extra_0>"


def build_tiny_prm(folder: Path, seed: int = 0) -> Path:
    """Write config, weights and tokenizer of a tiny random PRM into `folder`."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2Model

    folder.mkdir(parents=True, exist_ok=True)
    # transformers loads a folder whose config says qwen2 with Qwen2Tokenizer, which
    # byte-level encodes the text first (" " is "Ġ"), as Qwen's real tokenizer does: the
    # vocabulary is the printable characters in that byte-level alphabet.
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    byte_level = [_byte_char(c) for c in chars]
    vocab = {token: i for i, token in enumerate([EOS, START, SEPARATOR, *byte_level])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, pad_token=EOS)
    # Added tokens: "<extra_0>" in a text is always its one token, as in Qwen's tokenizer.
    tokenizer.add_tokens([START, SEPARATOR], special_tokens=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    hidden = 64
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=vocab[EOS],
        pad_token_id=vocab[EOS],
        tie_word_embeddings=False,
        num_labels=2,
        architectures=["Qwen2ForProcessRewardModel"],
        torch_dtype="float32",
    )
    body = Qwen2Model(config)
    # Larger than the default init, so the values spread over (0, 1) and a value read at
    # the wrong token, or a wrong head, shows.
    with torch.no_grad():
        for param in body.parameters():
            if param.dim() == 2:
                param.normal_(0.0, 0.2)
    tensors = {f"model.{k}": v.contiguous() for k, v in body.state_dict().items()}
    tensors["score.0.weight"] = torch.randn(hidden, hidden) * 0.3
    tensors["score.0.bias"] = torch.randn(hidden) * 0.1
    tensors["score.2.weight"] = torch.randn(2, hidden) * 0.3
    tensors["score.2.bias"] = torch.randn(2) * 0.1
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)
    return folder


def _byte_char(char: str) -> str:
    """`char` (one byte in UTF-8) in the byte-level alphabet of GPT-2 style tokenizers."""
    from tokenizers import pre_tokenizers

    return str(pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(char)[0][0])


def reference_step_values(
    folder: Path, input_ids: Sequence[int], positions: Sequence[int]
) -> list[float]:
    """The positive class's probability at `positions`, from transformers' `Qwen2Model` and
    the head computed by hand from the checkpoint's tensors (softmax over the 2 labels)."""
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2Config, Qwen2Model

    tensors = load_file(str(folder / "model.safetensors"))
    config = Qwen2Config.from_pretrained(folder)
    body = Qwen2Model(config)
    body.load_state_dict(
        {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    )
    body.eval()
    with torch.no_grad():
        states = body(torch.tensor([list(input_ids)])).last_hidden_state[0]
        inner = torch.relu(states @ tensors["score.0.weight"].T + tensors["score.0.bias"])
        logits = inner @ tensors["score.2.weight"].T + tensors["score.2.bias"]
        probs = torch.softmax(logits, dim=-1)[:, 1]
    return [float(probs[p]) for p in positions]
