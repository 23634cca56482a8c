"""A lean HTTP/1.1 client for the streams under measurement.

Each response is parsed in the event loop's reader callback, and both ends of the exchange
are stamped by the kernel (``SO_TIMESTAMPING``): the send when the request's last byte
went down the stack, each read when its bytes reached this machine -- not when this
process got round to them, so a busy loop, a slow frame or a preempted process never
moves a timestamp. Where the kernel gives no send stamp, the send is stamped just before
the final send call: an earlier bound, never a later one (a TTFT can then only be too
long, never impossible). ``tokmon.stamps`` asks the kernel for the stamps and reads them.

Why not httpx for these streams: through httpx → httpcore → h11 a streamed token cost
2.4× a bare aiohttp reader in CPU (h11 turns each piece of the chunked encoding into an
event object, and a task wakes up for every read), and its timestamps could only be taken
after the task woke. httpx still does every other request (pre-flight, /metrics, probes),
and its URL type parses the targets here.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from time import perf_counter_ns
from typing import Protocol

from tokmon.engine.clock import CLOCK
from tokmon.engine.target import Target as Target
from tokmon.engine.target import prepare as prepare
from tokmon.engine.target import request_bytes as request_bytes
from tokmon.stamps import (
    ANC_SIZE,
    MSG_ERRQUEUE,
    STAMP_WINDOW_NS,
    enable_stamps,
    read_stamp,
    send_stamp,
)

READ_SIZE = 256 * 1024
MAX_HEAD = 64 * 1024
DRAIN_S = 2.0  # a server that keeps the body open after the stream's end gets this long


class HTTPError(Exception):
    """Any failure of the exchange itself (not of the stream's content)."""


class ConnectError(HTTPError):
    pass


class ConnectTimeout(ConnectError):
    pass


class ReadTimeout(HTTPError):
    pass


class ReadError(HTTPError):
    pass


class RemoteProtocolError(HTTPError):
    """The server closed the connection before the response's end."""


class BadResponse(RemoteProtocolError):
    """The response breaks HTTP/1.1 (its head or its framing)."""


class Sink(Protocol):
    """Receives one response as it arrives, synchronously, in the reader callback."""

    def on_head(self, status: int, t_send: int, t: int) -> None:
        """The response head, read at ``t``, of the request sent at ``t_send``."""
        ...

    def on_body(self, t: int, data: bytes) -> bool:
        """Account body bytes read at ``t``; True once the sink needs no more of them."""
        ...


# Response parser states.
_HEAD, _SIZE, _DATA, _CRLF, _TRAILER, _LENGTH, _UNTIL_CLOSE, _END = range(8)


class Connection:
    """One keep-alive connection; one exchange at a time."""

    __slots__ = (
        "loop",
        "key",
        "sock",
        "fd",
        "tls",
        "_in",
        "_out",
        "closed",
        "reusable",
        "t_send",
        "t_head",
        "got_bytes",
        "_fut",
        "_sink",
        "_state",
        "_buf",
        "_left",
        "_keepalive",
        "_finished",
        "_last",
        "_t_read",
        "phases",
        "_idle_ns",
        "_idle_h",
        "_drain_h",
        "tx_kernel",
        "rx_kernel",
        "_tx_bytes",
        "_tx_wait",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, key: tuple[str, str, int]) -> None:
        self.loop = loop
        self.key = key
        self.sock: socket.socket | None = None
        self.fd = -1
        self.tls: ssl.SSLObject | None = None
        self._in: ssl.MemoryBIO | None = None
        self._out: ssl.MemoryBIO | None = None
        self.closed = False
        self.reusable = False
        self.t_send = 0
        self.t_head = 0
        self.got_bytes = False
        self._fut: asyncio.Future[None] | None = None
        self._sink: Sink | None = None
        self._state = _END
        self._buf = b""
        self._left = 0
        self._keepalive = True
        self._finished = False
        self._last = 0
        self._t_read = 0  # the last read's stamp: bytes arrive in order, and so do stamps
        # a new connection's setup, each phase's end (ns): name resolved, TCP up, TLS done
        self.phases: tuple[int, int, int] = (0, 0, 0)
        self._idle_ns = 0
        self._idle_h: asyncio.TimerHandle | None = None
        self._drain_h: asyncio.TimerHandle | None = None
        self.tx_kernel = False  # sends stamped by the kernel (else: just before the send)
        self.rx_kernel = False  # reads stamped by the kernel (else: when read)
        self._tx_bytes = 0  # bytes handed to the kernel since send stamps were enabled
        self._tx_wait = False  # the last request's send stamp has not been read yet

    # ------------------------------------------------------------------ connect
    async def connect(
        self, host: str, port: int, ssl_ctx: ssl.SSLContext | None, timeout: float
    ) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._connect(host, port, ssl_ctx)
        except TimeoutError:
            self.close()
            raise ConnectTimeout("connect timeout") from None
        except (OSError, ssl.SSLError) as e:
            self.close()
            raise ConnectError(str(e) or type(e).__name__) from None

    async def _connect(self, host: str, port: int, ssl_ctx: ssl.SSLContext | None) -> None:
        loop = self.loop
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        t_dns = perf_counter_ns()
        err: OSError | None = None
        for family, kind, proto, _, addr in infos:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            self.sock = sock
            try:
                await loop.sock_connect(sock, addr)
            except OSError as e:
                sock.close()
                self.sock = None
                err = e
                continue
            break
        else:
            raise err or OSError(f"cannot resolve {host}")
        sock = self.sock
        assert sock is not None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t_tcp = perf_counter_ns()
        if ssl_ctx is not None:
            await self._handshake(sock, ssl_ctx, host)
        self.phases = (t_dns, t_tcp, perf_counter_ns() if ssl_ctx is not None else 0)
        # After the handshake: the send stamps' byte counter starts here (OPT_ID on TCP
        # needs an established connection, and counts bytes from this moment).
        self.tx_kernel, self.rx_kernel = enable_stamps(sock)
        self.fd = sock.fileno()
        loop.add_reader(self.fd, self._on_readable)

    async def _handshake(self, sock: socket.socket, ctx: ssl.SSLContext, host: str) -> None:
        """TLS over memory buffers, so reads stay raw recvmsg calls with kernel stamps."""
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self._in, self._out, server_hostname=host)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            if self._out.pending:
                await self.loop.sock_sendall(sock, self._out.read())
            data = await self.loop.sock_recv(sock, READ_SIZE)
            if not data:
                raise ConnectionError("TLS handshake: the server closed the connection")
            self._in.write(data)
        if self._out.pending:
            await self.loop.sock_sendall(sock, self._out.read())

    # ------------------------------------------------------------------ exchange
    async def exchange(self, data: bytes, sink: Sink, idle_s: float) -> None:
        """Send one request and feed its response to ``sink``; returns at the body's end.

        Raises HTTPError subclasses, or what the sink raised. On any exception (and on
        cancellation) the connection is closed.
        """
        loop = self.loop
        fut: asyncio.Future[None] = loop.create_future()
        self._fut, self._sink = fut, sink
        self._state, self._buf, self._finished = _HEAD, b"", False
        self.reusable, self.got_bytes, self.t_head = False, False, 0
        try:
            # Stamped before the send: an earlier bound, replaced by the kernel's stamp of
            # the last byte's transmission where the kernel gives one.
            self.t_send = perf_counter_ns()
            await self._send(data)
            if self.tx_kernel:
                self._tx_wait = True
                self._read_errqueue()  # on loopback the stamp is there already
            self._idle_ns = int(idle_s * 1e9)
            self._last = perf_counter_ns()
            self._idle_h = loop.call_later(idle_s, self._idle_check)
            await fut
        except BaseException:
            self.close()
            raise
        finally:
            self._fut = self._sink = None
            if self._idle_h is not None:
                self._idle_h.cancel()
                self._idle_h = None
            if self._drain_h is not None:
                self._drain_h.cancel()
                self._drain_h = None

    async def _send(self, data: bytes) -> None:
        sock = self.sock
        if sock is None or self.closed:
            raise ReadError("connection closed")
        if self.tls is not None:
            assert self._out is not None
            self.tls.write(data)
            data = self._out.read()
        try:
            # sends at once when the socket takes it all (the usual case: no suspension)
            await self.loop.sock_sendall(sock, data)
        except OSError as e:
            raise ReadError(str(e) or type(e).__name__) from None
        self._tx_bytes += len(data)

    def _read_errqueue(self) -> None:
        """Take the kernel's send stamps off the socket's error queue.

        The one whose id is the offset of the request's last byte is its send time; stamps
        of earlier pieces of a long request are dropped.
        """
        sock = self.sock
        if sock is None:
            return
        key = (self._tx_bytes - 1) & 0xFFFFFFFF
        while True:
            try:
                _, anc, _, _ = sock.recvmsg(0, ANC_SIZE, MSG_ERRQUEUE)
            except OSError:  # empty (EAGAIN), or nothing to read there at all
                return
            now = perf_counter_ns()
            wall, ident = send_stamp(anc)
            if wall and ident == key and self._tx_wait:
                k = CLOCK.to_mono(wall, now)
                # never before the pre-send stamp (the send cannot precede its call)
                if now - STAMP_WINDOW_NS < k <= now and k >= self.t_send:
                    self.t_send = k
                self._tx_wait = False

    # ------------------------------------------------------------------ reading
    def _on_readable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        if self._tx_wait:
            self._read_errqueue()  # the send stamp comes before any byte of the answer
        try:
            data, anc, _, _ = sock.recvmsg(READ_SIZE, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            if self.tx_kernel:
                self._read_errqueue()  # woken by a stamp on the error queue, not by data
            return
        except OSError as e:
            self._fail(ReadError(str(e) or type(e).__name__))
            return
        now = perf_counter_ns()
        t = now
        wall = read_stamp(anc)
        if wall is not None:
            # The kernel stamps with the wall clock; move it to perf_counter's clock.
            k = CLOCK.to_mono(wall, now)
            if now - STAMP_WINDOW_NS < k <= now:
                t = k
        # A read's bytes came after the last read's, on the same connection: its stamp is
        # never earlier. (Each wall stamp is moved to the monotonic clock with the offset
        # measured at its read, which moves by a few hundred ns: two reads of a 10 MB
        # answer were once stamped 0.3 µs out of order, and the request dropped as
        # impossible. A read stamped when read, its kernel stamp refused, is later
        # than the reads it follows too.)
        if t < self._t_read:
            t = self._t_read
        self._t_read = t
        eof = not data
        if self.tls is not None and data:
            got = self._decrypt(data)
            if got is None:
                return
            data, eof = got
            if not data and not eof:
                return  # only TLS records (a ticket, a partial record): nothing yet
        if self._fut is None or self._fut.done():
            # Bytes or an end while no request is out: the server closed (or broke) an
            # idle keep-alive connection. It is not used again.
            self.close()
            return
        self._last = now
        if data:
            self.got_bytes = True
            try:
                self._feed(t, data)
            except Exception as e:  # a broken response or a sink's ProtocolError
                self._fail(e)
                return
        if eof:
            self._on_eof()

    def _decrypt(self, raw: bytes) -> tuple[bytes, bool] | None:
        """The plaintext in ``raw`` and whether the server ended TLS; None on failure."""
        assert self.tls is not None and self._in is not None and self._out is not None
        self._in.write(raw)
        parts = []
        eof = False
        while True:
            try:
                part = self.tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                eof = True  # close_notify
                break
            except ssl.SSLError as e:
                self._fail(ReadError(f"TLS: {e}"))
                return None
            if not part:
                eof = True
                break
            parts.append(part)
        if self._out.pending and self.sock is not None:
            with contextlib.suppress(OSError):
                out = self._out.read()
                self._tx_bytes += self.sock.send(out)
        return b"".join(parts), eof

    def _on_eof(self) -> None:
        if self._fut is None or self._fut.done():
            self.close()
        elif self._state == _UNTIL_CLOSE:
            self._state = _END
            self._keepalive = False
            self._complete()
        elif not self.got_bytes:
            self._fail(RemoteProtocolError("server disconnected without sending a response"))
        else:
            self._fail(RemoteProtocolError("connection closed mid-response"))

    def _feed(self, t: int, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        pos = 0
        if self._state == _HEAD:
            rest = self._head(t, buf)
            if rest is None:
                return
            buf = rest
        out: list[bytes] = []
        n = len(buf)
        state = self._state
        while pos < n:
            if state in (_DATA, _LENGTH):
                take = min(self._left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    # a chunk is followed by CRLF; a Content-Length body just ends
                    state = _CRLF if state == _DATA else _END
            elif state == _SIZE:
                j = buf.find(b"\r\n", pos)
                if j < 0:
                    if n - pos > 1024:
                        raise BadResponse("chunk size line too long")
                    break
                line = buf[pos:j].split(b";", 1)[0].strip()
                try:
                    size = int(line, 16)
                except ValueError:
                    raise BadResponse(f"bad chunk size {line[:20]!r}") from None
                if size < 0:
                    raise BadResponse("negative chunk size")
                pos = j + 2
                if size:
                    self._left = size
                    state = _DATA
                else:
                    state = _TRAILER
            elif state == _CRLF:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise BadResponse("chunk not followed by CRLF")
                pos += 2
                state = _SIZE
            elif state == _TRAILER:
                j = buf.find(b"\r\n", pos)
                if j < 0:
                    break
                if j == pos:
                    pos += 2
                    state = _END
                    break
                pos = j + 2  # a trailer field: not used
            elif state == _UNTIL_CLOSE:
                out.append(buf[pos:] if pos else buf)
                pos = n
            else:
                break
        self._state = state
        if state == _END and pos < n:
            self._keepalive = False  # bytes after the end: the framing cannot be trusted
        self._buf = buf[pos:] if pos < n and state != _END else b""
        if out:
            self._body(t, out[0] if len(out) == 1 else b"".join(out))
        if state == _END:
            self._complete()

    def _head(self, t: int, buf: bytes) -> bytes | None:
        """Parse the response head; the bytes after it, or None until it is complete."""
        while True:
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                if len(buf) > MAX_HEAD:
                    raise BadResponse("response head too long")
                self._buf = buf
                return None
            lines = buf[:i].split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                raise BadResponse(f"not an HTTP/1.x response: {lines[0][:40]!r}")
            try:
                status = int(parts[1])
            except ValueError:
                raise BadResponse(f"bad status {parts[1][:10]!r}") from None
            if not 100 <= status <= 999 or len(parts[1]) != 3:
                raise BadResponse(f"bad status {parts[1][:10]!r}")
            if 100 <= status < 200 and status != 101:
                buf = buf[i + 4 :]  # an interim response (100 Continue, 103): skip it
                continue
            break
        chunked = False
        length = -1
        keepalive = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = value.strip().lower().endswith(b"chunked")
            elif name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise BadResponse("bad Content-Length") from None
            elif name == b"content-encoding":
                enc = value.strip().lower()
                if enc not in (b"", b"identity") and status == 200:
                    # tokmon asks for identity: a compressed stream cannot be timed by token
                    raise BadResponse(
                        f"unexpected Content-Encoding {enc[:20].decode('latin-1')!r} "
                        "(tokmon asks for identity)"
                    )
            elif name == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    keepalive = False
                elif v == b"keep-alive":
                    keepalive = True
        self._keepalive = keepalive
        if chunked:
            self._state = _SIZE
        elif length >= 0:
            self._left = length
            self._state = _LENGTH if length else _END
        else:
            self._state = _UNTIL_CLOSE
            self._keepalive = False
        self.t_head = t
        assert self._sink is not None
        self._sink.on_head(status, self.t_send or t, t)
        return buf[i + 4 :]

    def _body(self, t: int, data: bytes) -> None:
        if self._finished or self._sink is None:
            return  # after the stream's end: read on to the body's end, for keep-alive
        if self._sink.on_body(t, data):
            self._finished = True
            if self._state != _END:
                self._drain_h = self.loop.call_later(DRAIN_S, self._drain_expired)

    def _complete(self) -> None:
        self.reusable = self._keepalive and not self.closed
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    def _drain_expired(self) -> None:
        self._drain_h = None
        self._keepalive = False
        self.close()
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    def _idle_check(self) -> None:
        self._idle_h = None
        if self._fut is None or self._fut.done():
            return
        due = self._last + self._idle_ns
        now = perf_counter_ns()
        if now >= due:
            self._fail(ReadTimeout("idle timeout between chunks"))
        else:
            self._idle_h = self.loop.call_later((due - now) / 1e9, self._idle_check)

    def _fail(self, exc: BaseException) -> None:
        self.close()
        if self._fut is not None and not self._fut.done():
            self._fut.set_exception(exc)

    def close(self) -> None:
        self.reusable = False
        if self.closed:
            return
        self.closed = True
        if self.sock is not None:
            if self.fd >= 0:
                with contextlib.suppress(Exception):
                    self.loop.remove_reader(self.fd)
            self.sock.close()
            self.sock = None


class Pool:
    """Idle keep-alive connections per origin; a stream takes one and gives it back."""

    def __init__(self, connect_s: float, ssl_ctx: ssl.SSLContext | None = None) -> None:
        self.connect_s = connect_s
        self.ssl_ctx = ssl_ctx
        self.idle: dict[tuple[str, str, int], list[Connection]] = {}
        self.busy: set[Connection] = set()
        self._opening: set[tuple[str, str, int]] = set()

    async def acquire(self, target: Target, fresh: bool = False) -> tuple[Connection, int, int]:
        """A connected connection, and the connect's start and end (0, 0 when reused)."""
        free = None if fresh else self.idle.get(target.key)
        while free:
            c = free.pop()
            if not c.closed:
                self.busy.add(c)
                return c, 0, 0
        c = Connection(asyncio.get_running_loop(), target.key)
        self.busy.add(c)
        t0 = perf_counter_ns()
        try:
            await c.connect(target.host, target.port, self._ctx(target), self.connect_s)
        except BaseException:  # a timeout, a refusal, or the run stopping mid-connect
            self.busy.discard(c)
            c.close()
            raise
        return c, t0, perf_counter_ns()

    def wants_spare(self, target: Target) -> bool:
        """No idle connection to ``target`` and none being opened: ``spare`` would open one."""
        key = target.key
        return key not in self._opening and not any(not c.closed for c in self.idle.get(key, ()))

    async def spare(self, target: Target) -> None:
        """Open one connection ahead, left idle (call where ``wants_spare``): an open-loop
        sender's next request then leaves without a connect on its way (on a loaded 2-core
        machine a loopback connect took up to 18 ms, all of it send lag). A spare that
        cannot be opened is left to the request itself to fail, counted."""
        key = target.key
        self._opening.add(key)
        c = Connection(asyncio.get_running_loop(), key)
        try:
            await c.connect(target.host, target.port, self._ctx(target), self.connect_s)
        except Exception:
            c.close()
            return
        except BaseException:  # the run stopping
            c.close()
            raise
        finally:
            self._opening.discard(key)
        self.idle.setdefault(key, []).append(c)

    def _ctx(self, target: Target) -> ssl.SSLContext | None:
        if not target.tls:
            return None
        if self.ssl_ctx is None:
            self.ssl_ctx = ssl.create_default_context()
        return self.ssl_ctx

    def release(self, c: Connection) -> None:
        self.busy.discard(c)
        if c.reusable and not c.closed:
            self.idle.setdefault(c.key, []).append(c)
        else:
            c.close()

    def close(self) -> None:
        for free in self.idle.values():
            for c in free:
                c.close()
        self.idle.clear()
        for c in list(self.busy):
            c.close()
        self.busy.clear()
