"""What a run ran on, as the server reports it: its configuration, the network path to it
and its security posture (pure: the answers are parsed here, fetched in
``tokmon.probes.env``).

Each engine keeps its configuration somewhere else (vLLM in info gauges on /metrics,
SGLang in /get_server_info, llama.cpp in /props, TGI in /info); each engine's module in
``tokmon/engines`` says where, so that a new engine or a renamed field is data, not code. What the
server did not say stays unknown (None), never guessed.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tokmon.engines import CONFIG_SOURCES, METRIC_MAPS
from tokmon.engines.base import dig

# The neutral configuration fields, in the order they are shown, with their labels.
CONFIG_FIELDS: tuple[tuple[str, str], ...] = (
    ("model", "model"),
    ("weights", "weights"),
    ("max_model_len", "context length"),
    ("dtype", "dtype"),
    ("quantization", "quantization"),
    ("kv_cache_dtype", "KV cache dtype"),
    ("block_size", "KV block size"),
    ("kv_cache_tokens", "KV cache tokens"),
    ("gpu_mem_util", "GPU memory fraction"),
    ("kv_cache_bytes", "KV cache memory (bytes)"),
    ("prefix_caching", "prefix caching"),
    ("tp_size", "tensor parallel"),
    ("slots", "max concurrent"),
    ("spec", "speculative decoding"),
    ("spec_method", "spec method"),
    ("spec_tokens", "spec tokens"),
)
_NAMES = frozenset(n for n, _ in CONFIG_FIELDS)


# Endpoints worth asking, besides /metrics and /v1/models (JSON answers).
JSON_ENDPOINTS = tuple(s.endpoint for s in CONFIG_SOURCES if s.endpoint.startswith("/"))

# Headers that say a proxy or gateway is between tokmon and the server; and ``server``
# values that name one.
PROXY_HEADERS = (
    "via",
    "forwarded",
    "x-forwarded-for",
    "x-envoy-upstream-service-time",
    "x-envoy-decorator-operation",
    "cf-ray",
    "x-amz-cf-id",
    "x-amzn-trace-id",
    "x-cache",
    "x-served-by",
    "x-kong-proxy-latency",
    "x-kong-upstream-latency",
    "x-litellm-call-id",
    "x-azure-ref",
)
PROXY_SERVERS = (
    "nginx",
    "envoy",
    "istio",
    "cloudflare",
    "traefik",
    "haproxy",
    "caddy",
    "openresty",
    "awselb",
    "kong",
    "apache",
    "litellm",
)

MAX_TEXT = 300  # a config value or header kept at most this long (a chat template is 10 KB)


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, (dict, list)):
        return None
    s = str(v)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + "…"


def _read(v: Any, kind: str) -> Any:
    """A value as its kind, or None where it is not one (never a guess)."""
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "null")):
        return None
    if kind in ("bool", "not"):
        if isinstance(v, bool):
            b = v
        elif isinstance(v, str) and v.strip().lower() in ("true", "false"):
            b = v.strip().lower() == "true"
        elif isinstance(v, (int, float)) and v in (0, 1):
            b = bool(v)
        else:
            return None
        return (not b) if kind == "not" else b
    if kind in ("int", "float"):
        if isinstance(v, bool):
            return None
        try:
            x = float(v)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(x) or abs(x) > 1e15:
            return None
        if kind == "int":
            return int(x) if x == int(x) else None
        return x
    return _text(v)


def parse_config(answers: dict[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
    """(engine, version, neutral fields) from the answers of one server, keyed by
    endpoint (``/props``, ``metrics:vllm:cache_config_info`` -> that gauge's labels...).

    Fields not in an answer are left out; the first source that has a field wins."""
    engine: str | None = None
    version: str | None = None
    out: dict[str, Any] = {}
    for src in CONFIG_SOURCES:
        ans = answers.get(src.endpoint)
        if not isinstance(ans, dict) or not ans:
            continue
        if src.endpoint.startswith("/") and not any(
            dig(ans, f.path) is not None for f in src.fields
        ):
            continue  # an endpoint of that name that is not this engine's
        engine = engine or src.engine
        if src.version and version is None:
            version = _text(dig(ans, src.version))
        for f in src.fields:
            v = _read(dig(ans, f.path), f.kind)
            if v is not None and f.name not in out:
                out[f.name] = v
    return engine, version, out


def first_model(models: Any) -> dict[str, Any]:
    """The first model of an OpenAI /v1/models answer ({} when there is none)."""
    data = models.get("data") if isinstance(models, dict) else None
    return data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}


def models_fields(models: Any) -> dict[str, Any]:
    """What an OpenAI /v1/models answer says of the first model (vLLM and the simulator
    give ``max_model_len``; ``root`` is the weights' path)."""
    first = first_model(models)
    out: dict[str, Any] = {}
    ctx = _read(first.get("max_model_len"), "int")
    if ctx is not None and ctx > 0:
        out["max_model_len"] = ctx
    # the name it is served under (what a request asks for), and the weights' path
    # where it differs (vLLM's ``root``): `tokmon env` named the path as the model
    served, root = _text(first.get("id")), _text(first.get("root"))
    if served or root:
        out["model"] = served or root
    if served and root and root != served:
        out["weights"] = root
    return out


def spec_from_metrics(engine: str | None, names: set[str], positions: int) -> dict[str, Any]:
    """An engine that registers its speculative-decoding series only when a method is
    configured (vLLM, with one per-position series per speculative token): on or off
    from their presence."""
    prefix = next((m.spec_prefix for m in METRIC_MAPS if m.engine == engine), "")
    if not prefix:
        return {}
    on = any(n.startswith(prefix) for n in names)
    out: dict[str, Any] = {"spec": on}
    if on and positions > 0:
        out["spec_tokens"] = positions
    return out


def settle_spec(cfg: dict[str, Any]) -> dict[str, Any]:
    """``spec`` from what the server said: a method or a number of speculative tokens
    means on; llama.cpp's ``speculative`` flag wins; the token count of an engine whose
    speculation is off is a default, not a setting, so it is dropped."""
    out = dict(cfg)
    if out.get("kv_cache_bytes"):
        # the KV cache given in bytes (vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE): the GPU
        # memory fraction is not what sizes it, and on a CPU build means nothing
        out.pop("gpu_mem_util", None)
    if "spec" not in out:
        if out.get("spec_method"):
            out["spec"] = True
        elif "spec_tokens" in out:
            out["spec"] = out["spec_tokens"] > 0
    if out.get("spec") is False:
        out.pop("spec_tokens", None)
        out.pop("spec_method", None)
    return {k: v for k, v in out.items() if k in _NAMES}


def config_of(
    answers: dict[str, Any],
    models: Any,
    metrics_engine: str | None = None,
    series: frozenset[str] | set[str] = frozenset(),
    positions: int = 0,
) -> tuple[str | None, str | None, dict[str, Any]]:
    """(engine, version, configuration) of one server from all it answered: the engine's
    own configuration first, then /v1/models, then what its metric names say."""
    engine, version, cfg = parse_config(answers)
    engine = metrics_engine or engine
    for k, v in models_fields(models).items():
        cfg.setdefault(k, v)
    for k, v in spec_from_metrics(engine, set(series), positions).items():
        cfg.setdefault(k, v)
    if first_model(models).get("owned_by") == "tokmon-sim":  # vLLM's metric names, not vLLM
        engine = "tokmon-sim"
    return engine, version, settle_spec(cfg)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def proxy_evidence(headers: dict[str, str]) -> tuple[str, ...]:
    """The response headers that say a proxy or gateway answered (``name: value``)."""
    h = {k.lower(): v for k, v in headers.items()}
    out = [f"{k}: {_text(h[k])}" for k in PROXY_HEADERS if k in h]
    out += [
        f"{k}: {_text(v)}"
        for k, v in sorted(h.items())
        if k.startswith("x-envoy-") and k not in PROXY_HEADERS
    ]
    srv = h.get("server", "").lower()
    if any(p in srv for p in PROXY_SERVERS):
        out.append(f"server: {_text(h['server'])}")
    return tuple(out)


@dataclass(frozen=True)
class NetPath:
    """The way to the server: TCP connect and TLS handshake times (the network alone),
    and the round trip of a tiny HTTP request on an open connection (the network plus
    the server's HTTP stack), each the median of a few tries with its minimum."""

    scheme: str = "http"
    host: str = ""
    loopback: bool = False
    connect_ms: float | None = None
    tls_ms: float | None = None
    rtt_ms: float | None = None
    rtt_min_ms: float | None = None
    rtt_path: str | None = None  # the request timed (/health, /v1/models)
    pings: int = 0
    server: str | None = None  # the ``server`` header, as sent
    proxy: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Security:
    """What the server allows, reported, never attacked: one unauthenticated
    ``GET /v1/models`` and one unauthenticated ``GET /metrics``."""

    tls_version: str | None = None
    cipher: str | None = None
    cert_verified: bool | None = None  # None: plain HTTP
    key_sent: bool = False  # tokmon sends credentials (a key, Basic auth, an auth header)
    api_status: int | None = None  # the unauthenticated /v1/models answer
    metrics_status: int | None = None  # the unauthenticated /metrics answer
    warnings: tuple[str, ...] = ()

    @property
    def api_open(self) -> bool | None:
        return None if self.api_status is None else self.api_status == 200

    @property
    def metrics_open(self) -> bool | None:
        if self.metrics_status is None or self.metrics_status == 404:
            return None
        return self.metrics_status == 200


def warnings_for(net: NetPath, sec: Security) -> tuple[str, ...]:
    out = []
    if net.scheme == "http" and not net.loopback and sec.key_sent:
        out.append(
            "plain HTTP to a remote host with credentials: the key crosses the network in clear"
        )
    if net.scheme == "https" and sec.cert_verified is False:
        out.append("TLS certificate not verified")
    if not net.loopback and sec.api_open:
        out.append("the API answers without a key on a non-loopback address")
    if not net.loopback and sec.metrics_open:
        out.append("/metrics is open to anyone who can reach the server")
    return tuple(out)


@dataclass(frozen=True)
class ServerEnv:
    """One server's environment record."""

    url: str
    engine: str | None = None
    version: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    net: NetPath = field(default_factory=NetPath)
    security: Security = field(default_factory=Security)
    sources: tuple[str, ...] = ()  # the endpoints that answered
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self, raw: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.url,
            "engine": self.engine,
            "version": self.version,
            "config": dict(self.config),
            "network": {k: getattr(self.net, k) for k in NetPath.__dataclass_fields__},
            "security": {
                **{k: getattr(self.security, k) for k in Security.__dataclass_fields__},
                "api_open": self.security.api_open,
                "metrics_open": self.security.metrics_open,
            },
            "sources": list(self.sources),
        }
        out["network"]["proxy"] = list(self.net.proxy)
        out["security"]["warnings"] = list(self.security.warnings)
        if raw:
            out["raw"] = self.raw
        return out

    @classmethod
    def from_json(cls, d: Any) -> ServerEnv | None:
        """From a recording's header: every value checked for its type (a crafted file
        gives None where a field is wrong, never an exception)."""
        if not isinstance(d, dict) or not isinstance(d.get("url"), str):
            return None
        net, sec, cfg = (_dict(d.get(k)) for k in ("network", "security", "config"))
        kinds = {
            "max_model_len": "int", "block_size": "int", "kv_cache_tokens": "int",
            "gpu_mem_util": "float", "prefix_caching": "bool", "tp_size": "int",
            "slots": "int", "spec": "bool", "spec_tokens": "int",
        }  # fmt: skip
        config = {}
        for name, _ in CONFIG_FIELDS:
            v = _read(cfg.get(name), kinds.get(name, "text"))
            if v is not None:
                config[name] = v

        def num(src: dict[str, Any], k: str) -> float | None:
            v = _read(src.get(k), "float")
            return v if v is None or v >= 0 else None

        def flag(src: dict[str, Any], k: str) -> bool | None:
            v = src.get(k)
            return v if isinstance(v, bool) else None

        def status(k: str) -> int | None:
            v = _read(sec.get(k), "int")
            return v if v is not None and 100 <= v <= 999 else None

        def texts(v: Any) -> tuple[str, ...]:
            return tuple(t for x in v[:32] if (t := _text(x))) if isinstance(v, list) else ()

        n = NetPath(
            scheme=_text(net.get("scheme")) or "http",
            host=_text(net.get("host")) or "",
            loopback=flag(net, "loopback") or False,
            connect_ms=num(net, "connect_ms"),
            tls_ms=num(net, "tls_ms"),
            rtt_ms=num(net, "rtt_ms"),
            rtt_min_ms=num(net, "rtt_min_ms"),
            rtt_path=_text(net.get("rtt_path")),
            pings=_read(net.get("pings"), "int") or 0,
            server=_text(net.get("server")),
            proxy=texts(net.get("proxy")),
            note=_text(net.get("note")),
        )
        s = Security(
            tls_version=_text(sec.get("tls_version")),
            cipher=_text(sec.get("cipher")),
            cert_verified=flag(sec, "cert_verified"),
            key_sent=flag(sec, "key_sent") or False,
            api_status=status("api_status"),
            metrics_status=status("metrics_status"),
            warnings=texts(sec.get("warnings")),
        )
        return cls(
            url=d["url"][:MAX_TEXT],
            engine=_text(d.get("engine")),
            version=_text(d.get("version")),
            config=config,
            net=n,
            security=s,
            sources=texts(d.get("sources")),
            raw=_dict(d.get("raw")),
        )


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f} ms"


