"""No credential from a config URL in any output of a real run: logs, files, the Hub.

The whole job runs as `python -m jobs.synthesize` on a local Ray cluster of its own:

* the policy is the OpenAI-compatible engine against a real local HTTP server
  (stdlib, loopback) reached through a `base_url` with canary credentials (userinfo
  and `?token=`/`&sig=`).  The server fails its first requests with a 500 whose body
  quotes the URL it was called with (a careless server), so the `openai` client's own
  retries, a failed chat render, the Serve client's retry warning (in the search actor's
  log) and the failed requests' errors all happen; then it answers as the load model;
* `publish.endpoint` carries canary userinfo and points at the local Hub server
  (tests/hub_server.py, behind "a proxy" that takes that userinfo as basic auth).  Its
  first LFS batch fails, so huggingface_hub warns with the URL, then the publish
  succeeds and the dataset card quotes the run's config.  Then `jobs.publish --verbose`
  (the retry command) runs against a Hub that fails: its error line, retry command and
  traceback are printed.

Then the canaries are looked for in both jobs' stdout and stderr, every file of the run
folder (Parquet decoded too), every file of the cluster's Ray session folder (worker,
Serve, Ray Data, raylet and GCS logs) and the files on the Hub: none anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from actors.engines.base import Sampling
from actors.engines.load_model import LoadModelConfig, LoadModelEngine
from pipeline.records import RecordsSpec, error_row, records_for
from pipeline.store.run_folder import RunFolder
from search import parse_search_config, run_search
from search.protocols import Generation, GenerationRequest
from search.scripted import ScriptedPolicy, ScriptedScorer
from tests.deadlines import JOB_DEADLINE_S
from tests.hub_server import HubServer
from tests.openai_server import FakeServer
from tests.tiny_run import REPO, tiny_run_config

# Distinct strings no code or path of the run contains by chance.
CANARIES = {
    "policy base_url user": "qzUserPol7",
    "policy base_url password": "qzPassPol7",
    "policy base_url ?token=": "qzTokenPol7",
    "policy base_url &sig=": "qzSigPol7",
    "publish.endpoint user": "qzUserHub7",
    "publish.endpoint password": "qzPassHub7",
    "Hub token (HF_TOKEN)": "hf_qzHubTokenCanary7xxxxxxxxxx",
}
FAILED_REQUESTS = 12  # 500s before the server answers: chat renders and completions fail
POLICY_RETRIES = 2


class OpenAIServer:
    """A loopback OpenAI-compatible server that answers as `LoadModelEngine` would.

    The first `fail` requests get a 500 quoting the request line (path and query: the
    canary token); then /apply-template and /tokenize answer as llama.cpp's do.
    """

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.paths: list[str] = []
        self.lock = threading.Lock()
        answers = LoadModelEngine(LoadModelConfig(output_tokens=8))

        def respond(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
            with self.lock:
                self.paths.append(path)
            return self.respond(path, body, answers)

        self.http = FakeServer(respond)
        self.port = self.http.httpd.server_port

    def respond(
        self, path: str, body: Mapping[str, Any], answers: LoadModelEngine
    ) -> tuple[int, Any]:
        with self.lock:
            failing = self.fail > 0
            self.fail -= failing
        if failing:  # a careless server: its error quotes the request line (the query too)
            return 500, {"error": {"message": f"upstream failed for POST {path}", "code": 500}}
        # A base_url with a query makes the client's paths odd ("/v1?token=...&sig=.../
        # apply-template", "/v1/?token=...completions"): dispatch on how the path ends.
        if path.endswith("/apply-template"):
            return 200, {"prompt": "\n".join(m["content"] for m in body["messages"]) + "\n"}
        if path.endswith("/tokenize") and "content" in body:
            return 200, {"tokens": list(range(len(str(body["content"]).split())))}
        if not path.endswith("completions"):  # vLLM's /tokenize with messages, /detokenize
            return 404, {"error": {"message": f"no route {path}", "code": 404}}
        sampling = Sampling(
            max_tokens=int(body["max_tokens"]),
            stop=tuple(body.get("stop") or ()),
            temperature=float(body.get("temperature") or 0),
            seed=int(body.get("seed") or 0),
        )
        done = answers.respond(str(body["prompt"]), sampling)
        reason = "length" if done.finish.value == "length" else "stop"
        choice = {
            "index": 0,
            "text": done.text,
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": done.stop_string or None,  # as vLLM reports it
        }
        usage = {
            "prompt_tokens": done.input_tokens,
            "completion_tokens": done.output_tokens,
            "total_tokens": done.input_tokens + done.output_tokens,
        }
        return 200, {"id": "c", "object": "text_completion", "created": 0, "model": "m",
                     "choices": [choice], "usage": usage}  # fmt: skip

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    server = OpenAIServer(fail=FAILED_REQUESTS)
    yield server
    server.close()


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """RAY_TMPDIR of the job's own cluster: short (Ray's socket paths have a length limit)."""
    path = Path(tempfile.mkdtemp(prefix="rq-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _texts_of(path: Path) -> Iterator[tuple[str, str]]:
    """(where, text) for a file: its bytes as text, and a Parquet file's rows too."""
    data = path.read_bytes()
    yield str(path), data.decode("utf-8", errors="replace")
    if path.suffix == ".parquet":
        yield f"{path} (rows)", json.dumps(pq.read_table(path).to_pylist(), default=str)


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def _leaks(texts: Iterator[tuple[str, str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for where, text in texts:
        for name, canary in CANARIES.items():
            if canary in text:
                found.setdefault(name, []).append(where)
    return found


@pytest.mark.e2e
def test_no_credential_from_a_url_reaches_any_log_file_or_output(
    tmp_path: Path, openai_server: OpenAIServer, ray_tmp: Path
) -> None:
    c = CANARIES
    base_url = (
        f"http://{c['policy base_url user']}:{c['policy base_url password']}@127.0.0.1:"
        f"{openai_server.port}/v1?token={c['policy base_url ?token=']}"
        f"&sig={c['policy base_url &sig=']}"
    )
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)
    ]
    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 1.25,
        "decode_per_seq_ms": 0,
    }
    config = tiny_run_config(tmp_path, rows, budget=48, engine=engine, ray_num_cpus=2, run_id="r")
    config["policy"] = {
        "engine": {"kind": "openai", "base_url": base_url, "model": "m", "api_key_env": None},
        "max_retries": POLICY_RETRIES,
        "retry_backoff_s": 0.2,
    }
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_TMPDIR": str(ray_tmp),
        "QZ_HUB_TOKEN": c["Hub token (HF_TOKEN)"],
    }
    env.pop("RAY_ADDRESS", None)
    run_dir = tmp_path / "out" / "run=r"
    with HubServer() as hub:
        # A Hub behind a proxy that checks the endpoint's userinfo (basic auth); its first
        # LFS batch answers 503, so huggingface_hub retries with a warning naming the URL.
        hub.basic_auth = f"{c['publish.endpoint user']}:{c['publish.endpoint password']}"
        hub.fail_lfs_batch = 1
        endpoint = f"http://{hub.basic_auth}@{hub.endpoint.removeprefix('http://')}"
        config["publish"] = {"repo": "org/data", "endpoint": endpoint, "token_env": "QZ_HUB_TOKEN"}
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        synth = _job(["jobs.synthesize", "--config", str(path)], env)
        # The retry command of a publish that failed, with --verbose (the traceback too).
        hub.fail_all = True
        publish = _job(
            ["jobs.publish", "--run-dir", str(run_dir), "--repo", "org/data", "--run-id", "r",
             "--endpoint", endpoint, "--token-env", "QZ_HUB_TOKEN", "--verbose"],
            env,
        )  # fmt: skip
        hub_files = _hub_files(hub)
    sessions = list((ray_tmp / "ray").glob("session_2*"))
    assert len(sessions) == 1, sessions
    logs = "\n".join(t for f in _files(sessions[0] / "logs") for _, t in _texts_of(f))

    # It ran as described: the canary URL reached the server, whose failures were retried
    # (the Serve client's retry warning is in the search actor's log); the run searched
    # and published (after huggingface_hub's retry warning); the second publish failed.
    assert any(c["policy base_url ?token="] in p for p in openai_server.paths)
    assert openai_server.fail == 0 and len(openai_server.paths) > FAILED_REQUESTS
    assert "policy request failed" in logs
    assert synth.returncode in (0, 1), synth.stderr[-3000:]
    assert RunFolder.open(tmp_path / "out", "r").read("trees").num_rows > 0
    assert "published to org/data" in synth.stdout, synth.stderr[-3000:]
    assert "thrown while requesting POST" in synth.stderr  # huggingface_hub's retry warning
    assert "README.md" in "".join(hub_files)  # the dataset card quotes the run's config
    assert publish.returncode == 1 and "Traceback" in publish.stderr
    assert "Publishing run r to org/data failed" in publish.stderr

    outputs = [
        ("synthesize stdout", synth.stdout),
        ("synthesize stderr", synth.stderr),
        ("publish stdout", publish.stdout),
        ("publish stderr", publish.stderr),
        *((f"hub: {name}", text) for name, text in hub_files.items()),
        *(t for f in _files(tmp_path / "out") for t in _texts_of(f)),
        *(t for f in _files(sessions[0]) for t in _texts_of(f)),
    ]
    assert _leaks(iter(outputs)) == {}


