"""A JSON file that must hold an object, refused in one line naming the file.

The checkpoint check (`actors.engines.checkpoint`) and the layout file a trained PRM carries
(`actors.engines.step_layout`) read their files the same way, each raising its own error
type, so that a list, null or broken JSON reads the same wherever it is found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """The object `path` holds; `error` when it is not readable JSON or holds another kind
    (a list or null is refused, not indexed).  `what` names the object in the message."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise error(f"{path} is not readable JSON ({first_line(exc)})") from None
    if not isinstance(data, dict):
        raise error(f"{path} holds {_json_kind(data)}, not the object {what} is")
    return data


def _json_kind(data: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(data), f"a {type(data).__name__}"
    )


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
