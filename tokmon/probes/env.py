"""Ask a server what it runs on, time the way to it, and note what it lets anyone do.

Everything here is read-only and small: a few GETs of configuration endpoints, a few
TCP connects and tiny requests on one connection, and two requests without credentials
(``/v1/models`` and ``/metrics``) -- reported, never more. A server that does not answer
one of them simply leaves its fields unknown; nothing here fails a run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import statistics
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tokmon.bodies import fetch
from tokmon.gate import loads
from tokmon.model.env.environment import (
    JSON_ENDPOINTS,
    MAX_TEXT,
    NetPath,
    Security,
    ServerEnv,
    config_of,
    is_loopback,
    proxy_evidence,
    warnings_for,
)
from tokmon.model.env.redact import redact_tree
from tokmon.probes.base import Sampler
from tokmon.probes.server import MAX_BODY, MetricsTooLarge, detect, known_lines

MAX_JSON = 1 << 20  # a configuration answer is read up to this size
# The kernel's receive stamp (Linux; the probes do not import the engine, which keeps
# its own, fuller stamping in h1.py).
SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None
)
_TIMESPEC = struct.Struct("@qq")
ANC_SIZE = 256


def root_of(url: str) -> str:
    """The server's root next to the API prefix (``http://h:8000/v1`` -> ``http://h:8000``)."""
    root = url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def bounded(obj: Any, depth: int = 0) -> Any:
    """A JSON answer kept small enough for a recording's header: long strings (a chat
    template) cut, long lists and deep nesting dropped."""
    if depth > 6:
        return None
    if isinstance(obj, dict):
        return {str(k)[:80]: bounded(v, depth + 1) for k, v in list(obj.items())[:200]}
    if isinstance(obj, list):
        return [bounded(v, depth + 1) for v in obj[:32]]
    if isinstance(obj, str) and len(obj) > MAX_TEXT:
        return obj[:MAX_TEXT] + "…"
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def _get(c: httpx.Client, url: str, headers: dict[str, str], limit: int) -> httpx.Response | None:
    """A GET whose body is read up to ``limit`` bytes (None: no answer, or too big)."""
    try:
        return fetch(c, "GET", url, headers=headers, limit=limit)
    except (httpx.HTTPError, ValueError):
        return None


def _json(r: httpx.Response | None) -> Any:
    if r is None or r.status_code != 200:
        return None
    try:
        return loads(r.content)
    except ValueError:
        return None


def metrics_config(text: str) -> tuple[str | None, dict[str, dict[str, str]], set[str], int]:
    """(engine, info gauges' labels by series, every series name, speculative positions)
    from a /metrics body; only known engines' series are parsed (as the probe does)."""
    info: dict[str, dict[str, str]] = {}
    names: set[str] = set()
    positions: set[str] = set()
    flat: dict[str, float] = {}
    for fam in text_string_to_metric_families(known_lines(text)):
        for s in fam.samples:
            names.add(s.name)
            flat.setdefault(s.name, 0.0)
            if s.name.endswith("_info") and s.name not in info:
                info[s.name] = {k: str(v)[:MAX_TEXT] for k, v in list(s.labels.items())[:200]}
            if "per_pos" in s.name and "position" in s.labels:
                positions.add(s.labels["position"])
    e = detect(flat)
    return (e.engine if e else None), info, names, len(positions)


def _addr(url: str) -> tuple[str, str, int, str]:
    u = urlsplit(url)
    scheme = (u.scheme or "http").lower()
    host = u.hostname or ""
    port = u.port or (443 if scheme == "https" else 80)
    return scheme, host, port, u.path.rstrip("/")


