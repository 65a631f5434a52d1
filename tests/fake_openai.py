"""A real HTTP server on loopback speaking OpenAI's chat completions API, answering from a queue of replies."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI(ThreadingHTTPServer):
    """Answers /v1/chat/completions from a queue of (status, headers, body) replies and records requests."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: list[tuple[int, dict[str, str], bytes]] = []
        self.requests: list[tuple[float, dict[str, Any]]] = []
        self.responder: Callable[[dict[str, Any]], tuple[int, dict[str, str], bytes]] | None = None
        """Answers a request when `replies` is empty (a model that decides from what it was sent)."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append((time.monotonic(), body))
        if self.server.replies or self.server.responder is None:
            status, headers, payload = self.server.replies.pop(0)
        else:
            status, headers, payload = self.server.responder(body)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def sse(*chunks: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return 200, {"content-type": "text/event-stream"}, data.encode()


def delta(**d: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def finish(reason: str, prompt: int = 10, completion: int = 5) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


@contextmanager
def serving_fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()
