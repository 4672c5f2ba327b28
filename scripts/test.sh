#!/usr/bin/env bash
# Installs everything, builds, and runs every test:
#   1. release build: C++ unit + conformance tests (ctest), Python reference tests (pytest),
#      kiln-gguf info on the default model and every shared test file;
#   2. debug build with AddressSanitizer + UndefinedBehaviorSanitizer: the C++ tests again;
#   3. the GGUF parser fuzzer for a bounded time (KILN_FUZZ_SECONDS, default 60);
#   4. the platform matrix (scripts/test-platforms.sh; KILN_SKIP_PLATFORMS=1 skips it):
#      the kernel/op/engine tests once per x86 kernel set (KILN_CPU=scalar|avx2|avx512),
#      a KILN_OPENMP=ON build, Linux ARM64 under qemu-aarch64, Windows x86-64 (MinGW) under wine.
# Ends with one line "kiln: N passed, N failed".
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=setup.sh
source scripts/setup.sh || { echo "test: setup failed"; exit 1; }
set +e  # setup.sh runs with -e; here every step is counted instead of stopping the run
JOBS="${KILN_JOBS:-$(nproc)}"
export KILN_TESTDATA_DIR="${KILN_TESTDATA_DIR:-$(cd "$ROOT/../shared/testdata" 2>/dev/null && pwd)}"
[ -d "$KILN_TESTDATA_DIR" ] || { echo "test: no test data at ../shared/testdata (set KILN_TESTDATA_DIR)"; exit 1; }

passed=0; failed=0
count() {  # count NAME STATUS
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "== $1: ok"; else failed=$((failed + 1)); echo "== $1: FAILED"; fi
}
# Adds the numbers of a ctest or pytest summary to the totals.
tally_ctest() {
  local line; line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$1" | tail -1)
  [ -n "$line" ] || { failed=$((failed + 1)); return; }
  local f t; f=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line"); t=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  passed=$((passed + t - f)); failed=$((failed + f))
}
tally_pytest() {
  local line; line=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error).* in [0-9.]+s" "$1" | tail -1)
  [ -n "$line" ] || { failed=$((failed + 1)); return; }
  local p f e
  p=$(grep -oE "[0-9]+ passed" <<<"$line" | grep -oE "[0-9]+" || echo 0)
  f=$(grep -oE "[0-9]+ failed" <<<"$line" | grep -oE "[0-9]+" || echo 0)
  e=$(grep -oE "[0-9]+ error" <<<"$line" | grep -oE "[0-9]+" || echo 0)
  passed=$((passed + p)); failed=$((failed + f + e))
}
LOG="$ROOT/build/logs"; mkdir -p "$LOG"

echo "== release build"
if cmake --preset release -DPython3_EXECUTABLE="$KILN_PY" >"$LOG/release-configure.log" 2>&1 && cmake --build --preset release -j "$JOBS" >"$LOG/release-build.log" 2>&1; then
  count "release build" 0
  grep -E "warning:" "$LOG/release-build.log" | sort -u | head -20
  ctest --preset release -j "$JOBS" 2>&1 | tee "$LOG/release-ctest.log" | grep -vE "^ +[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed"
  tally_ctest "$LOG/release-ctest.log"
  KILN_BUILD_DIR="$ROOT/build/release" "$KILN_PY" -m pytest -q tests/python 2>&1 | tee "$LOG/pytest.log"
  tally_pytest "$LOG/pytest.log"
  st=0
  for f in "$KILN_GEMMA_MODEL" "$KILN_TESTDATA_DIR"/*/*.gguf; do
    build/release/tools/kiln-gguf info "$f" >"$LOG/info-$(basename "$f").log" 2>&1 || { echo "kiln-gguf info failed on $f"; st=1; }
  done
  count "kiln-gguf info on the default model and every test file" $st
  head -40 "$LOG/info-$(basename "$KILN_GEMMA_MODEL").log"
else
  cat "$LOG/release-configure.log" "$LOG/release-build.log" | tail -50
  count "release build" 1
fi

if [ "${KILN_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== debug build (ASan + UBSan)"
  if cmake --preset debug -DPython3_EXECUTABLE="$KILN_PY" >"$LOG/debug-configure.log" 2>&1 && cmake --build --preset debug -j "$JOBS" >"$LOG/debug-build.log" 2>&1; then
    count "debug build" 0
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --preset debug -j "$JOBS" 2>&1 | tee "$LOG/debug-ctest.log" | grep -vE "^ +[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed"
    tally_ctest "$LOG/debug-ctest.log"
  else
    tail -50 "$LOG/debug-configure.log" "$LOG/debug-build.log"
    count "debug build" 1
  fi
fi

if [ "${KILN_FUZZ_SECONDS:-60}" != 0 ]; then
  echo "== fuzzing the GGUF reader for ${KILN_FUZZ_SECONDS:-60} s"
  bash scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-60}" >"$LOG/fuzz.log" 2>&1
  st=$?; tail -5 "$LOG/fuzz.log"
  count "fuzz_gguf" $st
fi

if [ "${KILN_SKIP_PLATFORMS:-0}" != 1 ]; then
  # shellcheck source=test-platforms.sh
  source scripts/test-platforms.sh
fi

echo "kiln: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
