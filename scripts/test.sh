#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test under ctest, then
# - builds the torch-free targets with AddressSanitizer and UndefinedBehaviorSanitizer in
#   build-asan/ and runs their tests (scripts/sanitize_check.sh; off with NUMPROBE_SANITIZE=0),
# - compiles every torch translation unit against the oldest supported LibTorch's headers (2.4;
#   scripts/torch_min_check.sh; off with NUMPROBE_TORCH_MIN_CHECK=0), and
# - (when nvcc is present and NUMPROBE_CUDA_CHECK != 0) compiles the CUDA path against a CUDA
#   LibTorch so it cannot rot without a GPU (scripts/cuda_compile_check.sh; nothing GPU-side runs).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
if [ "${NUMPROBE_SANITIZE:-1}" != "0" ]; then
  "$NUMPROBE_ROOT/scripts/sanitize_check.sh" "${SANITIZE_BUILD_DIR:-$NUMPROBE_ROOT/build-asan}"
fi
if [ "${NUMPROBE_TORCH_MIN_CHECK:-1}" != "0" ]; then
  BUILD_DIR="$BUILD_DIR" PYTHON="$VENV/bin/python" "$NUMPROBE_ROOT/scripts/torch_min_check.sh"
fi
if [ "${NUMPROBE_CUDA_CHECK:-1}" != "0" ]; then
  "$NUMPROBE_ROOT/scripts/cuda_compile_check.sh"
fi
