"""A hostile OpenAI-compatible server on 127.0.0.1, for tests/test_hostile.py.

Every answer is set per test: the model id (escape sequences, an echoed key), the events
of a stream (malformed fields, impossible numbers), the status and headers of the
answer, and the /metrics body (NaN, huge). It records what it was sent, so a test can
check the authorization each request carried.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ESC_MODEL = "m\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07odel\x9b31m"


def sse_events(*events: dict[str, Any] | str) -> list[bytes]:
    out = []
    for e in events:
        payload = e if isinstance(e, str) else json.dumps(e)
        out.append(b"data: " + payload.encode() + b"\n\n")
    return out


def text_event(text: Any, finish: Any = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def usage_event(completion: Any, prompt: Any = 5) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


class Hostile:
    def __init__(self) -> None:
        self.model_id = "hostile-model"
        self.models_body: bytes | None = None
        self.stream_status = 200
        self.stream_headers: dict[str, str] = {"content-type": "text/event-stream"}
        self.events: list[bytes] = sse_events(
            text_event("hi"), text_event(" there", "stop"), usage_event(2), "[DONE]"
        )
        self.metrics_body = b"vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n"
        self.auth_seen: list[tuple[str, str]] = []  # (path, authorization header)
        self.echo_key = False  # put the bearer key into the model id
        self.extra_get: dict[str, bytes] = {}  # more JSON answers, by path
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                auth = self.headers.get("authorization", "")
                outer.auth_seen.append((self.path, auth))
                if self.path.endswith("/models"):
                    mid = outer.model_id
                    if outer.echo_key and auth.startswith("Bearer "):
                        mid = f"{mid}-{auth[7:]}"
                    body = (
                        outer.models_body
                        or json.dumps(
                            {"object": "list", "data": [{"id": mid, "object": "model"}]}
                        ).encode()
                    )
                    self._send(200, body)
                elif self.path == "/metrics":
                    self._send(200, outer.metrics_body, "text/plain")
                elif self.path in outer.extra_get:
                    self._send(200, outer.extra_get[self.path])
                elif self.path == "/version":
                    self._send(200, json.dumps({"version": "0.0\x1b[31mevil"}).encode())
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:  # noqa: N802
                outer.auth_seen.append((self.path, self.headers.get("authorization", "")))
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                self.send_response(outer.stream_status)
                for k, v in outer.stream_headers.items():
                    self.send_header(k, v)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for ev in outer.events:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> Hostile:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
