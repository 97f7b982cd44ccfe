"""A tiny Llama with random weights and a character-level tokenizer, built offline.

vLLM loads Hugging Face model folders; none can be downloaded here, and the
only real model on disk is a GGUF file.  A contract test needs no good text,
only real engine behaviour, so this builds a folder vLLM accepts: a 2-layer
Llama (about 60k parameters) and a `tokenizers` tokenizer whose vocabulary is
printable ASCII and newline plus the two ChatML markers, with a ChatML chat
template.

With ~100 tokens and near-uniform random logits, every sampled token is the
end-of-sequence token with probability ~1/100, so a few hundred tokens end
naturally for most seeds, and one-character stop strings are hit quickly:
the tests scan a few seeds for each finish reason instead of hoping.

Needs `torch` and `transformers` (the vLLM virtualenv has both).
"""

from __future__ import annotations

import string
from pathlib import Path

START, EOS = "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Write config, weights and tokenizer into `folder`; returns `folder`."""
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    # letters, digits, punctuation, " " and "\n"
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab = {token: i for i, token in enumerate([EOS, START, *chars])}
    # BPE with no merges over an unsplit string is a character tokenizer; Fuse joins on decode.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.decoder = decoders.Fuse()
    # EOS is the only special token (hidden from decoded text); "<|im_start|>" is an
    # ordinary added token, so a generated one stays in the text and re-tokenizes to
    # one token: the text then accounts for every generated token but EOS.
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, pad_token=EOS)
    tokenizer.add_tokens([START], special_tokens=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=vocab[EOS],
        pad_token_id=vocab[EOS],
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = vocab[EOS]
    model.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    import sys

    print(build_tiny_model(Path(sys.argv[1])))
