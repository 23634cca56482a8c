"""Incremental Server-Sent-Events parser working on raw bytes.

Hand-written rather than httpx-sse because httpx-sse goes through ``aiter_lines`` (a
decode and a str split per line); this parser splits the raw bytes once per network
read, which is where a streaming client spends its CPU (see bench/client_capacity.py).
"""

from __future__ import annotations

MAX_EVENT_BYTES = 4 * 1024 * 1024  # an event larger than this is a protocol error


class SSEError(Exception):
    """The byte stream is not a valid event stream (e.g. an over-long event)."""


class SSEParser:
    """Feed it network reads; it returns the ``data`` payload of each complete event.

    Handles LF and CRLF (and lone CR) line ends, events split across reads, comment
    lines (``: ping``), ``event:``/``id:``/``retry:`` fields and multi-line data.
    """

    __slots__ = ("_buf", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # Normalise CRLF and lone CR once; cheap, and rare in practice.
            if buf.endswith(b"\r"):
                # A CR at the very end may be the first half of a CRLF: keep it back.
                buf = buf[:-1]
                hold_cr = True
            else:
                hold_cr = False
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            hold_cr = False
        out: list[bytes] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            start = end + 2
            if block.startswith(b"data:") and b"\n" not in block:
                # Fast path: one data line, the common case.
                payload = block[5:]
                if payload[:1] == b" ":
                    payload = payload[1:]
                out.append(payload)
                continue
            data_lines = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    v = line[5:]
                    if v[:1] == b" ":
                        v = v[1:]
                    data_lines.append(v)
                elif line == b"data":
                    data_lines.append(b"")
                # comments (":"), event:, id:, retry: and unknown fields carry no data
            if data_lines:
                out.append(b"\n".join(data_lines))
        rest = buf[start:]
        if hold_cr:
            self._buf = rest + b"\r"
        else:
            self._buf = rest
        if len(self._buf) > self.max_event_bytes:
            self._buf = b""
            raise SSEError(f"event longer than {self.max_event_bytes} bytes")
        return out

    def flush(self) -> list[bytes]:
        """At end of stream: a final event without its blank line still counts."""
        buf = self._buf.rstrip(b"\r\n")
        self._buf = b""
        if not buf:
            return []
        return self.feed(buf + b"\n\n")

    @property
    def pending(self) -> int:
        return len(self._buf)