# What a job's Ray workers log through Ray's, Serve's and libraries' own loggers: a task,
# an actor and a Serve replica each log the canary URL and raise with it.
_WORKERS = """
import logging
import ray
from ray import serve
from pipeline.run.cluster import start_ray

URL = "http://qzUserRay7:qzPassRay7@127.0.0.1:9/v1?token=qzTokenRay7"
start_ray(2, quiet=True)

@ray.remote
def task():
    logging.getLogger("httpx").warning("HTTP Request: POST %s 500", URL)

@ray.remote
class Actor:
    def log(self):
        try:
            raise ConnectionError(f"cannot reach {URL}")
        except ConnectionError:
            logging.getLogger("ray.data").exception("actor call failed")

@serve.deployment
class Replica:
    def __call__(self):
        logging.getLogger("ray.serve").warning("calling %s", URL)
        raise RuntimeError(f"engine at {URL} failed")

ray.get(task.remote())
ray.get(Actor.remote().log.remote())
serve.start(proxy_location="Disabled")
try:
    serve.run(Replica.bind(), name="r", route_prefix=None).remote().result()
except Exception:
    pass
serve.shutdown()
ray.shutdown()
"""


@pytest.mark.e2e
def test_every_ray_worker_of_the_job_redacts_its_log_lines(ray_tmp: Path) -> None:
    """The job's `worker_process_setup_hook`: tasks, actors and Serve replicas redact what
    any logger writes (Ray's, Serve's, a library's, a traceback), not only ours."""
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", _WORKERS],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (session,) = (ray_tmp / "ray").glob("session_2*")
    logs = [t for f in _files(session / "logs") for t in _texts_of(f)]
    written = "\n".join(text for _, text in logs)
    for line in ("HTTP Request: POST", "cannot reach", "calling http", "engine at http"):
        assert line in written  # each was logged (redacted)
    leaked = {where for where, text in logs if "Ray7" in text}
    assert leaked == set()


