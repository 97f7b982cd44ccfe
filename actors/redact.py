"""Secrets inside values: URL credentials, key/token query parameters, bearer tokens.

Redaction by key name (`api_key: ...`) misses a secret that sits inside an ordinary
value, such as `base_url: http://user:sk-123@host/v1?api_key=sk-456`.  `redact_text`
removes those from any string: run.json, the dataset card, error rows and our logs
go through it; `RedactingFilter` applies it to log records.  `redact_secrets` redacts a
whole config dump: secret-looking keys by name, and `redact_text` on every string.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

# scheme://user:password@host -> scheme://<redacted>@host (userinfo never belongs in output)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
# ?api_key=...&token=... (any parameter whose name says key, token, secret or password)
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:[\w.-]*?(?:api[_-]?key|key|token|secret|password|passwd|pwd|sig|signature)))"
    r"=(?P<value>[^&#\s\"']+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<scheme>\b(?:Bearer|Basic|Token)\s+)(?P<value>[A-Za-z0-9._~+/=-]{6,})")
# Well-known token shapes (Hugging Face, OpenAI-style keys)
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,})\b")
# Keys whose values are secrets ("hf_token", "api_key", "password"), not counts ("max_tokens").
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|api[_-]?key|auth|authorization|credentials?)$|secret|passw(or)?d", re.I
)


def redact_text(text: str) -> str:
    """`text` with credentials in URLs, key/token query parameters and bearer tokens removed."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['name']}={REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']}{REDACTED}", text)
    return _TOKEN_SHAPES.sub(REDACTED, text)


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


class RedactingFilter(logging.Filter):
    """Rewrites each record's message through `redact_text` (attach to handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactingFilter()


def install_log_redaction(
    logger_names: Iterable[str] = ("", "ray", "ray.serve", "ray.data"),
) -> None:
    """Attach the redacting filter to these loggers and every handler they have now."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


__all__ = [
    "REDACTED",
    "RedactingFilter",
    "install_log_redaction",
    "redact_secrets",
    "redact_text",
    "scrub",
]
