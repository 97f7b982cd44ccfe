"""`common.redact`: the one function that removes credentials from text, and the log
record factory that applies it to every log line of a process (a credential in a config URL
must reach no log line, error row or file).

The end-to-end check (a real run's stdout, stderr, run folder and Ray session logs) is
tests/pipeline/run/test_redaction.py; these pin the forms and the log paths one by one.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.engines.openai_compat import OpenAIConfig, OpenAIEngine
from actors.errors import EngineError
from common.redact import REDACTED, install_log_redaction, redact_text

REPO = Path(__file__).resolve().parents[2]
SECRET = "qzSecret9"  # every credential below is this string (or starts with it)


@pytest.mark.parametrize(
    "text",
    [
        f"http://user{SECRET}:pw{SECRET}@host:8000/v1",
        f"POST https://bob:p@ss{SECRET}@hub.corp/api/x failed",  # a raw "@" in the password
        f"//user:{SECRET}@host/path",  # scheme-relative
        f"https://h/v1?token={SECRET}&x=1",
        f"https://h/v1?x=1&access_token={SECRET}",
        f"https://h/v1?api_key={SECRET}",
        f"https://h/v1?apikey={SECRET}",
        f"https://h/v1?key={SECRET}",
        f"https://h/v1?sig={SECRET}",
        f"https://h/v1?signature={SECRET}",
        f"https://h/v1?password={SECRET}",
        f"https://h/v1?auth={SECRET}",
        f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        f"{SECRET}%2F20261125&X-Amz-Signature={SECRET}&X-Amz-Security-Token={SECRET}",
        f"https://storage.googleapis.com/b/o?X-Goog-Signature={SECRET}",
        f"URL('http://u:{SECRET}@127.0.0.1:9/v1/?token={SECRET}completions')",  # httpx's repr
        f"https://h/cb?next=https%3A%2F%2Fu%3A{SECRET}%40inner%2Fx%3Ftoken%3D{SECRET}",
        f"Authorization: Bearer {SECRET}abcdef",
        f"Authorization: Basic {SECRET}==",
    ],
)
def test_redact_text_removes_every_credential_form(text: str) -> None:
    clean = redact_text(text)
    assert SECRET not in clean and REDACTED in clean


def test_redact_text_keeps_what_is_no_credential() -> None:
    text = (
        "https://h:8000/v1/completions?model=m&max_tokens=16 user@example.com "
        "s3://bucket/run=x/part-0.parquet X-Amz-Algorithm=AWS4-HMAC-SHA256"
    )
    assert redact_text(text) == text
    assert redact_text(ValueError("http://u:p@h/x")) == f"http://{REDACTED}@h/x"  # any object


@pytest.fixture
def redacting() -> Iterator[None]:
    """Log redaction installed for this process (what the driver and every worker do)."""
    install_log_redaction()
    yield


def test_every_log_record_is_redacted_whatever_logger_or_handler(redacting: None) -> None:
    url = f"http://u:{SECRET}@127.0.0.1:9/v1?token={SECRET}"
    root_out, lib_out = io.StringIO(), io.StringIO()
    # A handler added after the install (as Ray and Serve add theirs), on the root: a
    # library logger's record reaches it by propagation (httpx's request log).
    root_handler = logging.StreamHandler(root_out)
    logging.getLogger().addHandler(root_handler)
    # A library with its own handler that does not propagate (huggingface_hub's).
    lib = logging.getLogger("qz.library")
    lib.propagate = False
    lib.addHandler(logging.StreamHandler(lib_out))
    try:
        logging.getLogger("httpx").warning('HTTP Request: POST %s "HTTP/1.1 500"', url)
        lib.warning(f"HTTP Error 503 thrown while requesting POST {url}")
        try:
            raise ConnectionError(f"cannot reach {url}")
        except ConnectionError:
            # not "ray.serve" itself: once Serve has run in this process (the suite runs it
            # before this test) that logger no longer propagates to the root
            logging.getLogger("qz.serve").exception("request failed")  # traceback too
    finally:
        logging.getLogger().removeHandler(root_handler)
    logged = root_out.getvalue() + lib_out.getvalue()
    assert SECRET not in logged
    assert logged.count(REDACTED) >= 6 and "ConnectionError: cannot reach" in logged


def test_warnings_are_redacted() -> None:
    """In a fresh interpreter: pytest records warnings instead of printing them."""
    code = (
        "import warnings; from common.redact import install_log_redaction; "
        "install_log_redaction(); "
        f"warnings.warn('retrying http://u:{SECRET}@h/x?sig={SECRET}', UserWarning)"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "UserWarning: retrying" in done.stderr and SECRET not in done.stderr


@pytest.mark.parametrize("call", ["render_chat", "tokenize"])
async def test_engine_errors_name_the_server_without_its_credentials(call: str) -> None:
    # Port 9 (discard) on loopback: connection refused, so every endpoint fails.
    url = f"http://u:{SECRET}@127.0.0.1:9/v1?token={SECRET}"
    engine = OpenAIEngine(
        OpenAIConfig(base_url=url, model="m", api_key_env=None), max_retries=0, request_timeout_s=2
    )
    with pytest.raises(EngineError) as info:
        if call == "render_chat":
            await engine.render_chat([{"role": "user", "content": "hi"}], continue_final=False)
        else:
            await engine.tokenize("hi")
    await engine.close()
    assert "127.0.0.1:9" in str(info.value) and SECRET not in str(info.value)
