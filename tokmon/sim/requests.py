"""Synthetic request tables: the requests of a long run in seconds, for the benches and
tests of long runs (bounded memory, a day-long recording)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tokmon.model.data.table import COLUMNS, RequestTable


def synthetic_batch(
    vocab: dict[str, list[Any]], rid0: int, n: int, t0: int, rng: np.random.Generator, seg: int
) -> RequestTable:
    """``n`` ok requests 5 ms apart from ``t0`` (200 req/s), of arm a in even segments
    and b in odd ones (b decodes 4/3 as fast), half code and half chat, built as columns
    (a million in a second: ``RequestTable.from_lines`` would take a minute)."""
    tb = RequestTable.empty(vocab)
    cols: dict[str, np.ndarray] = {}
    for name, (_short, typ, _default) in COLUMNS.items():
        if typ in ("f", "n"):
            cols[name] = np.full(n, np.nan)
        elif typ == "t":
            cols[name] = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        else:
            cols[name] = np.zeros(n, dtype=tb.cols[name].dtype)
    arm = "a" if seg % 2 == 0 else "b"
    for field, value in (("arm", arm), ("outcome", "ok"), ("kind", "code"), ("kind", "chat")):
        if value not in vocab[field]:
            vocab[field].append(value)
    rid = np.arange(rid0, rid0 + n)
    ttft = rng.lognormal(np.log(80), 0.5, n)
    tpot = rng.lognormal(np.log(12 if arm == "a" else 9), 0.2, n)
    ts = t0 + (np.arange(n) * (1e9 / 200)).astype(np.int64)
    cols.update(
        rid=rid,
        arm=np.full(n, vocab["arm"].index(arm), dtype=np.int32),
        outcome=np.full(n, vocab["outcome"].index("ok"), dtype=np.int32),
        kind=np.where(
            rid % 2 == 0, vocab["kind"].index("code"), vocab["kind"].index("chat")
        ).astype(np.int32),
        segment=np.full(n, seg, dtype=np.int32),
        t_sched=ts,
        t_send=ts,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=ttft + 63 * tpot,
        decode_tps=1000 / tpot,
        output_tokens=np.full(n, 64, dtype=np.int32),
        chunks=np.full(n, 64, dtype=np.int32),
        send_lag_ms=np.full(n, 0.1),
        prompt_tokens=np.full(n, 100.0),
    )
    cols["t_end"] = ts + (cols["e2e_ms"] * 1e6).astype(np.int64)
    return RequestTable(cols, vocab, None)