def _tls_context(insecure: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _read_response(
    sock: socket.socket | ssl.SSLSocket, deadline: float, buf: bytes = b""
) -> tuple[int, bytes]:
    """Read one HTTP/1.1 response (Content-Length or chunked), ``buf`` its first bytes:
    (status, head)."""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        part = sock.recv(65536)
        if not part:
            raise ConnectionError("closed")
        buf += part
        if len(buf) > 1 << 20:
            raise ConnectionError("headers too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdr = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "chunked" in hdr.get("transfer-encoding", "").lower():
        while not rest.endswith(b"0\r\n\r\n"):
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            part = sock.recv(65536)
            if not part:
                break
            rest += part
            if len(rest) > MAX_JSON:
                raise ConnectionError("answer too large")
    else:
        need = int(hdr.get("content-length", "0") or 0)
        if need > MAX_JSON:
            raise ConnectionError("answer too large")
        while len(rest) < need:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            part = sock.recv(65536)
            if not part:
                break
            rest += part
    return status, head


class Pinger:
    """Times the way to one server: fresh TCP connects (the network alone, and the TLS
    handshake where used) and tiny GETs on one open connection (network plus the
    server's HTTP stack). Blocking sockets and perf_counter: no event loop in between."""

    def __init__(
        self, url: str, headers: dict[str, str], insecure: bool = False, timeout: float = 3.0
    ) -> None:
        self.scheme, self.host, self.port, self.prefix = _addr(url)
        self.headers = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        self.insecure = insecure
        self.timeout = timeout
        self.path: str | None = None  # the GET that answers 200, once found
        self.tls: tuple[str | None, str | None] = (None, None)
        self._sock: socket.socket | ssl.SSLSocket | None = None
        # a server (or a proxy) that closes every connection after its answer: each
        # ping is sent on a new one, its connect timed apart and not in the round trip
        self.reopen = False

    def connect(self) -> tuple[socket.socket | ssl.SSLSocket, float, float | None]:
        """A new connection: (socket, connect ms, TLS handshake ms or None)."""
        t0 = time.perf_counter_ns()
        raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        t1 = time.perf_counter_ns()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if SO_TIMESTAMPNS is not None:
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if self.scheme != "https":
            return raw, (t1 - t0) / 1e6, None
        try:
            s = _tls_context(self.insecure).wrap_socket(raw, server_hostname=self.host)
        except (OSError, ssl.SSLError):
            raw.close()
            raise
        t2 = time.perf_counter_ns()
        cipher = s.cipher()
        self.tls = (s.version(), cipher[0] if cipher else None)
        return s, (t1 - t0) / 1e6, (t2 - t1) / 1e6

    def _request(self, path: str) -> bytes:
        lines = [f"GET {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Accept: */*"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def ping(self) -> float | None:
        """One tiny GET on the open connection: ms from the request's send to the first
        byte of the answer (None: no answer; the connection is opened again next time)."""
        try:
            if self._sock is None:
                self._sock = self.connect()[0]
            if self.path is None:
                self.path = self._find_path(self._sock)
                if self.reopen:  # (the server closed the one the path was found on)
                    self.close()
                    self._sock = self.connect()[0]
            if self.path is None:
                return None
            req = self._request(self.path)
            deadline = time.monotonic() + self.timeout
            sock = self._sock
            sock.settimeout(self.timeout)
            if isinstance(sock, ssl.SSLSocket):  # no kernel stamp through TLS: when read
                t0 = time.perf_counter_ns()
                sock.sendall(req)
                status, _ = _read_response(sock, deadline)
                t1 = time.perf_counter_ns()
            else:
                # The answer's arrival as the kernel stamped it (SO_TIMESTAMPNS, the wall
                # clock): another thread of this busy process holding the interpreter
                # when it arrives cannot lengthen the round trip.
                t0 = time.time_ns()
                sock.sendall(req)
                first, anc, _, _ = sock.recvmsg(65536, ANC_SIZE)
                t1 = time.time_ns()
                for level, kind, raw in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                        sec, nsec = _TIMESPEC.unpack_from(raw)
                        if t0 <= sec * 1_000_000_000 + nsec <= t1:
                            t1 = sec * 1_000_000_000 + nsec
                if not first:
                    raise ConnectionError("closed")
                status, _ = _read_response(sock, deadline, first)
            if status != 200:
                raise ConnectionError(f"HTTP {status}")
            if self.reopen:
                self.close()  # (closed by the server: the next ping opens another)
            return (t1 - t0) / 1e6
        except (OSError, ValueError, IndexError, ssl.SSLError, ConnectionError):
            self.close()
            return None

    def _find_path(self, sock: socket.socket | ssl.SSLSocket) -> str | None:
        """/health where the server has it (it costs the server nothing), else the
        model list under the API prefix; on a server that closes the connection after
        either, the first that answers (``reopen``: each ping on a new connection)."""
        for path in ("/health", (self.prefix or "") + "/models"):
            sock.sendall(self._request(path))
            status, head = _read_response(sock, time.monotonic() + self.timeout)
            if status == 200:
                self.reopen = b"connection: close" in head.lower()
                return path
        return None

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def time_path(p: Pinger, connects: int = 5, pings: int = 7) -> dict[str, Any]:
    """Medians (and the minimum round trip) of a few connects and pings."""
    conn, tls = [], []
    note = None
    for _ in range(connects):
        try:
            s, c, t = p.connect()
            s.close()
            conn.append(c)
            if t is not None:
                tls.append(t)
        except (OSError, ssl.SSLError) as e:
            note = f"connect failed: {type(e).__name__}"
            break
    p.ping()  # the first one opens the connection and finds the path
    rtts = [x for x in (p.ping() for _ in range(pings)) if x is not None]
    p.close()
    return {
        "connect_ms": statistics.median(conn) if conn else None,
        "tls_ms": statistics.median(tls) if tls else None,
        "rtt_ms": statistics.median(rtts) if rtts else None,
        "rtt_min_ms": min(rtts) if rtts else None,
        "rtt_path": p.path,
        "pings": len(rtts),
        "note": note,
    }


def survey(
    url: str,
    headers: dict[str, str],
    insecure: bool = False,
    timeout: float = 5.0,
    pings: int = 7,
) -> ServerEnv:
    """One server's environment record (never raises: what cannot be read stays unknown)."""
    root = root_of(url)
    scheme, host, _, _ = _addr(url)
    key_sent = any(k.lower() in ("authorization", "api-key", "x-api-key") for k in headers)
    answers: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    published: list[str] = []  # secrets a server hands out (SGLang: server_args.api_key)
    sources: list[str] = []
    models_hdr: dict[str, str] = {}
    api_status = metrics_status = None
    engine = None
    names: set[str] = set()
    positions = 0
    with httpx.Client(timeout=timeout, verify=not insecure, trust_env=False) as c:
        r = _get(c, url.rstrip("/") + "/models", headers, MAX_JSON)
        models = _json(r)
        if r is not None:
            models_hdr = dict(r.headers)
        if isinstance(models, dict):
            answers["/v1/models"] = models
            raw["/v1/models"] = bounded(models)
            sources.append("/v1/models")
        ver = _json(_get(c, root + "/version", headers, MAX_JSON))
        if isinstance(ver, dict):
            raw["/version"] = bounded(ver)
            sources.append("/version")
        m = _get(c, root + "/metrics", headers, MAX_BODY)
        if m is not None and m.status_code == 200:
            try:
                engine, info, names, positions = metrics_config(m.text)
            except (MetricsTooLarge, ValueError):
                info = {}
            for name, labels in info.items():
                answers[f"metrics:{name}"] = labels
                raw[f"metrics:{name}"] = labels
            sources.append("/metrics")
        for ep in JSON_ENDPOINTS:
            obj = _json(_get(c, root + ep, headers, MAX_JSON))
            if isinstance(obj, dict):
                answers[ep] = obj
                found: list[str] = []
                raw[ep] = bounded(redact_tree(obj, found))
                published += [f"{ep} {p}" for p in found]
                sources.append(ep)
        # Without credentials: does the server answer anyone? (Where tokmon sends none,
        # the answers above already say.)
        if key_sent:
            bare = {k: v for k, v in headers.items() if k.lower() not in _AUTH}
            r0 = _get(c, url.rstrip("/") + "/models", bare, MAX_JSON)
            api_status = r0.status_code if r0 is not None else None
            m0 = _get(c, root + "/metrics", bare, MAX_BODY)
            metrics_status = m0.status_code if m0 is not None else None
        else:
            api_status = r.status_code if r is not None else None
            metrics_status = m.status_code if m is not None else None
    engine, version, cfg = config_of(answers, models, engine, names, positions)
    if isinstance(ver, dict) and ver.get("version") and not version:
        version = str(ver["version"])[:MAX_TEXT]
    p = Pinger(url, headers, insecure, timeout=min(timeout, 3.0))
    timing = time_path(p, pings=pings)
    net = NetPath(
        scheme=scheme,
        host=host,
        loopback=is_loopback(host),
        server=models_hdr.get("server", "")[:MAX_TEXT] or None,
        proxy=proxy_evidence(models_hdr),
        **timing,
    )
    sec = Security(
        tls_version=p.tls[0],
        cipher=p.tls[1],
        cert_verified=None if scheme != "https" else not insecure,
        key_sent=key_sent,
        api_status=api_status,
        metrics_status=metrics_status,
    )
    warn = warnings_for(net, sec) + tuple(
        f"the server publishes a secret ({p}) to whoever asks: redacted here, change it"
        for p in published[:5]
    )
    sec = dataclasses.replace(sec, warnings=warn)
    return ServerEnv(
        url=url,
        engine=engine,
        version=version,
        config=cfg,
        net=net,
        security=sec,
        sources=tuple(sources),
        raw=raw,
    )


_AUTH = frozenset({"authorization", "api-key", "x-api-key"})


PINGS_PER_SAMPLE = 3


class NetProbe(Sampler):
    """The round trip to a server during the run: one TCP connect and the least of three
    tiny GETs per sample, from the parent process (never from an engine), so the figure shows when
    the network -- not the server -- is what moved."""

    name = "net"

    def __init__(
        self,
        url: str,
        arms: tuple[str, ...],
        headers: dict[str, str],
        insecure: bool = False,
        interval: float = 5.0,
    ) -> None:
        super().__init__(interval)
        self.url = url
        self.arms = arms
        self.pinger = Pinger(url, headers, insecure)

    def ident(self) -> dict[str, Any]:
        return {"url": self.url, "arms": list(self.arms)}

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            s, c, _ = self.pinger.connect()
            s.close()
            out["net_connect_ms"] = round(c, 4)
        except (OSError, ssl.SSLError):
            out["net_note"] = "connect failed"
        # the least of three round trips: a moment the client itself was busy (its
        # thread woken late on a loaded machine) is not the network's time
        rtts = [x for x in (self.pinger.ping() for _ in range(PINGS_PER_SAMPLE)) if x is not None]
        if rtts:
            out["net_rtt_ms"] = round(min(rtts), 4)
        return out

    def close(self) -> None:
        self.pinger.close()
