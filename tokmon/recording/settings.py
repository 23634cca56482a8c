"""A recording's header as the fold's settings: what the live run folded with (its
``fold`` block), or, for a file from before that block, what its settings, SLO, cost and
target give. A file may say anything: every value is coerced and bounded."""

from __future__ import annotations

from typing import Any

from tokmon.model.data.coerce import number, text
from tokmon.model.env.environment import ServerEnv
from tokmon.model.env.redact import short_command
from tokmon.model.folding.fold import FoldSettings, mix_weights
from tokmon.model.statistics.stats import SLO_TARGET, Slo
from tokmon.model.workloads.defaults import DRIFT_ALERT_PCT_H, WINDOW_S


def _share(v: Any) -> float:
    """An SLO target from a file: a share in (0, 1], else the default (older files)."""
    x = number(v)
    return x if x is not None and 0 < x <= 1 else SLO_TARGET


def settings_from_header(h: dict[str, Any], arms: list[str]) -> FoldSettings:
    """A recording's settings. A file written before the header kept ``fold`` gives
    what it can (its settings, SLO, cost and target)."""
    f = h.get("fold")
    s = h.get("settings") or {}
    cost = h.get("cost") or {}
    target = h.get("target") or {}
    slo = h.get("slo") or {}
    if not isinstance(f, dict):
        mode = text(s.get("mode"), "concurrency")
        f = {
            "window_s": WINDOW_S,
            "assign": s.get("assign"),
            "mode": mode,
            "level": s.get("concurrency" if mode != "rate" else "rate"),
            "warmup": bool(s.get("warmup_requests") or s.get("warmup_s")),
            "kind_weights": mix_weights(s),
            "gpu_hour_price": cost.get("gpu_hour_price"),
            "gpus": cost.get("gpus"),
            "target": target.get("url"),
            "model": target.get("model"),
            "endpoint": target.get("endpoint"),
            "insecure": s.get("insecure"),
            "started_at": h.get("started_at"),
            "wall_start": h.get("wall_start"),
        }
        slo_d = slo
    else:
        slo_d = f.get("slo") if isinstance(f.get("slo"), dict) else slo
    kw: list[tuple[str, float]] = []
    raw = f.get("kind_weights")
    items = raw.items() if isinstance(raw, dict) else raw if isinstance(raw, list) else ()
    for item in items:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            k, w = item[0], number(item[1])
            if isinstance(k, str) and w is not None and w > 0:
                kw.append((k, w))
    gpus = number(f.get("gpus"))
    price = number(f.get("gpu_hour_price"))
    return FoldSettings(
        arms=tuple(arms),
        # (a file may say anything: bounds a live run's options have too)
        window_s=min(3600.0, max(0.1, number(f.get("window_s")) or WINDOW_S)),
        slo=Slo(
            **{
                k: number(v)
                for k, v in slo_d.items()
                if k in ("ttft_ms", "tpot_ms", "e2e_ms", "answer_ms")
            },  # fmt: skip
            target=_share(slo_d.get("target")),
        ),
        assign=text(f.get("assign"), "switch"),
        mode=text(f.get("mode"), "concurrency"),
        level=number(f.get("level")) or 0.0,
        warmup=bool(f.get("warmup")),
        kind_weights=tuple(kw) if len(kw) > 1 else None,
        gpu_hour_price=price,
        gpus=int(gpus) if gpus is not None and 1 <= gpus <= 100_000 else None,
        drift_alert_pct_h=min(
            1e6, max(1e-3, number(f.get("drift_alert_pct_h")) or DRIFT_ALERT_PCT_H)
        ),
        target=text(f.get("target")),
        model=text(f.get("model")),
        endpoint=text(f.get("endpoint"), "chat"),
        insecure=bool(f.get("insecure")),
        server_metrics=f.get("server_metrics") is not False,
        started_at=text(f.get("started_at")),
        wall_start=number(f.get("wall_start")) or 0.0,
        environment=_environment(f.get("environment"), h.get("servers")),
        arm_servers=_arm_servers(f.get("arm_servers"), h.get("settings")),
        scenario=text(f.get("scenario")),
        scenario_headline=text(f.get("scenario_headline")),
    )


def _arm_servers(listed: Any, settings: Any) -> tuple[tuple[str, str], ...]:
    """Each arm's server, as the file says (a file from before: its arms' URLs)."""
    out: list[tuple[str, str]] = []
    if isinstance(listed, list):
        for p in listed:
            if isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p):
                out.append((p[0], p[1]))
        return tuple(out)
    arms = settings.get("arms") if isinstance(settings, dict) else None
    for a in arms if isinstance(arms, list) else ():
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            serve = a.get("serve")
            if isinstance(serve, list) and serve and all(isinstance(x, str) for x in serve):
                out.append((a["name"], "serve: " + short_command(serve)))
            elif isinstance(a.get("url"), str) and a["url"]:
                out.append((a["name"], a["url"]))
    return tuple(out)


def _environment(listed: Any, servers: Any) -> tuple[ServerEnv, ...]:
    """The fold's environment records, else those in the header's servers (a file
    written before the fold kept them); at most one per arm's server."""
    if not isinstance(listed, list):
        listed = (
            [v.get("env") for v in servers.values() if isinstance(v, dict)]
            if isinstance(servers, dict)
            else []
        )
    envs = (ServerEnv.from_json(x) for x in listed[:256])
    return tuple(e for e in envs if e is not None)
