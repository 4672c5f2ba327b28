#!/usr/bin/env bash
# Builds the libraries kiln links, for a cross target, into
# build/cross-deps/TRIPLE (or $KILN_CROSS_DEPS_DIR), where the toolchain file
# cmake/toolchains/TRIPLE.cmake finds them:
#   PCRE2 (8-bit, static, with JIT) from Debian's source package;
#   GoogleTest from Debian's googletest package (its sources in /usr/src);
#   copies of the header-only nlohmann/json and CLI11 with their CMake files.
# Usage: scripts/cross-deps.sh aarch64-linux-gnu | x86_64-w64-mingw32
# Safe to run again: a finished prefix (its .done stamp) is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRIPLE="${1:?usage: cross-deps.sh TRIPLE}"
TOOLCHAIN="$ROOT/cmake/toolchains/$TRIPLE.cmake"
[ -f "$TOOLCHAIN" ] || { echo "cross-deps: no toolchain file $TOOLCHAIN"; exit 1; }
PREFIX="${KILN_CROSS_DEPS_DIR:-$ROOT/build/cross-deps/$TRIPLE}"
STAMP="$PREFIX/.done-v1"
[ -f "$STAMP" ] && exit 0
JOBS="${KILN_JOBS:-$(nproc)}"
WORK="$ROOT/build/cross-deps/.work-$TRIPLE"
rm -rf "$WORK"; mkdir -p "$WORK" "$PREFIX"

# PCRE2: the source of the Debian package the host build uses (same version).
SRC_CACHE="$ROOT/build/cross-deps/.src"
mkdir -p "$SRC_CACHE"
if ! ls "$SRC_CACHE"/pcre2_*.orig.tar.* >/dev/null 2>&1; then
  (cd "$SRC_CACHE" && apt-get source --download-only pcre2 >/dev/null 2>&1) ||
    { echo "cross-deps: 'apt-get source pcre2' failed (scripts/setup.sh enables Debian's deb-src lists)"; exit 1; }
fi
tar -xf "$(ls "$SRC_CACHE"/pcre2_*.orig.tar.* | head -1)" -C "$WORK"
PCRE2_SRC="$(ls -d "$WORK"/pcre2-*/ | head -1)"
cmake -S "$PCRE2_SRC" -B "$WORK/pcre2-build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DBUILD_SHARED_LIBS=OFF -DBUILD_STATIC_LIBS=ON -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_BUILD_PCRE2_16=OFF \
  -DPCRE2_BUILD_PCRE2_32=OFF -DPCRE2_SUPPORT_JIT=ON -DPCRE2_SUPPORT_UNICODE=ON -DPCRE2_BUILD_PCRE2GREP=OFF \
  -DPCRE2_BUILD_TESTS=OFF -DPCRE2_STATIC_PIC=ON >"$WORK/pcre2.log" 2>&1 &&
  cmake --build "$WORK/pcre2-build" -j "$JOBS" >>"$WORK/pcre2.log" 2>&1 &&
  cmake --install "$WORK/pcre2-build" >>"$WORK/pcre2.log" 2>&1 ||
  { tail -30 "$WORK/pcre2.log"; echo "cross-deps: PCRE2 build failed for $TRIPLE"; exit 1; }
# PCRE2's .pc file does not say that a static library needs PCRE2_STATIC on
# Windows (it selects the dllimport-free declarations).
sed -i 's/^Cflags: \(.*\)$/Cflags: \1 -DPCRE2_STATIC/' "$PREFIX/lib/pkgconfig/libpcre2-8.pc"

# GoogleTest (and GoogleMock) from Debian's sources.
cmake -S /usr/src/googletest -B "$WORK/gtest-build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$WORK/gtest.log" 2>&1 &&
  cmake --build "$WORK/gtest-build" -j "$JOBS" >>"$WORK/gtest.log" 2>&1 &&
  cmake --install "$WORK/gtest-build" >>"$WORK/gtest.log" 2>&1 ||
  { tail -30 "$WORK/gtest.log"; echo "cross-deps: GoogleTest build failed for $TRIPLE"; exit 1; }

# Header-only libraries: copies, so that the host's /usr/include (with its
# x86-64 glibc headers) never reaches the cross compiler's include path.
mkdir -p "$PREFIX/include" "$PREFIX/share/cmake"
cp -r /usr/include/nlohmann /usr/include/CLI "$PREFIX/include/"
cp -r /usr/share/cmake/nlohmann_json "$PREFIX/share/cmake/"
rm -rf "$WORK"
touch "$STAMP"
echo "cross-deps: $TRIPLE ready in $PREFIX"
