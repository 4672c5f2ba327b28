# The platform matrix of scripts/test.sh (sourced by it: uses its count and
# tally helpers and ROOT, LOG, JOBS, KILN_PY, KILN_TESTDATA_DIR):
#   - a portable (no -march=native) KILN_OPENMP=ON build: its thread-pool and
#     scheduler tests, and the kernel / op / GEMM tests once per x86 kernel set
#     (KILN_CPU=scalar|avx2|avx512, the sets this CPU runs); the engine's checks
#     against the reference model once per set (release build);
#   - Linux ARM64 (cross build, tests under qemu-aarch64): the kernel tests with
#     -cpu max (i8mm + dotprod variants), neoverse-n1 (dotprod) and cortex-a53
#     (plain NEON), the rest of the unit suite (ops, GEMM, thread pool,
#     scheduler, GGUF, types, quantization, tokenizer, templates, sampling) with
#     -cpu max, and greedy generation equal to x86-64's (scripts/cross-e2e.sh);
#   - Windows x86-64 (MinGW cross build, tests under wine): the whole unit suite and
#     kiln-cli.exe generating from paths with spaces and non-ASCII characters.
# Every stage prints its wall time. KILN_PLATFORMS (default "isa arm64 windows")
# picks stages.

# Adds a GoogleTest binary's own summary to the totals (the binaries run
# whole under emulation: one process, not one per test as ctest would).
tally_gtest() {  # tally_gtest LABEL LOGFILE EXIT_STATUS
  local p f
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$2" | grep -oE '[0-9]+' | head -1)
  # --gtest_brief prints one "[  FAILED  ] Name (N ms)" line per failed test and no failure summary.
  f=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$2")
  p=${p:-0}; f=${f:-0}
  if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed, or failed outside a test
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$f" -eq 0 ]; then echo "== $1: $p passed"; else echo "== $1: $p passed, $f FAILED (log: $2)"; grep -E '^\[  FAILED  \]|Failure|error' "$2" | head -10; fi
}
run_gtest() {  # run_gtest LABEL LOGNAME COMMAND...
  local label="$1" log="$LOG/$2.log" rc; shift 2
  "$@" --gtest_brief=1 >"$log" 2>&1; rc=$?
  # An emulator that fails before the test binary starts (wine's server
  # connection reset, seen once in CI) is not a test result: when the log has
  # no GoogleTest banner at all, run once more and keep both logs.
  if [ $rc -ne 0 ] && ! grep -q '^\[==========\]' "$log"; then
    echo "== $label: the emulator failed before the tests started (exit $rc); running once more"
    mv "$log" "$log.first"
    "$@" --gtest_brief=1 >"$log" 2>&1; rc=$?
  fi
  tally_gtest "$label" "$log" $rc
}
stage_done() { echo "== $1: $(( SECONDS - $2 )) s"; }
have_flags() { local f; for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }

PLATFORMS="${KILN_PLATFORMS:-isa arm64 windows}"
# The whole unit suite: every GoogleTest binary of tests/ (one per
# tests/test_*.cpp), test_cpu_kernels first: under qemu it runs once per CPU
# model, the rest once.
UNIT_TESTS=(test_cpu_kernels)
for f in "$ROOT"/tests/test_*.cpp; do
  t=$(basename "$f" .cpp); [ "$t" = test_cpu_kernels ] || UNIT_TESTS+=("$t")
done

# ---- KILN_OPENMP=ON, portable: every x86 kernel set ------------------------
# One extra native build serves two checks: KILN_OPENMP=ON builds and passes
# (the release build above is OFF), and a portable build (no -march=native)
# picks each kernel set at run time: the kernel, op, GEMM and fusion tests run once
# per set this CPU has, forced with KILN_CPU. The engine's checks against the
# numpy reference (synthetic models) run once per set on the release build.
if [[ " $PLATFORMS " == *" isa "* ]]; then
  t0=$SECONDS
  echo "== portable build with KILN_OPENMP=ON"
  targets=(); for t in test_thread_pool test_thread_placement test_scheduler test_cpu_kernels test_cpu_ops test_cpu_gemm test_cpu_fusion; do
    [ -f "tests/$t.cpp" ] && targets+=("$t"); done
  B=build/portable-openmp
  if cmake --preset portable -B "$B" -DKILN_OPENMP=ON -DKILN_BUILD_TOOLS=OFF -DKILN_BUILD_BENCH=OFF \
       -DPython3_EXECUTABLE="$KILN_PY" >"$LOG/openmp-configure.log" 2>&1 &&
     cmake --build "$B" -j "$JOBS" --target "${targets[@]}" >"$LOG/openmp-build.log" 2>&1; then
    count "portable KILN_OPENMP=ON build" 0
    stage_done "portable KILN_OPENMP=ON build" $t0; t1=$SECONDS
    for t in test_thread_pool test_thread_placement test_scheduler; do
      [ -x "$B/tests/$t" ] && run_gtest "KILN_OPENMP=ON $t" "openmp-$t" "$B/tests/$t"
    done
    isas=(scalar)
    have_flags avx2 fma f16c && isas+=(avx2)
    have_flags avx512f avx512bw avx512vl avx512dq && isas+=(avx512)
    for isa in "${isas[@]}"; do
      for t in test_cpu_kernels test_cpu_ops test_cpu_gemm test_cpu_fusion; do
        [ -x "$B/tests/$t" ] || continue
        KILN_CPU=$isa run_gtest "KILN_CPU=$isa KILN_OPENMP=ON $t" "isa-$isa-$t" "$B/tests/$t"
      done
      if [ -x build/release/tools/kiln-synth ]; then
        KILN_CPU=$isa KILN_BUILD_DIR="$ROOT/build/release" "$KILN_PY" -m pytest -q tests/python/test_engine.py \
          -k synthetic_models_match_reference >"$LOG/isa-$isa-engine.log" 2>&1
        tally_pytest "$LOG/isa-$isa-engine.log"
        echo "== KILN_CPU=$isa engine vs reference: $(grep -E '[0-9]+ (passed|failed)' "$LOG/isa-$isa-engine.log" | tail -1)"
      fi
    done
    stage_done "tests per kernel set (${isas[*]})" $t1
  else
    tail -30 "$LOG/openmp-configure.log" "$LOG/openmp-build.log"; count "portable KILN_OPENMP=ON build" 1
  fi
