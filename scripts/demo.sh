#!/usr/bin/env bash
# Installs what kiln needs, builds it, and runs the main job on the default
# model (Gemma 3 270M Q4_K_M, the base pretrained model): a question answered
# by kiln-cli, streamed, with the timing lines at the end.
# For an interactive chat afterwards:
#   build/release/tools/kiln-cli -m "$KILN_GEMMA_MODEL" -cnv
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
build/release/tools/kiln-cli -m "$KILN_GEMMA_MODEL" -c 2048 -n 24 --temp 0 \
  -p $'Question: What is the capital of France?\nAnswer:'
