"""What one kind of request looks like on the wire, prepared once from a URL and its
headers: the request head as bytes, checked (a URL the client cannot reach, a header it
cannot write, is a ValueError here — before any connection is opened, which is why the
run plan checks its targets with it)."""

from __future__ import annotations

from dataclasses import dataclass

from tokmon import __version__


@dataclass(frozen=True)
class Target:
    """Where one kind of request goes, prepared once: the request head is bytes."""

    key: tuple[str, str, int]
    host: str
    port: int
    tls: bool
    head: bytes  # request line and fixed headers, without Content-Length
    request_id: bool = True  # add x-request-id (unless the user sets their own)


def _check_header(k: str, v: str) -> None:
    if not k or any(c in k for c in " \t\r\n:\0") or any(c in v for c in "\r\n\0"):
        raise ValueError(f"invalid request header {k!r}: names and values must be one line")


def prepare(url: str, headers: dict[str, str]) -> Target:
    """A POST target for ``url`` with ``headers``; ValueError for what cannot be sent."""
    import httpx  # its URL type (IDNA, IPv6, escaping); imported here to keep h1 light

    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise ValueError(f"invalid URL {url!r}: {e}") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"invalid URL {url!r}: expected http:// or https:// and a host")
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    host = u.host
    host_header = f"[{host}]" if ":" in host else host
    if u.port is not None:
        host_header += f":{port}"
    lines = [
        f"POST {u.raw_path.decode('ascii')} HTTP/1.1",
        f"host: {host_header}",
        f"user-agent: tokmon/{__version__}",
        "accept-encoding: identity",
    ]
    given = {k.lower() for k in headers}
    for k, v in headers.items():
        _check_header(k, v)
        if k.lower() not in ("host", "content-length", "transfer-encoding", "connection"):
            lines.append(f"{k}: {v}")
    if "accept" not in given:
        lines.append("accept: text/event-stream")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1", "strict")
    return Target(
        key=(u.scheme, host, port),
        host=host,
        port=port,
        tls=tls,
        head=head,
        request_id="x-request-id" not in given,
    )


def request_bytes(target: Target, body: bytes, request_id: str = "") -> bytes:
    if request_id and target.request_id:
        return b"%sx-request-id: %s\r\ncontent-length: %d\r\n\r\n%s" % (
            target.head,
            request_id.encode("ascii"),
            len(body),
            body,
        )
    return b"%scontent-length: %d\r\n\r\n%s" % (target.head, len(body), body)