fi

# ---- Linux ARM64 under qemu ------------------------------------------------
if [[ " $PLATFORMS " == *" arm64 "* ]]; then
  t0=$SECONDS
  echo "== linux-arm64-cross build (g++-aarch64-linux-gnu)"
  B=build/linux-arm64-cross
  if bash scripts/cross-deps.sh aarch64-linux-gnu >"$LOG/arm64-deps.log" 2>&1 &&
     cmake --preset linux-arm64-cross -DPython3_EXECUTABLE="$KILN_PY" >"$LOG/arm64-configure.log" 2>&1 &&
     cmake --build "$B" -j "$JOBS" --target "${UNIT_TESTS[@]}" kiln-cli >"$LOG/arm64-build.log" 2>&1; then
    count "linux-arm64-cross build" 0
    stage_done "linux-arm64-cross build" $t0; t1=$SECONDS
    QEMU=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
    for cpu in max neoverse-n1 cortex-a53; do  # i8mm+dotprod, dotprod, plain NEON
      QEMU_CPU=$cpu run_gtest "arm64 (qemu -cpu $cpu) test_cpu_kernels" "arm64-$cpu-kernels" "${QEMU[@]}" "$B/tests/test_cpu_kernels"
    done
    for t in "${UNIT_TESTS[@]:1}"; do
      QEMU_CPU=max run_gtest "arm64 (qemu) $t" "arm64-$t" "${QEMU[@]}" "$B/tests/$t"
    done
    bash scripts/cross-e2e.sh arm64 build/release "$B" 2>&1 | tee "$LOG/arm64-e2e.log"
    count "arm64 greedy generation equals x86-64" "${PIPESTATUS[0]}"
    stage_done "linux-arm64 tests under qemu" $t1
  else
    tail -30 "$LOG/arm64-deps.log" "$LOG/arm64-configure.log" "$LOG/arm64-build.log"; count "linux-arm64-cross build" 1
  fi
  stage_done "linux-arm64 (all)" $t0
fi

# ---- Windows x86-64 (MinGW) under wine ---------------------------------------
if [[ " $PLATFORMS " == *" windows "* ]]; then
  t0=$SECONDS
  echo "== windows-x64-mingw-cross build (MinGW-w64)"
  B=build/windows-x64-mingw-cross
  # A wine prefix of the project's own (made on first use, ~20 s); UTF-8 locale
  # so that wine passes non-ASCII arguments through intact.
  export WINEPREFIX="${WINEPREFIX:-$HOME/.cache/kiln/wine}" WINEDEBUG=-all LC_ALL=C.UTF-8
  mkdir -p "$(dirname "$WINEPREFIX")"
  # Made once, before the build runs test discovery under wine from two jobs at a time.
  [ -d "$WINEPREFIX" ] || wineboot --init >"$LOG/wineboot.log" 2>&1
  # One persistent wineserver for the whole stage: by default it exits a few
  # seconds after its last client, and a test starting in that window gets
  # "recvmsg: Connection reset by peer" (a CI run failed on it).
  # It is started, and wine's own services brought up, before anything runs.
  wineserver -p >/dev/null 2>&1 || true
  timeout 120 wine cmd.exe /c exit >"$LOG/wine-warmup.log" 2>&1 || true
  if bash scripts/cross-deps.sh x86_64-w64-mingw32 >"$LOG/windows-deps.log" 2>&1 &&
     cmake --preset windows-x64-mingw-cross -DPython3_EXECUTABLE="$KILN_PY" >"$LOG/windows-configure.log" 2>&1 &&
     cmake --build "$B" -j "$JOBS" --target "${UNIT_TESTS[@]}" kiln-cli kiln-gguf kiln-tokenize >"$LOG/windows-build.log" 2>&1; then
    count "windows-x64-mingw-cross build" 0
    stage_done "windows-x64-mingw-cross build" $t0; t1=$SECONDS
    for t in "${UNIT_TESTS[@]}"; do
      run_gtest "windows (wine) $t" "windows-$t" wine "$B/tests/$t.exe"
    done
    bash scripts/cross-e2e.sh windows build/release "$B" 2>&1 | tee "$LOG/windows-e2e.log"
    count "windows kiln-cli.exe with non-ASCII paths" "${PIPESTATUS[0]}"
    stage_done "windows tests under wine" $t1
  else
    tail -30 "$LOG/windows-deps.log" "$LOG/windows-configure.log" "$LOG/windows-build.log"; count "windows-x64-mingw-cross build" 1
  fi
  wineserver -k >/dev/null 2>&1 || true
  unset LC_ALL
  stage_done "windows (all)" $t0
fi
