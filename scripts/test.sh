#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test under ctest, then (when
# nvcc is present and NUMPROBE_CUDA_CHECK != 0) compiles the CUDA path against a CUDA LibTorch
# so it cannot rot without a GPU (scripts/cuda_compile_check.sh; nothing GPU-side runs).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
if [ "${NUMPROBE_CUDA_CHECK:-1}" != "0" ]; then
  "$NUMPROBE_ROOT/scripts/cuda_compile_check.sh"
fi
