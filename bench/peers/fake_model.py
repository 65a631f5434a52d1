"""The fake model every system of the peers bench calls: OpenAI's `/v1/chat/completions` over HTTP on loopback.

    .venv/bin/python -m bench.peers.fake_model [--port 0]     # prints "fake model listening on PORT"

Deterministic from the request (`bench.peers.shared.fake_answer`): a `write_read` call with a fresh id
(`call_<hex>`, as real models do) while the conversation has fewer tool results since the last user message than
its `steps=N`, then the text `done: N steps`. It answers server-sent events when the request says `stream: true`
(with a usage chunk when `stream_options.include_usage`), else one JSON completion. HTTP/1.1 with keep-alive,
a thread per connection, so the three systems' clients (20 runs in flight each) are served at once.
`GET /stats` returns the number of completions served per model name.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.peers.shared import fake_answer


class FakeModelServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()


def completion(model: str, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }


def stream_chunks(model: str, message: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    chunks = [chunk({"role": "assistant", "content": "" if message.get("content") else None})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    if include_usage:
        usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks


class _Handler(BaseHTTPRequestHandler):
    server: FakeModelServer
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connections, as with a real provider
    # Headers and body leave in one segment (buffered, flushed after each request) with Nagle off. Written in two
    # sends, the body waited for the client's delayed ACK of the headers: 44 ms per call on a kept-alive
    # connection, more than a whole durable step.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/stats"):
            with self.server.lock:
                body = json.dumps(dict(self.server.calls)).encode()
            self._send(200, "application/json", body)
        else:
            self._send(404, "application/json", b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, "application/json", b'{"error": {"message": "only /v1/chat/completions"}}')
            return
        request = json.loads(raw)
        model = str(request.get("model") or "")
        message = fake_answer(request.get("messages") or [])
        with self.server.lock:
            self.server.calls[model] += 1
        if request.get("stream"):
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            events = "".join(f"data: {json.dumps(c)}\n\n" for c in stream_chunks(model, message, include_usage))
            self._send(200, "text/event-stream", (events + "data: [DONE]\n\n").encode())
        else:
            self._send(200, "application/json", json.dumps(completion(model, message)).encode())

    def log_message(self, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.fake_model", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = FakeModelServer(args.port)
    print(f"fake model listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
