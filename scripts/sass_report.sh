#!/usr/bin/env bash
# The CUDA statistics kernels' instruction-issue bound, from their sm_90 SASS (no GPU needed):
# per dtype, the SASS instructions per element of the kernel's unrolled full-tile loop, their
# breakdown by instruction class, the hash-only baseline of the same loop shape beside them, and
# the H200 element and byte rate that instruction issue alone allows (docs/perf.md, "CUDA").
#
#   scripts/sass_report.sh [--check] [--no-build] [--clock-mhz MHZ]
#
# Objects: the stats_cuda_<family>.cu objects of build-cuda/ (CUDA_BUILD_DIR), the build that
# scripts/cuda_compile_check.sh makes; they are brought up to date first (a no-op when they
# are), and when build-cuda/ is not configured yet the compile check runs first. --no-build
# takes the objects as they are. The hash-only baseline (scripts/sass_hash_baseline.cu) is
# compiled into build-cuda/sass/ and recompiled only when its inputs change.
# Disassembly: cuobjdump and nvdisasm from the PyPI wheels nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm (the toolkit here has neither), installed once into a cached venv
# ($NUMPROBE_SASS_VENV, ~30 MB).
# --check: exit 1 when a dtype's instructions per element exceed tests/cuda/sass_thresholds.txt
# (or the region found is cheaper than the hash alone), exit 2 when a listing cannot be parsed.
# Without nvcc, or when the wheels cannot be installed, it says so and exits 0.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${CUDA_BUILD_DIR:-$ROOT/build-cuda}"
CUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}"
VENV="${NUMPROBE_SASS_VENV:-$HOME/.cache/numprobe/venv-sass}"
TOOLS_VERSION="${NUMPROBE_SASS_TOOLS_VERSION:-13.5.37}"  # pinned: the listing format is parsed
THRESHOLDS="${NUMPROBE_SASS_THRESHOLDS:-$ROOT/tests/cuda/sass_thresholds.txt}"
log() { printf '\033[1m[sass report]\033[0m %s\n' "$*" >&2; }

check="" build=1 clock_mhz=1980
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --no-build) build=0 ;;
    --clock-mhz) clock_mhz="$2"; shift ;;
    *) echo "usage: $0 [--check] [--no-build] [--clock-mhz MHZ]" >&2; exit 64 ;;
  esac
  shift
done

# The kernels, one object per dtype family: probe/src/cuda/stats_cuda_<family>.cu.
FAMILIES=()
for src in "$ROOT"/probe/src/cuda/stats_cuda_*.cu; do
  f="${src##*/stats_cuda_}" && FAMILIES+=("${f%.cu}")
done

NVCC="$CUDA_ROOT/bin/nvcc"
if [ ! -x "$NVCC" ]; then
  log "no nvcc under $CUDA_ROOT: skipping (set CUDA_ROOT)"
  exit 0
fi

# --- the disassemblers ---------------------------------------------------------------------
tools_ok() {
  "$VENV/bin/python" - "$TOOLS_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(not all(version(p) == sys.argv[1] for p in ("nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")))
EOF
}
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! tools_ok; then
  log "installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm $TOOLS_VERSION into $VENV"
  if ! "$VENV/bin/pip" install -q --disable-pip-version-check \
      "nvidia-cuda-cuobjdump==$TOOLS_VERSION" "nvidia-cuda-nvdisasm==$TOOLS_VERSION"; then
    log "SKIPPED: cannot install the disassembler wheels (no package index?): no report"
    exit 0
  fi
fi
TOOLS_BIN="$(ls -d "$VENV"/lib/python*/site-packages/nvidia/cu*/bin | head -1)"
CUOBJDUMP="$TOOLS_BIN/cuobjdump" NVDISASM="$TOOLS_BIN/nvdisasm"

