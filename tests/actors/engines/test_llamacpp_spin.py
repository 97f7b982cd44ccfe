"""llama.cpp's OpenMP threads spin briefly unless the user chose how they wait
(docs/benchmarks.md, "llama.cpp's threads on shared cores", says why)."""

from __future__ import annotations

import os

import pytest

from actors.engines.llamacpp import GOMP_SPIN_COUNT, spin_briefly_unless_set


def test_an_unset_environment_gets_the_brief_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    spin_briefly_unless_set()
    assert os.environ["GOMP_SPINCOUNT"] == GOMP_SPIN_COUNT


@pytest.mark.parametrize(
    ("name", "value"), [("GOMP_SPINCOUNT", "5000"), ("OMP_WAIT_POLICY", "ACTIVE")]
)
def test_a_users_choice_is_kept(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv(name, value)
    spin_briefly_unless_set()
    assert os.environ[name] == value
    assert os.environ.get("GOMP_SPINCOUNT") == (value if name == "GOMP_SPINCOUNT" else None)
