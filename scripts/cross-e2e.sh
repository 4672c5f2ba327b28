#!/usr/bin/env bash
# End-to-end checks of the cross builds, run by scripts/test.sh:
#   cross-e2e.sh arm64   HOST_BUILD ARM64_BUILD
#     greedy generation on a small synthetic model under qemu-aarch64 -cpu max
#     (and again without dotprod/i8mm: -cpu cortex-a53) prints exactly the
#     text the x86-64 build prints: the same tokens, each shown with --special;
#   cross-e2e.sh windows HOST_BUILD MINGW_BUILD
#     kiln-cli.exe under wine generates from a model and a prompt file whose
#     paths contain spaces and non-ASCII characters, the same text as x86-64
#     Linux, kiln-gguf.exe reads the model through the Windows file mapping, and
#     kiln-tokenize.exe takes the same non-ASCII paths (ids equal to Linux's).
# The model: kiln-synth's tiny llama (llama-spm vocabulary), Q8_0 weights,
# F32 KV cache (-ctk f32 -ctv f32) so that no cache rounding enters.
set -euo pipefail
mode="${1:?usage: cross-e2e.sh arm64|windows HOST_BUILD CROSS_BUILD}"
host="${2:?host build folder}"; cross="${3:?cross build folder}"
vocab="${KILN_TESTDATA_DIR:?}/vocab/ggml-vocab-llama-spm.gguf"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

"$host/tools/kiln-synth" --arch llama --preset tiny --vocab "$vocab" --type q8_0 --seed 5 -o "$work/model.gguf" >/dev/null
gen=(-n 32 --temp 0 --ignore-eos --no-display-prompt --special -ctk f32 -ctv f32 -c 256 -t 1)
prompt="The quick brown fox jumps over the lazy dog. Once upon a time"
"$host/tools/kiln-cli" -m "$work/model.gguf" -p "$prompt" "${gen[@]}" >"$work/x86.txt" 2>"$work/x86.err" ||
  { cat "$work/x86.err"; echo "cross-e2e: the x86-64 run failed"; exit 1; }
[ -s "$work/x86.txt" ] || { echo "cross-e2e: the x86-64 run printed nothing"; exit 1; }

same() {  # same LABEL FILE: FILE holds the x86-64 text
  if cmp -s "$work/x86.txt" "$2"; then
    echo "cross-e2e: $1: $(wc -c <"$2") bytes of greedy output identical to x86-64"
  else
    echo "cross-e2e: $1 differs from x86-64:"; echo "  x86-64: $(head -c 300 "$work/x86.txt")"; echo "  $1: $(head -c 300 "$2")"
    return 1
  fi
}

case "$mode" in
  arm64)
    st=0
    for cpu in max cortex-a53; do
      QEMU_CPU="$cpu" qemu-aarch64 -L /usr/aarch64-linux-gnu "$cross/tools/kiln-cli" -m "$work/model.gguf" -p "$prompt" \
        "${gen[@]}" >"$work/arm-$cpu.txt" 2>"$work/arm-$cpu.err" || { cat "$work/arm-$cpu.err"; st=1; continue; }
      same "arm64 (qemu -cpu $cpu)" "$work/arm-$cpu.txt" || st=1
    done
    exit $st
    ;;
  windows)
    export WINEDEBUG=-all WINEPREFIX="${WINEPREFIX:-$HOME/.cache/kiln/wine}"
    dir="$work/mödels ünd spaces/日本語 dir"; mkdir -p "$dir"
    cp "$work/model.gguf" "$dir/tiny llama é.gguf"
    printf '%s' "$prompt" >"$dir/prompt file ü.txt"
    # wine maps the Unix root to drive Z:.
    winpath() { printf 'Z:%s' "${1//\//\\}"; }
    wine "$cross/tools/kiln-cli.exe" -m "$(winpath "$dir/tiny llama é.gguf")" -f "$(winpath "$dir/prompt file ü.txt")" \
      "${gen[@]}" >"$work/win.txt" 2>"$work/win.err" || { cat "$work/win.err"; echo "cross-e2e: kiln-cli.exe failed"; exit 1; }
    tr -d '\r' <"$work/win.txt" >"$work/win-lf.txt"
    st=0
    same "windows (wine)" "$work/win-lf.txt" || st=1
    wine "$cross/tools/kiln-gguf.exe" info "$(winpath "$dir/tiny llama é.gguf")" >"$work/info.txt" 2>&1 ||
      { cat "$work/info.txt"; st=1; }
    if grep -q "loaded by: *mmap" "$work/info.txt"; then
      echo "cross-e2e: windows: kiln-gguf.exe mapped the model (CreateFileMapping) through its non-ASCII path"
    else
      echo "cross-e2e: windows: kiln-gguf.exe did not map the model:"; head -5 "$work/info.txt"; st=1
    fi
    # kiln-tokenize.exe through the same paths: the same ids as the Linux build.
    "$host/tools/kiln-tokenize" -m "$work/model.gguf" -f "$dir/prompt file ü.txt" --ids >"$work/ids-x86.txt"
    if wine "$cross/tools/kiln-tokenize.exe" -m "$(winpath "$dir/tiny llama é.gguf")" -f "$(winpath "$dir/prompt file ü.txt")" --ids \
         >"$work/ids-win.txt" 2>&1 && tr -d '\r' <"$work/ids-win.txt" | cmp -s - "$work/ids-x86.txt"; then
      echo "cross-e2e: windows: kiln-tokenize.exe read both non-ASCII paths, ids as on Linux"
    else
      echo "cross-e2e: windows: kiln-tokenize.exe differs:"; head -3 "$work/ids-win.txt"; st=1
    fi
    exit $st
    ;;
  *) echo "cross-e2e: unknown mode $mode"; exit 2 ;;
esac
