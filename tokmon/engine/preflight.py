"""Before a run: check that each target answers, and resolve the model.

Every failure here becomes one clear line naming the problem and the fix (exit 2).
"""

from __future__ import annotations

from typing import Any

import httpx

from tokmon.bodies import BodyTooLarge, fetch
from tokmon.gate import loads


class PreflightError(Exception):
    pass


def fetch_models(
    url: str, headers: dict[str, str], timeout: float = 8.0, insecure: bool = False
) -> dict[str, Any]:
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=timeout, verify=not insecure, trust_env=False) as c:
            r = fetch(c, "GET", base + "/models", headers=headers)
    except BodyTooLarge as e:
        raise PreflightError(f"{url}: {e}") from None
    except httpx.ConnectError as e:
        msg = str(e).lower()
        if "refused" in msg:
            raise PreflightError(
                f"{url}: connection refused — is the server running on that port?"
            ) from None
        if "name" in msg or "resolve" in msg or "nodename" in msg:
            raise PreflightError(f"{url}: host not found — check the host name in --url") from None
        raise PreflightError(f"{url}: cannot connect ({e}) — check --url") from None
    except httpx.TimeoutException:
        raise PreflightError(
            f"{url}: no answer within {timeout:g} s — is the address right and the server up?"
        ) from None
    except httpx.UnsupportedProtocol:
        raise PreflightError(f"{url}: not an http:// or https:// URL") from None
    except httpx.HTTPError as e:
        raise PreflightError(f"{url}: {type(e).__name__}: {e}") from None
    if r.status_code in (401, 403) and not any(k.lower() == "authorization" for k in headers):
        raise PreflightError(
            f"{url}: the server needs an API key (HTTP {r.status_code}) — set TOKMON_API_KEY or OPENAI_API_KEY, or give --api-key-file"
        )
    if r.status_code in (401, 403):
        raise PreflightError(
            f"{url}: the server refused the API key (HTTP {r.status_code}) — set OPENAI_API_KEY or TOKMON_API_KEY"
        )
    if r.status_code == 404:
        raise PreflightError(
            f"{url}: GET /models answered 404 — the base URL should end in the API prefix, e.g. http://host:8000/v1"
        )
    if r.status_code != 200:
        raise PreflightError(f"{url}: GET /models answered HTTP {r.status_code}")
    try:
        obj = loads(r.content)
    except ValueError:
        raise PreflightError(
            f"{url}: GET /models did not answer JSON — is this an OpenAI-compatible API?"
        ) from None
    if not isinstance(obj, dict):
        raise PreflightError(f"{url}: GET /models answered an unexpected shape")
    return obj


def model_ids(models: dict[str, Any]) -> list[str]:
    data = models.get("data")
    if not isinstance(data, list):
        return []
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]


def resolve_model(url: str, requested: str, models: dict[str, Any]) -> str:
    ids = model_ids(models)
    if not requested:
        if not ids:
            raise PreflightError(f"{url}: the server lists no models — give one with --model")
        return ids[0]
    if ids and requested not in ids:
        raise PreflightError(
            f"{url}: unknown model {requested!r} — the server has: {', '.join(ids[:8])}"
        )
    return requested
