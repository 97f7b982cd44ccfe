"""Small stdlib HTTP servers that speak the OpenAI API on 127.0.0.1, for hostile-engine tests.

`FakeServer` answers every POST with `respond(path, body, headers) -> (status, json)`
(or `(status, json, response_headers)`, e.g. a `Retry-After`);
`chat_server_respond` is a respond function good enough for the whole pipeline: llama.cpp's
`/apply-template` and `/tokenize` (so `OpenAIEngine` with `chat_template: server` renders
and counts on it) and `/v1/completions`, answering each completion from `answer(body)`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Respond = Callable[[str, Mapping[str, Any], Mapping[str, str]], tuple[Any, ...]]


class FakeServer:
    """A stdlib HTTP server answering JSON with `respond(path, body, headers)`."""

    def __init__(self, respond: Respond) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer, *extra = respond(self.path, body, dict(self.headers))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(choice: Mapping[str, Any], completion_tokens: int) -> dict[str, Any]:
    """A `/v1/completions` answer with one choice and its usage."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "logprobs": None, **choice}],
        "usage": {
            "prompt_tokens": 7,
            "completion_tokens": completion_tokens,
            "total_tokens": 7 + completion_tokens,
        },
    }


def chat_server_respond(answer: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Respond:
    """A respond function for the pipeline: a word is a token, the chat is rendered as
    plain "role: content" lines (the final assistant message left open), and every
    `/v1/completions` request is answered with `answer(body)`."""

    def respond(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        if path == "/apply-template":
            messages = body["messages"]
            lines = [f"{m['role']}: {m['content']}" for m in messages]
            if messages[-1]["role"] != "assistant":
                lines.append("assistant:")
            return 200, {"prompt": "\n".join(lines)}
        if path == "/tokenize":
            return 200, {"tokens": list(range(len(str(body.get("content", "")).split())))}
        if path == "/v1/completions":
            return 200, answer(body)
        return 404, {"error": {"message": f"no {path} here", "code": 404}}

    return respond


__all__ = ["FakeServer", "Respond", "chat_server_respond", "completion"]
