"""One adapter per engine: each engine tokmon knows is one module of ``tokmon/engines``,
and every reader — the ``/metrics`` probe, the environment survey, the calibration and
the chunk reader — takes its tables from the one registry."""

from __future__ import annotations

import importlib
import json
import pkgutil

import tokmon.engines as engines
from tokmon.engine import chunks
from tokmon.engines.base import Engine, EngineMap, SpecPath, TimingPath
from tokmon.model.env.environment import parse_config
from tokmon.probes.server import detect


def test_each_engine_is_one_module_and_the_registry_holds_each_once():
    mods = [m.name for m in pkgutil.iter_modules(engines.__path__) if m.name != "base"]
    held = [importlib.import_module(f"tokmon.engines.{m}").ENGINE for m in mods]
    assert sorted(e.name for e in held) == sorted(e.name for e in engines.ENGINES)
    assert len({e.name for e in engines.ENGINES}) == len(engines.ENGINES)
    for e in engines.ENGINES:  # an engine's tables say its own name
        assert e.metrics is None or e.metrics.engine == e.name, e
        assert e.config is None or e.config.engine == e.name, e
    assert len({m.marker for m in engines.METRIC_MAPS}) == len(engines.METRIC_MAPS)


def test_an_engine_added_to_the_registry_is_read_everywhere(monkeypatch):
    """A made-up engine, one Engine and nothing else: its /metrics series are detected,
    its per-request timing and speculative counts read from its final chunk."""
    new = Engine(
        "newengine",
        metrics=EngineMap("newengine", "newengine_", running=("newengine_running",)),
        timing=TimingPath(("ne",), queue="wait_ms", prefill="fill_ms", itl="tok_ms"),
        spec=SpecPath(("ne", "spec"), draft=("d",), accepted=("a",)),
        source="response:newengine",
    )
    monkeypatch.setattr(engines, "METRIC_MAPS", (*engines.METRIC_MAPS, new.metrics))
    monkeypatch.setattr("tokmon.probes.server.METRIC_MAPS", engines.METRIC_MAPS)
    monkeypatch.setattr(chunks, "RESPONSE_READERS", (*engines.RESPONSE_READERS, new))
    found = detect({"newengine_running": 3.0})
    assert found is not None and found.engine == "newengine"
    final = {"choices": [], "ne": {"wait_ms": 4.0, "fill_ms": 30.5, "tok_ms": 9.25,
                                   "spec": {"d": 12, "a": 9}}}  # fmt: skip
    info = chunks.interpret(json.dumps(final).encode())
    assert info.timing == chunks.ServerTiming(4.0, 30.5, 9.25)
    assert info.spec is not None and (info.spec.draft_tokens, info.spec.accepted_tokens) == (
        12, 9)  # fmt: skip
    assert info.spec.source == "response:newengine"
    # an impossible figure from it is flagged and named by its path, never a part
    bad = {"choices": [], "ne": {"wait_ms": -1.0}}
    info = chunks.interpret(json.dumps(bad).encode())
    assert info.timing is None and "ne.wait_ms" in info.bad


def test_a_zero_under_an_engines_first_name_is_a_zero():
    """SGLang's counts under either of two names: a 0 under the first is read as 0 (it was
    read as absent, the second name's None)."""
    final = {"choices": [], "sglext": {"spec_tokens_details": {
        "num_draft_tokens": 0, "num_accepted_tokens": 0, "accept_length": 1.0}}}  # fmt: skip
    info = chunks.interpret(json.dumps(final).encode())
    assert info.spec is not None and info.spec.draft_tokens == 0
    assert info.spec.accepted_tokens == 0


def test_the_survey_reads_each_engines_configuration_from_its_module():
    engine, version, cfg = parse_config(
        {
            "/props": {
                "total_slots": 4,
                "build_info": "b6000",
                "default_generation_settings": {"n_ctx": 2048},
            }
        }  # fmt: skip
    )
    assert (engine, version) == ("llama.cpp", "b6000")
    assert cfg == {"slots": 4, "max_model_len": 2048}
