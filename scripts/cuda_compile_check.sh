#!/usr/bin/env bash
# CI's CUDA compile check (no GPU needed): configures build-cuda/ against a CUDA 13 build of
# torch (pip torch==2.14.1, installed once into a cached venv) with -DNUMPROBE_CUDA=ON, and builds
# the CUDA targets: libnumprobe with the fused kernel, the GPU tests, the GPU benchmark and
# moe_train with ProcessGroupNCCL, then reports the kernels' instructions per element from
# their SASS (scripts/sass_report.sh --check; NUMPROBE_SASS_REPORT=0 skips it).
# Nothing is run on a GPU. Idempotent; the venv (~5.4 GB) lives in $NUMPROBE_CUDA_VENV.
#
# The machine's CUDA toolkit (/usr/local/cuda, nvcc 13.0) has no cuBLAS/cuSPARSE headers, which
# ATen/cuda headers include: they come from the torch wheel's nvidia-* dependencies, added
# after the toolkit's own headers (-idirafter) so the toolkit's runtime headers win.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${CUDA_BUILD_DIR:-$ROOT/build-cuda}"
VENV="${NUMPROBE_CUDA_VENV:-$HOME/.cache/numprobe/venv-cuda}"
TORCH_VERSION="${NUMPROBE_CUDA_TORCH_VERSION:-2.14.1}"
CUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}"
log() { printf '\033[1m[cuda compile check]\033[0m %s\n' "$*" >&2; }

if [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  log "no nvcc under $CUDA_ROOT: skipping (set CUDA_ROOT)"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(not (torch.__version__.startswith('$TORCH_VERSION') and torch.version.cuda))" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION (CUDA build) into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"
# The nvidia-* wheels' headers sit beside torch's own package (as gpu_check.sh finds them).
SITE="$("$VENV/bin/python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)"
WHEEL_INCLUDE="$(ls -d "$SITE"/nvidia/cu*/include 2>/dev/null | head -1 || true)"
EXTRA_CXX="" EXTRA_CUDA=""
if [ -n "$WHEEL_INCLUDE" ] && [ ! -f "$CUDA_ROOT/include/cusparse.h" ]; then
  EXTRA_CXX="-idirafter $WHEEL_INCLUDE"
  EXTRA_CUDA="-Xcompiler=-idirafter,$WHEEL_INCLUDE"
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

log "configuring $BUILD against $TORCH_PREFIX"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DNUMPROBE_TORCH=ON -DNUMPROBE_CUDA=ON -DNUMPROBE_WERROR=ON \
  -DCMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT" \
  -DCUDAToolkit_ROOT="$CUDA_ROOT" -DCMAKE_CXX_FLAGS="$EXTRA_CXX" -DCMAKE_CUDA_FLAGS="$EXTRA_CUDA" \
  "${launcher[@]}" "$@" >/dev/null
log "building the CUDA targets (compile and link only)"
start=$(date +%s)
cmake --build "$BUILD" --parallel "$(nproc)" --target numprobe_probe cuda_tests stats_cuda_bench moe_train
log "done in $(( $(date +%s) - start )) s"
# The kernels' static instruction-issue bound from their SASS: fails when the listing cannot be
# parsed or a dtype's instructions per element exceed tests/cuda/sass_thresholds.txt.
if [ "${NUMPROBE_SASS_REPORT:-1}" != "0" ]; then
  log "SASS report (scripts/sass_report.sh --check)"
  CUDA_BUILD_DIR="$BUILD" CUDA_ROOT="$CUDA_ROOT" "$ROOT/scripts/sass_report.sh" --check --no-build
fi
