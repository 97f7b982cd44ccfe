"""vLLM's OpenAI-compatible server as the vLLM tests run it: on a free port of 127.0.0.1.

The port is found free and released, then vLLM binds it: another process (the other test
worker's Ray cluster starting) can take it in between, and vLLM then exits at once with
"Address already in use"; the server is then started again on another port.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TAKEN = "Address already in use"


@contextmanager
def server_on_a_free_port(
    launch: Callable[[int], subprocess.Popen[bytes] | None], log: Path, attempts: int = 3
) -> Iterator[str]:
    """The URL of the server `launch(port)` started (None from it: the port was taken),
    stopped on exit."""
    for _ in range(attempts):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        process = launch(port)
        if process is not None:
            break
    else:
        raise RuntimeError(f"vllm serve found no free port:\n{log.read_text()[-3000:]}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
