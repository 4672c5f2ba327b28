#!/usr/bin/env bash
# Installs what kiln needs, builds it, and runs the main job on the default
# model (Gemma 3 270M Q4_K_M). Until the inference engine lands this is
# `kiln-gguf info` on the model.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
build/release/tools/kiln-gguf info "$KILN_GEMMA_MODEL"
