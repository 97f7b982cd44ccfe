"""The generated arithmetic source, and `bgmcts synth --dry-run` (which starts nothing)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml

from pipeline.problems.arithmetic import generate, make_problem
from pipeline.problems.sources import load_problems, parse_source
from pipeline.records import RecordsSpec, records_for
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from search import parse_search_config, run_search
from search.scripted import ScriptedPolicy, ScriptedScorer

_START = re.compile(r"has (\d+) (\w+)s with (\d+) \w+ in each|has (\d+) \w+\.")
_STEP = re.compile(r"Then \w+ (gets (\d+) more|gives away (\d+)|doubles|triples)")


def _solve(text: str) -> int:
    """An independent reading of a generated problem (not the generator's own arithmetic)."""
    start = _START.search(text)
    assert start is not None, text
    value = int(start[1]) * int(start[3]) if start[1] else int(start[4])
    for step in _STEP.finditer(text):
        if step[2]:
            value += int(step[2])
        elif step[3]:
            value -= int(step[3])
        else:
            value *= 2 if step[1] == "doubles" else 3
    return value


def test_generated_problems_have_exact_answers_and_are_deterministic() -> None:
    problems = generate(seed=3, count=300, max_steps=2)
    assert problems == generate(seed=3, count=300, max_steps=2)
    assert generate(seed=4, count=5) != problems[:5]
    assert len({p["id"] for p in problems}) == 300
    for p in problems:
        assert int(p["answer"]) == _solve(p["problem"]) >= 0, p
        assert 1 <= p["steps"] <= 2
    assert {p["steps"] for p in problems} == {1, 2}
    assert all(p["steps"] == 1 for p in generate(seed=3, count=100, max_steps=1))
    # a larger count or a slice never changes the problems before it
    assert make_problem(3, 7, 2) == problems[7]


def test_arithmetic_source_slices_and_ids() -> None:
    source = parse_source({"kind": "arithmetic", "count": 20, "seed": 1, "skip": 5, "limit": 3})
    loaded = load_problems(source)
    assert not loaded.errors
    assert [p["problem_id"] for p in loaded.problems] == [f"arith/1/{i}" for i in (5, 6, 7)]
    assert all(p["reference"] and p["reference"].isdigit() for p in loaded.problems)
    with pytest.raises(ValueError, match="count"):
        parse_source({"kind": "arithmetic", "count": 0})


def _write_config(tmp_path: Path, **extra: object) -> Path:
    config = {
        "run_id": "dry",
        "output_root": str(tmp_path / "out"),
        "budget": 300,
        "source": {"kind": "arithmetic", "count": 5},
        "search": {"algorithm": "bg_mcts"},
        **extra,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_dry_run_prints_the_plan_after_resume_without_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from jobs.synthesize import main

    # one problem already searched by an earlier invocation of the same run (its tree is
    # committed), and one whose search failed (an error row: retried, so still to do)
    result = asyncio.run(
        run_search(
            "q",
            parse_search_config({"algorithm": "bg_mcts"}),
            ScriptedPolicy(),
            ScriptedScorer(),
            budget=200,
            seed=0,
        )
    )
    records = asyncio.run(
        records_for(result, None, RecordsSpec(problem_id="arith/0/2", run_id="dry"))
    )
    sink = ParquetSink(RunFolder.open(tmp_path / "out", "dry"))
    sink.write_batch({"trees": records["trees"]})
    sink.write_batch(
        {
            "errors": [
                {
                    "problem_id": "arith/0/3",
                    "stage": "search",
                    "message": "x",
                    "error_type": None,
                    "run_id": "dry",
                }
            ]
        }
    )
    was_running = ray.is_initialized()
    assert main(["--config", str(_write_config(tmp_path)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ray.is_initialized() == was_running  # nothing started
    assert re.search(r"problems to search\s+│?\s*4", out), out
    assert re.search(r"already done.*1", out), out
    assert "1,200 cost units at most (4 problems x B=300)" in out
    # a resumed run estimates the scorer's tokens from its own committed tree
    tree = records["trees"][0]
    scorer = tree["prm_input_tokens"] + tree["prm_output_tokens"]
    assert scorer > 0 and tree["policy_input_tokens"] > 0
    flat = " ".join(re.sub(r"[│┌┐└┘├┤─]", " ", out).split())
    assert (
        f"scorer tokens (PRM in + out) ~ {4 * scorer:,}, outside B (from this run's 1 "
        f"committed trees: {scorer:,} per problem)"
    ) in flat, flat
    assert f"policy prompt tokens ~ {4 * tree['policy_input_tokens']:,} (same trees)" in flat
    assert "llamacpp:embedded" in out and "run=dry" in out
    assert not (tmp_path / "out" / "run=dry" / "run.json").exists()  # wrote nothing


def test_dry_run_bad_source_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.synthesize import main

    path = _write_config(
        tmp_path, source={"kind": "jsonl", "path": str(tmp_path / "missing.jsonl")}
    )
    assert main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: source.path: file not found") and "\n" not in err
    assert "Traceback" not in err
    json.dumps(err)


def test_dry_run_of_the_main_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jobs.synthesize import main

    assert (
        main(["--config", "configs/local.yaml", "--output-root", str(tmp_path), "--dry-run"]) == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"problems to search\s+│?\s*16", out), out
    assert "4,800 cost units at most (16 problems x B=300)" in out
