"""A run neither loses, doubles nor misreports work, checked without a cluster: resume keys,
failed searches, the breaker, the lease, exit codes, publishing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.search_outcome import EngineBreaker, failure_reason
from jobs.synthesize import main as synth_main
from pipeline.problems.sources import JsonlSource, load_problems
from pipeline.records import error_row
from pipeline.run.synthesis import write_manifest
from pipeline.store.lease import RunFolderBusy, RunLease
from pipeline.store.resume import pending
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from search import parse_search_config, run_search
from search.protocols import FinishReason, Generation
from search.scripted import ScriptedPolicy, ScriptedScorer
from tests.tiny_run import COLUMNS, tiny_run_config

REPO = Path(__file__).resolve().parents[3]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------ resume keys
def test_a_duplicates_error_row_never_marks_the_kept_problem_done(tmp_path: Path) -> None:
    source = _jsonl(
        tmp_path / "p.jsonl",
        [
            {"id": "a", "question": "first", "answer": "1"},
            {"id": "a", "question": "second copy", "answer": "1"},
            {"id": "b", "question": "other", "answer": "2"},
        ],
    )
    loaded = load_problems(JsonlSource(path=source, columns=COLUMNS))
    assert [e["problem_id"] for e in loaded.errors] == ["p.jsonl:line 2"]
    sink = ParquetSink(RunFolder.open(tmp_path / "out", "r"))
    # a killed run committed the duplicate's error row first, nothing else
    sink.write_batch(
        {
            "errors": [
                error_row(e["problem_id"], e["stage"], e["message"], run_id="r")
                for e in loaded.errors
            ]
        }
    )
    todo, new_errors = pending(loaded, sink.folder)
    assert [p["problem_id"] for p in todo] == ["a", "b"]  # the real "a" is still searched
    assert new_errors == []  # the duplicate is reported once


def test_a_failed_search_is_retried_by_the_next_run(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "p.jsonl", [{"id": "a", "question": "q", "answer": "1"}])
    loaded = load_problems(JsonlSource(path=source, columns=COLUMNS))
    sink = ParquetSink(RunFolder.open(tmp_path / "out", "r"))
    sink.write_batch({"errors": [error_row("a", "search", "every request failed", run_id="r")]})
    todo, _ = pending(loaded, sink.folder)
    assert [p["problem_id"] for p in todo] == ["a"]


# ------------------------------------------------------------------ failed searches
async def _search(policy: ScriptedPolicy) -> Any:
    config = parse_search_config({"algorithm": "bg_mcts"})
    return await run_search("q?", config, policy, ScriptedScorer(seed=0), 2000, 0)


async def test_a_search_whose_every_request_failed_is_a_failure() -> None:
    result = await _search(ScriptedPolicy(seed=0, p_error=1.0))
    assert result.stop_reason == "stalled"  # before: written as a searched tree
    reason = failure_reason(result, context_length=4096)
    assert reason is not None and reason.startswith("every request failed")


async def test_a_problem_that_cannot_fit_the_context_names_both_sizes() -> None:
    result = await _search(ScriptedPolicy(seed=0, p_overflow=1.0))
    reason = failure_reason(result, context_length=4096, problem_tokens=48213)
    assert reason == "problem is 48,213 tokens; the policy's context is 4,096"


async def test_a_search_that_produced_nodes_is_not_a_failure() -> None:
    result = await _search(ScriptedPolicy(seed=0, p_error=0.3))
    assert failure_reason(result, context_length=4096) is None


def test_the_breaker_opens_after_n_failed_requests_in_a_row() -> None:
    opened: list[int] = []
    breaker = EngineBreaker(3, on_open=opened.append)
    failed = [Generation("", 0, FinishReason.ERROR, error="down")]
    ok = [Generation("x", 1, FinishReason.STOP_STRING)]
    for generations in (failed, failed, ok, failed, failed):
        breaker.record(generations)
    assert not breaker.open  # a success resets the count
    breaker.record(failed)
    assert breaker.open and opened == [3]
    assert "3 policy requests failed in a row" in breaker.message


# ------------------------------------------------------------------ one writer
_HOLD = "import sys, time; from pipeline.store.lease import RunLease; "
_HOLD += "RunLease(sys.argv[1]).acquire(); "
_HOLD += "print('held', flush=True); time.sleep(120)"


def _holder(run_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _config(tmp_path: Path, **extra: Any) -> Path:
    rows = [{"id": "p0", "question": "What is 1+1?", "answer": "2"}]
    config = tiny_run_config(tmp_path, rows, budget=32, engine={"kind": "load_model"}, **extra)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_second_writer_refuses_naming_the_holder_and_a_dead_holders_lease_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "out" / "run=busy"
    holder = _holder(run_dir)
    try:
        with pytest.raises(RunFolderBusy, match=f"pid {holder.pid} on "):
            RunLease(run_dir).acquire()
        # the synthesis job refuses too: exit 2, one line, before searching anything
        assert synth_main(["--config", str(_config(tmp_path)), "--run-id", "busy"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"pid {holder.pid}" in err
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # a stale lease: its process is dead
        holder.wait()
    with RunLease(run_dir):  # taken over
        assert json.loads((run_dir / "_lease.json").read_text())["pid"] == os.getpid()


# ------------------------------------------------------------------ exit codes
@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"source": {"kind": "jsonl", "path": "/nonexistent/p.jsonl"}}, "source.path"),
        (
            {"source": {"kind": "jsonl", "path": "PROBLEMS", "columns": {"problem": "nope"}}},
            "source.columns.problem",
        ),
        ({"run_id": "a/b"}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"output_root": "FILE"}, "output_root"),
        ({"source": {"kind": "jsonl", "path": "EMPTY"}}, "selection is empty"),
        (
            {"source": {"kind": "jsonl", "path": "PROBLEMS", "filters": {"answer": "nothing"}}},
            "selection is empty",
        ),
    ],
)
def test_bad_inputs_exit_2_with_one_line_naming_the_thing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], names: str
) -> None:
    path = _config(tmp_path)
    config = yaml.safe_load(path.read_text())
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "empty.jsonl").write_text("")
    swap = {
        "PROBLEMS": str(tmp_path / "problems.jsonl"),
        "EMPTY": str(tmp_path / "empty.jsonl"),
        "FILE": str(tmp_path / "a_file"),
    }
    for key, value in change.items():
        if isinstance(value, dict):
            value = {**value, "path": swap.get(value["path"], value["path"])}
            if "columns" not in value and "filters" in value:
                value["columns"] = COLUMNS
        config[key] = swap.get(value, value) if isinstance(value, str) else value
    path.write_text(yaml.safe_dump(config))
    assert synth_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and names in err
    assert len(err.splitlines()) <= 2  # one line (a config error: "file: invalid" + the field)


def test_an_empty_selection_the_config_allows_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path)
    config = yaml.safe_load(path.read_text())
    (tmp_path / "empty.jsonl").write_text("")
    config["source"]["path"] = str(tmp_path / "empty.jsonl")
    config["allow_empty"] = True
    path.write_text(yaml.safe_dump(config))
    assert synth_main(["--config", str(path)]) == 0


# ------------------------------------------------------------------ publishing
def test_retry_command_reproduces_endpoint_token_variable_and_privacy() -> None:
    from pipeline.publish.hub import retry_command

    cmd = retry_command(
        "/r/run=x", "org/ds", "x", token_env="MY_TOKEN", endpoint="https://hub.corp", private=False
    )
    assert "--endpoint https://hub.corp" in cmd and "--token-env MY_TOKEN" in cmd
    assert cmd.endswith("--public") and "--run-id x" in cmd and "--repo org/ds" in cmd


def test_secrets_inside_values_never_reach_run_json(tmp_path: Path) -> None:
    from common.redact import redact_text
    from pipeline.config import parse_run_config

    path = _config(tmp_path)
    data = yaml.safe_load(path.read_text())
    url = "http://user:sk-canary1234567890abcdef@host:8000/v1?api_key=canary2&x=1"
    data["policy"]["engine"] = {"kind": "openai", "base_url": url, "model": "m"}
    config = parse_run_config(data)
    (tmp_path / "run=run").mkdir()
    write_manifest(config, RunFolder.open(tmp_path, "run"))
    text = (tmp_path / "run=run" / "run.json").read_text()
    assert "canary" not in text and "host:8000/v1" in text and "x=1" in text
    assert redact_text("Authorization: Bearer abcdef123456") == "Authorization: Bearer <redacted>"


def test_only_committed_parts_are_published(tmp_path: Path) -> None:
    from pipeline.publish.publish_run import _local_files

    sink = ParquetSink(RunFolder.open(tmp_path, "r"))
    row = {
        "prompt": [{"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "a"}],
        "problem_id": "p",
        "node_id": 1,
        "answer": "1",
        "score": 1.0,
        "depth": 1,
        "answers_in_path": 1,
        "truncated": False,
        "difficulty": "all_correct",
        "split": "train",
        "label_source": "reference",
        "run_id": "r",
    }
    sink.write_batch({"sft": [row]})
    committed = sink.folder.parts("sft")[0]
    # a batch renamed into place whose marker never came (the writer is mid-commit)
    (sink.run_dir / "sft" / "part-inflight.parquet").write_bytes(committed.read_bytes())
    assert _local_files(sink.run_dir, tmp_path / "counted")["sft"] == [committed]


def test_the_lease_outlives_nothing(tmp_path: Path) -> None:
    """Released on exit: the same process can take it again at once."""
    run_dir = tmp_path / "run=x"
    with RunLease(run_dir):
        pass
    start = time.monotonic()
    with RunLease(run_dir):
        assert time.monotonic() - start < 1


async def test_engine_errors_never_quote_credentials_from_the_endpoint_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actors.engines.base import Sampling
    from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = "http://user:sk-canary1234567890abcdef@127.0.0.1:9/v1?api_key=canary2"
    engine = OpenAIEngine(
        OpenAIConfig(base_url=url, model="m", api_key_env=None),
        max_retries=0,
        request_timeout_s=2,
        chat_template="none",
    )
    completion = await engine.complete(
        "hi", Sampling(max_tokens=1, stop=(), temperature=0.0, seed=0, top_logprobs=0)
    )
    assert completion.finish is FinishReason.ERROR and completion.error
    assert "canary" not in completion.error and "canary" not in repr(engine)
    with pytest.raises(Exception) as info:
        OpenAIEngine(
            OpenAIConfig(
                base_url="https://user:sk-canary1234567890abcdef@remote.example/v1", model="m"
            )
        )
    assert "canary" not in str(info.value)
