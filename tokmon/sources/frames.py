"""The frames between a session and its attached views: JSON, data only.

A frame holds tokmon's typed snapshot and plain values. JSON has no tuples, sets,
non-string keys, non-finite floats or dataclasses, so each is a one-key object tagged
with ``~`` (``{"~t": [...]}``, ``{"~": "views.Cost", "v": {...}}``). Decoding builds
only the model's own dataclasses, named from a fixed list, with their declared fields:
a crafted frame can name nothing that runs (a pickle could name any callable).

JSON over msgpack: the standard library has it, a frame is read by any tool, and at
4 frames a second of ~30 kB the encoding is not the cost.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

# (every registered judgment, whose views a snapshot may hold: an attached view never
# imports the fold, and knew one judgment of six — a snapshot holding the client verdict
# could not be read, and the view went blank, its keys gone)
import tokmon.model.folding.judgments  # noqa: F401
from tokmon.gate import GateError, loads
from tokmon.model.contract import history, registry, views
from tokmon.model.data import commands, records
from tokmon.model.folding import snapshot
from tokmon.model.judge import alerts, capacity, crossover, quality, slo, storage, timesplit
from tokmon.model.statistics import stats

# the modules whose dataclasses a frame may hold (what a Snapshot is made of)
_MODULES = (
    snapshot, views, history, records, stats, timesplit, alerts, capacity, crossover, quality,
    storage, commands, slo,
)  # fmt: skip


def _registry() -> dict[str, type]:
    out = {}
    for m in _MODULES:
        short = m.__name__.rsplit(".", 1)[-1]
        for name, obj in vars(m).items():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == m.__name__
                and not name.startswith("_")
            ):
                out[f"{short}.{name}"] = obj
    return out


_TYPES = _registry()
_NAMES = {cls: name for name, cls in _TYPES.items()}


FRAME_LIMIT = 32 << 20  # a frame is ~30 kB; a session never sends one near this


def _registered() -> dict[str, type]:
    """The registered judgments' view types (``model/contract/registry.py``), read as a frame
    comes: a judgment registered after this module was imported is carried too."""
    return registry.view_types()


def _registered_names() -> dict[type, str]:
    return {cls: name for name, cls in _registered().items()}


class FrameError(ValueError):
    """A frame that is not what a session sends: refused whole."""


def _enc(o: Any) -> Any:
    if o is None or isinstance(o, (bool, int, str)):
        return o
    if isinstance(o, float):
        return o if math.isfinite(o) else {"~f": repr(o)}
    if isinstance(o, tuple):
        return {"~t": [_enc(x) for x in o]}
    if isinstance(o, list):
        return [_enc(x) for x in o]
    if isinstance(o, (set, frozenset)):
        return {"~s": [_enc(x) for x in o]}
    if isinstance(o, dict):
        if all(isinstance(k, str) for k in o):
            return {"~d": {k: _enc(v) for k, v in o.items()}}
        return {"~m": [[_enc(k), _enc(v)] for k, v in o.items()]}
    name = _NAMES.get(type(o)) or _registered_names().get(type(o))
    if name is not None:
        return {"~": name, "v": {f.name: _enc(getattr(o, f.name)) for f in dataclasses.fields(o)}}
    raise FrameError(f"a frame cannot hold {type(o).__name__}")


def encode(obj: Any) -> bytes:
    """``obj`` (the model's dataclasses and plain values) as one JSON frame."""
    return json.dumps(_enc(obj), separators=(",", ":"), allow_nan=False).encode()


def _key(k: Any) -> Any:
    if isinstance(k, list):
        raise FrameError("a list cannot be a key")
    return k


def _dec(o: Any) -> Any:
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    if isinstance(o, list):
        return [_dec(x) for x in o]
    if not isinstance(o, dict) or len(o) not in (1, 2):
        raise FrameError("not a frame")
    if "~t" in o:
        return tuple(_dec(x) for x in _list(o["~t"]))
    if "~s" in o:
        return frozenset(_key(_dec(x)) for x in _list(o["~s"]))
    if "~d" in o:
        d = o["~d"]
        if not isinstance(d, dict):
            raise FrameError("not a frame")
        return {k: _dec(v) for k, v in d.items()}
    if "~m" in o:
        out = {}
        for pair in _list(o["~m"]):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise FrameError("not a frame")
            out[_key(_dec(pair[0]))] = _dec(pair[1])
        return out
    if "~f" in o:
        if o["~f"] not in ("nan", "inf", "-inf"):
            raise FrameError("not a frame")
        return float(o["~f"])
    if "~" in o:
        return _build(o.get("~"), o.get("v"))
    raise FrameError("not a frame")


def _list(x: Any) -> list[Any]:
    if not isinstance(x, list):
        raise FrameError("not a frame")
    return x


def _build(name: Any, values: Any) -> Any:
    """One of the model's dataclasses, from its declared fields only (as a pickle
    would, without calling its ``__init__``: the values are what the session held)."""
    cls = (_TYPES.get(name) or _registered().get(name)) if isinstance(name, str) else None
    if cls is None or not isinstance(values, dict):
        raise FrameError(f"frame refused: {str(name)[:60]}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if not set(values) <= set(fields):
        raise FrameError(
            f"frame refused: {name} has no field {sorted(set(values) - set(fields))[0]}"
        )
    obj: Any = object.__new__(cls)
    for fname, f in fields.items():
        if fname in values:
            v = _dec(values[fname])
        elif f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            raise FrameError(f"frame refused: {name} lacks {fname}")
        object.__setattr__(obj, fname, v)
    return obj


def decode(data: bytes) -> Any:
    """A frame's value. Raises FrameError for anything a session does not send."""
    try:
        raw = loads(data, limit=FRAME_LIMIT, what="frame", parse_constant=_no_constant)
    except GateError as e:
        raise FrameError(f"not a frame ({e})") from None
    except ValueError as e:
        raise FrameError(f"not a frame ({type(e).__name__})") from None
    try:
        return _dec(raw)
    except RecursionError:
        raise FrameError("not a frame (nested too deep)") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
