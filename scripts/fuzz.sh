#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (ASan + UBSan) for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]        default 60
#
# Configures and builds the `fuzz` preset (clang), builds a seed corpus from
# every *.gguf under the shared test data (prefixes only: whole models would
# make every mutation slow) plus a few small valid files made here, then runs
# fuzz_gguf. The corpus it grows is kept in build/fuzz/work/corpus, so later
# runs start where earlier ones stopped. Exits non-zero if the build fails or
# the fuzzer finds a crash, a sanitizer report, a timeout or an out-of-memory;
# the input that caused it is left in build/fuzz/work/artifacts/.
#
# Environment: KILN_TESTDATA_DIR (default ../shared/testdata), KILN_JOBS
# (build parallelism, default 2), KILN_FUZZ_MAX_LEN (default 16384).
set -euo pipefail
DURATION="${1:-60}"
[[ "$DURATION" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TESTDATA="${KILN_TESTDATA_DIR:-$ROOT/../shared/testdata}"
MAX_LEN="${KILN_FUZZ_MAX_LEN:-16384}"

echo "fuzz: building the fuzz preset"
LOG="$ROOT/build/fuzz-build.log"
mkdir -p "$ROOT/build"
if ! { cmake --preset fuzz && cmake --build --preset fuzz -j "${KILN_JOBS:-2}" --target fuzz_gguf; } >"$LOG" 2>&1; then
  tail -40 "$LOG"
  echo "fuzz: build failed (full log: $LOG)"
  exit 1
fi
FUZZER="$ROOT/build/fuzz/fuzz/fuzz_gguf"

WORK="$ROOT/build/fuzz/work"
SEEDS="$WORK/seeds"
CORPUS="$WORK/corpus"
ARTIFACTS="$WORK/artifacts"
rm -rf "$SEEDS" "$ARTIFACTS"
mkdir -p "$SEEDS" "$CORPUS" "$ARTIFACTS"

# Seeds from the real files: their headers hold every kind of metadata the
# ecosystem writes; prefixes of several lengths stop inside different fields.
n=0
if [ -d "$TESTDATA" ]; then
  while IFS= read -r -d '' f; do
    base="$(basename "$f" .gguf)"
    for len in 256 4096 "$MAX_LEN"; do
      head -c "$len" "$f" >"$SEEDS/$base.$len.gguf"
      n=$((n + 1))
    done
  done < <(find "$TESTDATA" -name '*.gguf' -print0)
else
  echo "fuzz: warning: no test data at $TESTDATA; seeding with generated files only"
fi

# Small complete files (with tensors, so the data-section checks are reached),
# written with the standard library only so no Python package is needed.
if command -v python3 >/dev/null; then
  python3 - "$SEEDS" <<'PY'
import struct, sys, os
out = sys.argv[1]

def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b

def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload

def arr(etype, items):
    return struct.pack("<IQ", etype, len(items)) + b"".join(items)

def gguf(version, kvs, tensors, align=32):
    h = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs)) + b"".join(kvs)
    data, infos = b"", b""
    for name, dims, ttype, payload in tensors:
        data += b"\0" * (-len(data) % align)
        infos += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", ttype, len(data))
        data += payload
    h += infos
    h += b"\0" * (-len(h) % align)
    return h + data + b"\0" * (-len(data) % align)

every = [
    kv("general.architecture", 8, s("llama")),
    kv("u8", 0, struct.pack("<B", 7)), kv("i8", 1, struct.pack("<b", -7)),
    kv("u16", 2, struct.pack("<H", 7)), kv("i16", 3, struct.pack("<h", -7)),
    kv("u32", 4, struct.pack("<I", 7)), kv("i32", 5, struct.pack("<i", -7)),
    kv("f32", 6, struct.pack("<f", 0.5)), kv("bool", 7, b"\1"),
    kv("u64", 10, struct.pack("<Q", 7)), kv("i64", 11, struct.pack("<q", -7)),
    kv("f64", 12, struct.pack("<d", 0.25)),
    kv("tokens", 9, arr(8, [s("<s>"), s("</s>"), s("hello")])),
    kv("scores", 9, arr(6, [struct.pack("<f", -1.0)] * 3)),
    kv("nested", 9, arr(9, [arr(4, [struct.pack("<I", 1)]), arr(8, [s("x")])])),
]
tensors = [
    ("token_embd.weight", [8, 2], 0, bytes(range(64))),
    ("blk.0.q4_0", [32, 2], 2, bytes(36)),
    ("blk.0.q4_K", [256], 12, bytes(144)),
    ("norm", [4], 1, bytes(8)),
]
with open(os.path.join(out, "valid-v3.gguf"), "wb") as f:
    f.write(gguf(3, every, tensors))
with open(os.path.join(out, "valid-v2-align64.gguf"), "wb") as f:
    f.write(gguf(2, [kv("general.alignment", 4, struct.pack("<I", 64))] + every[:4], tensors[:2], 64))
with open(os.path.join(out, "valid-empty.gguf"), "wb") as f:
    f.write(gguf(3, [], []))
PY
  n=$((n + 3))
fi
echo "fuzz: $n seeds, corpus $(find "$CORPUS" -type f | wc -l) files, running for ${DURATION}s"

# Tokens worth splicing in: the magic, key names with special meaning, and
# small numbers as they appear on disk.
DICT="$WORK/gguf.dict"
cat >"$DICT" <<'EOF'
"GGUF"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"\x00\x00\x00\x00"
"\x01\x00\x00\x00"
"\x02\x00\x00\x00"
"\x03\x00\x00\x00"
"\x04\x00\x00\x00"
"\x08\x00\x00\x00"
"\x09\x00\x00\x00"
"\x0c\x00\x00\x00"
"\x20\x00\x00\x00"
"\x40\x00\x00\x00"
"\xff\xff\xff\xff"
"\x00\x00\x00\x00\x00\x00\x00\x00"
"\x01\x00\x00\x00\x00\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\x7f"
"\xff\xff\xff\xff\xff\xff\xff\xff"
EOF

set +e
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  "$FUZZER" "$CORPUS" "$SEEDS" \
    -max_total_time="$DURATION" -max_len="$MAX_LEN" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -dict="$DICT" -artifact_prefix="$ARTIFACTS/" -print_final_stats=1
rc=$?
set -e

found=$(find "$ARTIFACTS" -type f | wc -l)
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  echo "fuzz: FAILED (exit $rc, $found artifact(s) in $ARTIFACTS)"
  find "$ARTIFACTS" -type f | head -5
  exit 1
fi
echo "fuzz: ok, no findings in ${DURATION}s (corpus: $(find "$CORPUS" -type f | wc -l) files)"