def _show(v: Any) -> str:
    if v is None:
        return "not reported"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _status(code: int | None, open_word: str) -> str:
    if code is None:
        return "not asked"
    if code == 200:
        return f"{open_word} (HTTP 200)"
    if code in (401, 403):
        return f"refused without a key (HTTP {code})"
    if code == 404:
        return "absent (HTTP 404)"
    return f"HTTP {code}"


def rows(env: ServerEnv) -> list[tuple[str, str]]:
    """The record as labelled lines, the same for every output format and for the
    side-by-side comparison (text still to be sanitised by the writer)."""
    out = [
        ("engine", " ".join(x for x in (env.engine or "unknown", env.version) if x)),
    ]
    for name, label in CONFIG_FIELDS:
        if name in env.config:
            out.append((label, _show(env.config[name])))
    n, s = env.net, env.security
    out.append(("network", f"{n.scheme}://{n.host}" + (" (loopback)" if n.loopback else "")))
    out.append(("TCP connect", _ms(n.connect_ms)))
    if n.scheme == "https":
        out.append(("TLS handshake", _ms(n.tls_ms)))
    rtt = _ms(n.rtt_ms)
    if n.rtt_ms is not None:
        rtt += f" (min {_ms(n.rtt_min_ms)}, {n.pings} × GET {n.rtt_path})"
    out.append(("HTTP round trip", rtt))
    out.append(("server header", n.server or "none"))
    out.append(("proxy/gateway", "; ".join(n.proxy) if n.proxy else "none seen"))
    if n.scheme == "https":
        tls = " ".join(x for x in (s.tls_version, s.cipher) if x) or "?"
        verified = {True: "certificate verified", False: "certificate NOT verified"}
        ok = "?" if s.cert_verified is None else verified[s.cert_verified]
        out.append(("TLS", f"{tls} · {ok}"))
    else:
        out.append(("TLS", "none (plain HTTP)"))
    out.append(("credentials sent", "yes" if s.key_sent else "no"))
    out.append(("API without a key", _status(s.api_status, "answers")))
    out.append(("/metrics without a key", _status(s.metrics_status, "open")))
    for w in s.warnings:
        out.append(("WARNING", w))
    if n.note:
        out.append(("note", n.note))
    return out


