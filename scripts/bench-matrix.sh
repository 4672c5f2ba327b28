#!/usr/bin/env bash
# The performance issue's benchmark matrix on the synthetic 1.1B llama (kiln-synth's 1b
# preset) in Q4_0, Q8_0, Q4_K_M and F16, with kiln-bench:
#   prompt processing pp128 / pp512 and generation tg32 at KV depth 0, generation at depth 4096,
#   batched decode of 1, 8 and 32 sequences (Q4_0), and the memory columns at n_ctx 4096.
# Models are written once to $KILN_BENCH_DIR (default ~/.cache/kiln-bench). Run it on an otherwise
# idle machine; it takes about 10 minutes on 2 cores.
#   scripts/bench-matrix.sh [build dir, default build/release] [threads, default 2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build/release}"
T="${2:-2}"
DIR="${KILN_BENCH_DIR:-$HOME/.cache/kiln-bench}"
VOCAB="${KILN_TESTDATA_DIR:-$ROOT/../shared/testdata}/vocab/ggml-vocab-llama-spm.gguf"
TOOLS="$BUILD/tools"
mkdir -p "$DIR"
for t in f16 q8_0 q4_0; do
    [ -f "$DIR/1b-$t.gguf" ] || "$TOOLS/kiln-synth" --preset 1b --type "$t" --vocab "$VOCAB" -o "$DIR/1b-$t.gguf"
done
[ -f "$DIR/1b-q4_k_m.gguf" ] || "$TOOLS/kiln-quantize" "$DIR/1b-f16.gguf" "$DIR/1b-q4_k_m.gguf" Q4_K_M "$T" >/dev/null
M="$DIR/1b-q4_0.gguf,$DIR/1b-q8_0.gguf,$DIR/1b-q4_k_m.gguf,$DIR/1b-f16.gguf"
echo "## pp128, pp512, tg32 at depth 0 (bandwidth and compute-peak probes in the same run)"
"$TOOLS/kiln-bench" -m "$M" -p 128,512 -n 32 -t "$T" -r 3 --bandwidth --peak
echo "## tg32 at depth 4096"
"$TOOLS/kiln-bench" -m "$M" -p 0 -n 32 -d 4096 -t "$T" -r 3 --bandwidth
echo "## batched decode (Q4_0), memory at n_ctx 4096"
"$TOOLS/kiln-bench" -m "$DIR/1b-q4_0.gguf" -p 0 -n 32 --parallel 1,8,32 -t "$T" -r 3
"$TOOLS/kiln-bench" -m "$DIR/1b-q4_0.gguf" -p 128 -n 32 -c 4096 -t "$T" -r 2 --mem
