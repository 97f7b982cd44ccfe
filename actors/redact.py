"""Secrets inside values: URL credentials, key/token query parameters, bearer tokens.

Redaction by key name (`api_key: ...`) misses a secret that sits inside an ordinary
value, such as `base_url: http://user:sk-123@host/v1?api_key=sk-456`.  `redact_text`
removes those from any string: run.json, the dataset card, error rows and our logs
go through it; `RedactingFilter` applies it to log records.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

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


def redact_text(text: str) -> str:
    """`text` with credentials in URLs, key/token query parameters and bearer tokens removed."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['name']}={REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']}{REDACTED}", text)
    return _TOKEN_SHAPES.sub(REDACTED, text)


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


__all__ = ["REDACTED", "RedactingFilter", "install_log_redaction", "redact_text"]
