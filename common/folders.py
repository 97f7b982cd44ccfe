"""A folder a command is told to write in, checked before any work starts.

Three commands take such a folder (`embedded-model --root`, the Hugging Face cache of
`prefetch-models`, a benchmark's `--work-dir`), and each owes its user one line naming
the path when it cannot be used, not an `OSError` from deep inside the work.
"""

from __future__ import annotations

import os
from pathlib import Path


def folder_problem(path: Path, *, writable: bool = True) -> str | None:
    """Make `path` (and its parents) if it is missing; what is wrong with it, in words
    that name the path at fault, or None when it is a folder (one this user can write
    in, with `writable`)."""
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return f"{blocker} is a file, not a folder"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{path} cannot be made ({exc.filename or path}: {exc.strerror or exc})"
    if writable and not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by this user"
    return None
