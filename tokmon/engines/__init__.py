"""The engines tokmon knows, one module each (``base.py`` says what an engine is): the
registry every reader takes its tables from — the ``/metrics`` probe, the environment
survey, the tokenizer calibration and the chunk reader. A new engine is one module and
one line here.

Ollama has no module: it has no Prometheus endpoint, and what its native API adds per
request is not in the OpenAI-compatible stream tokmon reads. The simulator speaks
vLLM's names (its series, ``/tokenize``, per-request ``metrics``).
"""

from tokmon.engines import llamacpp, lmdeploy, sglang, tgi, trtllm, vllm
from tokmon.engines.base import ConfigSource, Engine, EngineMap, TokenizeForm

# (the order is the order of detection: the first engine whose marker is found)
ENGINES: tuple[Engine, ...] = (
    vllm.ENGINE,
    sglang.ENGINE,
    llamacpp.ENGINE,
    tgi.ENGINE,
    trtllm.ENGINE,
    lmdeploy.ENGINE,
)

METRIC_MAPS: tuple[EngineMap, ...] = tuple(e.metrics for e in ENGINES if e.metrics)
CONFIG_SOURCES: tuple[ConfigSource, ...] = tuple(e.config for e in ENGINES if e.config)
# the tokenizer endpoints, each once, in the order they are tried
TOKENIZE_FORMS: tuple[TokenizeForm, ...] = tuple(
    dict.fromkeys(f for e in ENGINES for f in e.tokenize)
)
# the engines whose final chunk carries per-request figures, in the order they are read
RESPONSE_READERS: tuple[Engine, ...] = tuple(e for e in ENGINES if e.spec or e.timing)


def metrics_map(name: str) -> EngineMap | None:
    """The ``/metrics`` names of the engine called ``name``."""
    return next((e.metrics for e in ENGINES if e.name == name and e.metrics), None)