def _job(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=JOB_DEADLINE_S,
        check=False,
    )


def _hub_files(hub: HubServer) -> dict[str, str]:
    return {
        f"{repo_id}/{name}": data.decode(errors="replace")
        for (repo_type, repo_id) in list(hub.repos)
        for name, data in hub.files(repo_id, repo_type).items()
    }


# ------------------------------------------------------------------ the rows themselves
LEAKY_URL = "http://qzUserRow7:qzPassRow7@policy:8000/v1?api_key=qzKeyRow7"


@dataclasses.dataclass
class LeakyPolicy(ScriptedPolicy):
    """A policy whose failed choices quote the endpoint URL, as an HTTP client's error does."""

    def _choice(self, request: GenerationRequest, index: int, prompt_tokens: int) -> Generation:
        done = super()._choice(request, index, prompt_tokens)
        return dataclasses.replace(done, error=f"POST {LEAKY_URL} failed") if done.error else done


async def test_error_rows_and_node_errors_never_hold_credentials() -> None:
    """Whatever message reaches a record (an errors row, a tree node's `error`) is redacted
    there, so an engine or client that quotes its URL cannot put it in the Parquet."""
    config = parse_search_config({"algorithm": "bg_mcts"})
    result = await run_search(
        "q?", config, LeakyPolicy(seed=0, p_error=0.4), ScriptedScorer(seed=0), 2000, 0
    )
    records = await records_for(result, "12", RecordsSpec(problem_id="p", run_id="r"))
    errors = [n["error"] for n in records["tree_nodes"] if n["error"]]
    rows = [
        error_row("p", "search", f"every request failed: POST {LEAKY_URL}", run_id="r"),
        error_row("p", "search", ConnectionError(f"cannot reach {LEAKY_URL}"), run_id="r"),
    ]
    assert errors and all("policy:8000" in e for e in errors)
    text = json.dumps([errors, rows])
    assert [c for c in ("qzUserRow7", "qzPassRow7", "qzKeyRow7") if c in text] == []