# --- the kernels' objects --------------------------------------------------------------------
object_of() { echo "probe/CMakeFiles/numprobe_probe.dir/src/cuda/stats_cuda_$1.cu.o"; }
if [ "$build" = 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    log "$BUILD is not configured: running scripts/cuda_compile_check.sh first"
    CUDA_BUILD_DIR="$BUILD" NUMPROBE_SASS_REPORT=0 "$ROOT/scripts/cuda_compile_check.sh"
  fi
  targets=()
  for f in "${FAMILIES[@]}"; do targets+=("$(object_of "$f")"); done
  cmake --build "$BUILD" --target "${targets[@]}" >/dev/null
fi
for f in "${FAMILIES[@]}"; do
  [ -f "$BUILD/$(object_of "$f")" ] || { log "missing $BUILD/$(object_of "$f")"; exit 2; }
done

# --- the hash-only baseline, compiled only when its inputs change ------------------------------
SASS_DIR="$BUILD/sass"
mkdir -p "$SASS_DIR"
BASELINE_SRC="$ROOT/scripts/sass_hash_baseline.cu"
BASELINE_FLAGS=(-cubin -arch=sm_90 -std=c++20 --expt-relaxed-constexpr -I"$ROOT/probe/include" -I"$ROOT/probe/src")
NVCC_VERSION="$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 (\2)/p')"
key="$( { echo "$NVCC_VERSION ${BASELINE_FLAGS[*]}"
          cat "$BASELINE_SRC" "$ROOT/probe/src/cuda/stats_tile.h" "$ROOT/probe/src/core/stats_element.h" \
              "$ROOT/probe/include/probe/hash_spec.h"; } | sha256sum | cut -c1-16)"
BASELINE_CUBIN="$SASS_DIR/hash_baseline-$key.cubin"
if [ ! -f "$BASELINE_CUBIN" ]; then
  log "compiling the hash-only baseline (sm_90)"
  rm -f "$SASS_DIR"/hash_baseline-*
  "$NVCC" "${BASELINE_FLAGS[@]}" -o "$BASELINE_CUBIN.tmp" "$BASELINE_SRC"
  mv "$BASELINE_CUBIN.tmp" "$BASELINE_CUBIN"
fi

# --- disassemble: the sm_90 ELF out of each object, then nvdisasm (its labels mark basic blocks)
# for the kSingleRun=true kernels only (the report's subject; the others are 5x larger), by
# symbol index. A listing is kept beside its object's hash and reused while the object is.
listings=()
for f in "${FAMILIES[@]}"; do
  object="$BUILD/$(object_of "$f")"
  listing="$SASS_DIR/$f-$(sha256sum "$object" | cut -c1-16).sass"
  if [ ! -f "$listing" ]; then
    dir="$SASS_DIR/$f"
    rm -rf "$dir" "$SASS_DIR/$f"-*.sass && mkdir -p "$dir"
    (cd "$dir" && "$CUOBJDUMP" -xelf sm_90 "$object" >/dev/null)
    cubins=("$dir"/*.sm_90.cubin)
    [ -f "${cubins[0]}" ] || { log "no sm_90 code in $(object_of "$f")"; exit 2; }
    for c in "${cubins[@]}"; do
      kernels="$(readelf -sW "$c" | awk '$4 == "FUNC" && $NF ~ /tile_stats_kernel.*Lb1E/ {
                   sub(":", "", $1); printf "%s%s", sep, $1; sep = "," }')"
      [ -n "$kernels" ] && "$NVDISASM" -c -fun "$kernels" "$c"
    done >"$listing.tmp"
    mv "$listing.tmp" "$listing"
  fi
  listings+=("$f=$listing")
done
BASELINE_LISTING="${BASELINE_CUBIN%.cubin}.sass"
[ -f "$BASELINE_LISTING" ] || "$NVDISASM" -c "$BASELINE_CUBIN" >"$BASELINE_LISTING"

# --- the report ------------------------------------------------------------------------------
commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$ROOT" diff --quiet HEAD -- probe scripts 2>/dev/null || commit="$commit+changes"
tools="$("$NVDISASM" --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1/p')"
cat <<EOF
command: scripts/sass_report.sh${check:+ --check}
date: $(date -u '+%Y-%m-%d %H:%M UTC')   commit: $commit
compiled by: nvcc $NVCC_VERSION, sm_90 (objects of $(realpath --relative-to="$ROOT" "$BUILD" 2>/dev/null || echo "$BUILD"))   disassembled by: cuobjdump/nvdisasm $tools
bound: 132 SMs x 4 schedulers x 32 lanes x ${clock_mhz} MHz (H200 maximum SM clock) / instr per element; % HBM of 4.8 TB/s
EOF
args=(--source-root "$ROOT" --kernels "${listings[@]}" --baseline "$BASELINE_LISTING"
      --clock-mhz "$clock_mhz")
[ -n "$check" ] && args+=(--check "$THRESHOLDS")
python3 "$ROOT/scripts/sass_report.py" "${args[@]}"
