"""A one-pass engine's vocabulary, looked at before the engine is built.

A one-pass PRM reads each step's value at the step separator, so the separator must be
exactly one token of the model's vocabulary (`step_layout.separator_id`, the one check).
An engine checks it when it loads; a run checks it before it starts (`factory.
check_step_separator`), which needs the vocabulary without the engine.  Each engine config
names the function here that finds it (`vocabulary` in `actors.config`), and the functions
are here, not in the configs, so that reading a config never loads a tokenizer.

A function takes the engine's config and returns its tokenizer (text -> ids, no special
tokens), or None where the vocabulary cannot be looked at from here: a hub id, a folder on
other nodes, a machine without transformers.  The engine still checks when it loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.engines.step_layout import Tokenize


def model_folder(config: Any) -> Tokenize | None:
    """The tokenizer saved in the folder `config.model`, when that folder is here."""
    folder = Path(config.model).expanduser()
    if not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def whitespace_words(text: str) -> list[str]:
    """The model-free engines' tokens: whitespace words, and a whitespace-only text (such
    as the default separator "\\n") one token of its own."""
    return text.split() or ([text] if text else [])


def words(config: Any) -> Tokenize:
    """The vocabulary of a model-free engine (`load_model_prm`): `whitespace_words`, each
    distinct word one id."""
    vocabulary: dict[str, int] = {}
    return lambda text: [vocabulary.setdefault(w, len(vocabulary)) for w in whitespace_words(text)]


__all__ = ["model_folder", "whitespace_words", "words"]
