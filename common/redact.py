"""Secrets inside text: URL credentials, key/token/signature query values, bearer tokens.

`redact_text` is the one function every boundary uses: whatever may quote a URL or an
exception (an HTTP client's error names the URL it called) goes through it before it
reaches a log line, stderr, an `errors` row, a tree node's `error`, run.json, the run
report or the dataset card.  It removes

* userinfo: ``scheme://user:password@host`` -> ``scheme://<redacted>@host`` (also
  scheme-relative ``//user@host`` and a percent-encoded URL inside another one);
* the values of query parameters whose name says key, token, sig(nature), secret,
  password, auth or credential: ``?token=``, ``&key=``, ``&sig=``, ``access_token``,
  ``api_key``, ``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Amz-Security-Token``...;
* ``Bearer``/``Basic``/``Token`` credentials and well-known token shapes (``hf_...``,
  ``sk-...``, GitHub and AWS access key ids).

Log lines are redacted where they are made: `install_log_redaction` puts a log record
factory in the process, so every record (ours, Ray's, Serve's, Ray Data's, httpx's,
openai's, huggingface_hub's, with the traceback of `exc_info`) is redacted before any
handler sees it, whatever logger it came from and whichever handler writes it (a
filter on a logger misses records its children propagate, and handlers added later).
It also redacts `warnings` output.  It is installed in the driver (`jobs.exits.guarded`,
`pipeline.run.synthesis`), in every Ray worker of the job (`worker_process_setup_hook`,
`pipeline.run.cluster.start_ray`) and by our actors and Serve replicas themselves.

`redact_secrets` redacts a whole config dump: secret-looking keys by name, and
`redact_text` on every string.  `scrub` removes known values (the token in use).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

# scheme://user:password@host -> scheme://<redacted>@host.  Greedy within the authority
# (no "/", "?", "#" or space), so a password with a raw "@" goes up to the host's "@".
_USERINFO = re.compile(r"(?P<scheme>(?:\b[a-zA-Z][a-zA-Z0-9+.-]*:)?//)(?P<userinfo>[^/\s?#]+)@")
# The same URL percent-encoded inside another one (a redirect or callback parameter).
_ENCODED_USERINFO = re.compile(
    r"(?P<scheme>%3A%2F%2F)(?P<userinfo>(?:(?!%2F)[^/\s?#&])+?)%40", re.I
)
# ?api_key=...&token=...&X-Amz-Signature=... (the name ends in one of these words)
_QUERY_SECRET = re.compile(
    r"(?P<name>(?:[?&;]|%3F|%26)[\w.-]*?"
    r"(?:key|token|secret|password|passwd|pwd|sig|signature|auth|credentials?))"
    r"(?P<eq>=|%3D)(?P<value>[^&#\s\"'<>]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<scheme>\b(?:Bearer|Basic|Token)\s+)(?P<value>[A-Za-z0-9._~+/=-]{6,})")
# Well-known token shapes: Hugging Face, OpenAI-style keys, GitHub, AWS access key ids.
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16})\b"
)
# Keys whose values are secrets ("hf_token", "api_key", "password"), not counts ("max_tokens").
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|api[_-]?key|auth|authorization|credentials?)$|secret|passw(or)?d", re.I
)


def redact_text(text: object) -> str:
    """`text` (any object: an exception, a URL) as a string without the credentials it
    carries: URL userinfo, secret query values, bearer tokens (see the module docstring)."""
    clean = text if isinstance(text, str) else str(text)
    if not clean:
        return clean
    clean = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", clean)
    clean = _ENCODED_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}%40", clean)
    clean = _QUERY_SECRET.sub(lambda m: f"{m['name']}{m['eq']}{REDACTED}", clean)
    clean = _BEARER.sub(lambda m: f"{m['scheme']}{REDACTED}", clean)
    return _TOKEN_SHAPES.sub(REDACTED, clean)


def redact_secrets(value: Any, secrets: Sequence[str] = ()) -> Any:
    """Copy of ``value`` with secret-looking keys redacted and any ``secrets`` scrubbed."""
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if _SECRET_KEY.search(str(k)) else redact_secrets(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v, secrets) for v in value]
    if isinstance(value, str):  # secrets inside values too: URL userinfo, ?api_key=, Bearer
        return scrub(redact_text(value), secrets)
    return value


def scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` with each of `secrets` (known values, such as the token in use) replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """`record` with its message, traceback and stack redacted (in place; returned)."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: leave it to the handler's own error path
        return record
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        # Formatters reuse exc_text, so the traceback is rendered (and redacted) once here.
        formatted = logging.Formatter().formatException(record.exc_info)
        if redact_text(formatted) != formatted:
            record.exc_text = redact_text(formatted)
    elif record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)
    return record


class RedactingFilter(logging.Filter):
    """`redact_record` as a handler filter (for records made before the factory was set)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def _redacting_factory(inner: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(inner(*args, **kwargs))

    factory.redacts = True  # type: ignore[attr-defined]  # marks it: installed once
    return factory


def _redacting_formatwarning(inner: Callable[..., str]) -> Callable[..., str]:
    def formatwarning(*args: Any, **kwargs: Any) -> str:
        return redact_text(inner(*args, **kwargs))

    formatwarning.redacts = True  # type: ignore[attr-defined]
    return formatwarning


def install_log_redaction() -> None:
    """Redact every log record and warning this process makes from now on (idempotent).

    Also the `worker_process_setup_hook` of the job's Ray workers (`start_ray`).
    """
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "redacts", False):
        logging.setLogRecordFactory(_redacting_factory(factory))
    if not getattr(warnings.formatwarning, "redacts", False):
        warnings.formatwarning = _redacting_formatwarning(warnings.formatwarning)


__all__ = [
    "REDACTED",
    "RedactingFilter",
    "install_log_redaction",
    "redact_record",
    "redact_secrets",
    "redact_text",
    "scrub",
]
