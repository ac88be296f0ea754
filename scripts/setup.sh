#!/usr/bin/env bash
# Shared set-up for scripts/test.sh and scripts/demo.sh: installs what is missing (idempotent),
# then configures and builds numprobe in build/. Source it: it exports TORCH_PREFIX and BUILD_DIR.
set -euo pipefail

NUMPROBE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$NUMPROBE_ROOT/build}"
VENV="${NUMPROBE_VENV:-$NUMPROBE_ROOT/.venv}"
TORCH_VERSION="${NUMPROBE_TORCH_VERSION:-2.13.0}"
TRANSFORMERS_VERSION=5.23.0 ACCELERATE_VERSION=1.15.0 LIGHTNING_VERSION=2.6.6
APT_PACKAGES=(build-essential cmake ninja-build ccache python3-venv libxxhash-dev libspdlog-dev
  libgtest-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev time
  libgloo-dev  # gloo headers for c10d's ProcessGroupGloo.hpp (the torch wheel lacks them)
  libjs-chart.js node-d3  # plotting libraries diff_logs --html embeds at build time
  chromium fonts-dejavu-core)  # headless browser (and a font) the --html tests render with

log() { printf '\033[1m[numprobe setup]\033[0m %s\n' "$*" >&2; }

ensure_system_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Older releases of the trainers, each in a directory of its own beside the venv's torch
# (scripts/releases/<name>.txt, pinned, --no-deps): a test or the bug corpus puts one first on
# PYTHONPATH. `ensure_releases NAME...` installs those named (none named: every list). The
# directory keeps a copy of the list it was installed from; a changed list reinstalls it.
export NUMPROBE_RELEASES="${NUMPROBE_RELEASES:-$HOME/.cache/numprobe/releases}"
ensure_releases() {
  local list name dir lists=()
  if [ $# -eq 0 ]; then
    lists=("$NUMPROBE_ROOT"/scripts/releases/*.txt)
  else
    for name in "$@"; do lists+=("$NUMPROBE_ROOT/scripts/releases/$name.txt"); done
  fi
  for list in "${lists[@]}"; do
    [ -f "$list" ] || { echo "numprobe setup: no release list $list" >&2; return 1; }
    name="$(basename "$list" .txt)"
    dir="$NUMPROBE_RELEASES/$name"
    cmp -s "$list" "$dir/.installed-from.txt" 2>/dev/null && continue
    log "installing $name (scripts/releases/$name.txt) into $dir"
    rm -rf "$dir"
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --target "$dir" -r "$list"
    cp "$list" "$dir/.installed-from.txt"
  done
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c "import torch, xxhash, numpy, pytest, scikit_build_core, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    log "installing torch==$TORCH_VERSION, xxhash, numpy, pytest, scikit-build-core into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" xxhash numpy pytest \
      "scikit-build-core>=0.10"
  fi
  # torchtitan as it ships (pure Python, --no-deps: its requirements pin another torch), with
  # what its model and parallelize code import (tests/python/test_torchtitan.py).
  if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys, spmd_types, torchdata, tyro, triton; sys.exit(m.version('torchtitan') != '0.3.0')" 2>/dev/null; then
    log "installing torchtitan==0.3.0 (--no-deps), spmd_types, torchdata, tyro, triton into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps torchtitan==0.3.0
    "$VENV/bin/pip" install -q --disable-pip-version-check spmd_types==0.2.3 torchdata tyro triton
  fi
  # The trainers numprobe's integrations attach to, as they ship (tests/python/test_trainers.py);
  # their requirements are met by the torch above, which pip leaves as it is.
  if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(any(m.version(p) != v for p, v in (('transformers', '$TRANSFORMERS_VERSION'), ('accelerate', '$ACCELERATE_VERSION'), ('lightning', '$LIGHTNING_VERSION'))))" 2>/dev/null; then
    log "installing transformers==$TRANSFORMERS_VERSION, accelerate==$ACCELERATE_VERSION, lightning==$LIGHTNING_VERSION into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" \
      "transformers==$TRANSFORMERS_VERSION" "accelerate==$ACCELERATE_VERSION" "lightning==$LIGHTNING_VERSION"
  fi
  TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  export TORCH_PREFIX
  export PATH="$VENV/bin:$PATH"  # torchrun, and python with xxhash for the cross-check test
}

# ccache keys on paths relative to the checkout and not on the working directory, so that
# another clone of the same sources (CI's fresh one) hits the cache a first build filled. The
# price: an object taken from the cache names the build directory of the clone that compiled it
# in its debug information (a debugger looks for sources there; gdb's set substitute-path
# points it at this checkout).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$NUMPROBE_ROOT}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

configure_and_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  log "configuring $BUILD_DIR"
  cmake -S "$NUMPROBE_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DNUMPROBE_TORCH=ON -DNUMPROBE_WERROR=ON \
    -DNUMPROBE_PYTHON="$VENV/bin/python" "${launcher[@]}" "$@" >/dev/null
  log "building (LibTorch translation units take a while on 2 cores)"
  cmake --build "$BUILD_DIR" --parallel "$(nproc)"
}

# The Python package numprobe, built from this checkout into the venv (pyproject.toml), with
# the flags of build/ so that ccache hands it the LibTorch layer build/ compiled; its build tree
# is kept in build-python/ so that a second install rebuilds only what changed.
install_python_package() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  log "installing the Python package numprobe into $VENV (build-python/)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps \
    -Cbuild-dir="$NUMPROBE_ROOT/build-python" -Ccmake.build-type=RelWithDebInfo \
    -Ccmake.define.NUMPROBE_WERROR=ON "${launcher[@]}" "$NUMPROBE_ROOT"
}

ensure_system_packages
ensure_venv
export BUILD_DIR NUMPROBE_ROOT