# Lines whose difference between two runs is expected (timings vary run to run) are
# still shown side by side, but only a difference of configuration is flagged as one.
_MEASURED = frozenset({"TCP connect", "TLS handshake", "HTTP round trip"})


def differences(a: ServerEnv | None, b: ServerEnv | None) -> list[tuple[str, str, str, bool]]:
    """The two records side by side: (label, A, B, differs). Measured timings differ
    when they are more than 2× and 0.5 ms apart."""
    ra = dict(rows(a)) if a is not None else {}
    rb = dict(rows(b)) if b is not None else {}
    # in the order a record is shown (a field only one side reports keeps its place)
    first = {k: i for i, k in enumerate(["engine", *(label for _, label in CONFIG_FIELDS)])}
    seen = list(ra) + [k for k in rb if k not in ra]
    labels = sorted(seen, key=lambda k: (first.get(k, len(first)), seen.index(k)))
    out = []
    for k in labels:
        va, vb = ra.get(k, "—"), rb.get(k, "—")
        if k in _MEASURED:
            xa = getattr(a.net, _NET_FIELD[k]) if a is not None else None
            xb = getattr(b.net, _NET_FIELD[k]) if b is not None else None
            differs = (xa is None) != (xb is None) or (
                xa is not None
                and xb is not None
                and abs(xa - xb) > 0.5
                and max(xa, xb) > 2 * min(xa, xb)
            )
        else:
            differs = va != vb
        out.append((k, va, vb, differs))
    return out


_NET_FIELD = {"TCP connect": "connect_ms", "TLS handshake": "tls_ms", "HTTP round trip": "rtt_ms"}


def host_of(url: str) -> tuple[str, str]:
    """(scheme, host) of a URL, without its credentials or port."""
    try:
        u = urlsplit(url)
        return (u.scheme or "http").lower(), u.hostname or ""
    except ValueError:
        return "http", ""
