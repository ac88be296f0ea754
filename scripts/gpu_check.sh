#!/usr/bin/env bash
# One prepared GPU check for the device machine (H200, torch 2.11+cu130, nvcc 13.0, cmake,
# ninja; nothing can be fetched there). Builds numprobe with the CUDA path, runs the CUDA tests
# (GPU figures bitwise equal to the kernel's CPU reference, and to the CPU kernel's hash, across
# dtypes, shards, views, 0..512 MiB, NaN/Inf; no host sync while computing), then the benchmark,
# and copies everything to $OUT. Budget: < 8 minutes.
#
# The machine has no libgtest/libspdlog/libxxhash/libfmt dev packages: fetch them here first
# with `scripts/gpu_check.sh --fetch-deps` (Debian .debs unpacked into .deps/root, gitignored),
# then on the device: run(command="scripts/gpu_check.sh", carry=[".deps"], timeout_s=540).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps/root"
OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"

if [ "${1:-}" = "--fetch-deps" ]; then
  mkdir -p "$ROOT/.deps/debs" "$DEPS"
  (cd "$ROOT/.deps/debs" && apt-get download libgtest-dev googletest libspdlog-dev libspdlog1.10 \
     libfmt-dev libfmt9 libxxhash-dev libxxhash0 libcli11-dev libgloo-dev)
  for f in "$ROOT"/.deps/debs/*.deb; do dpkg -x "$f" "$DEPS"; done
  du -sh "$ROOT/.deps"
  exit 0
fi

exec > >(tee "$OUT/gpu_check.log") 2>&1
start=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - start )) s] $*"; }
PY="${PYTHON:-python3}"
TORCH_PREFIX="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
$PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null \
  || echo "gpu_check: WARNING: torch sees no CUDA device; this is a dry run: it builds, and every GPU part skips or fails"
date -u +"%Y-%m-%dT%H:%M:%SZ"

prefix_args=()
if [ -d "$DEPS" ]; then
  prefix_args=(-DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$DEPS/usr" -DCMAKE_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu"
               -DCMAKE_INCLUDE_PATH="$DEPS/usr/include")
  export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
else
  prefix_args=(-DCMAKE_PREFIX_PATH="$TORCH_PREFIX")
fi
SITE="$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WHEEL_INCLUDE="$(ls -d "$SITE"/nvidia/cu*/include 2>/dev/null | head -1 || true)"
# nvcc on the PATH, else the usual toolkit homes (an image may install it without putting it there).
NVCC="$(command -v nvcc || true)"
for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13.0 /opt/cuda; do
  [ -n "$NVCC" ] && break
  [ -n "$candidate" ] && [ -x "$candidate/bin/nvcc" ] && NVCC="$candidate/bin/nvcc"
done
[ -n "$NVCC" ] || { echo "gpu_check: no nvcc on the PATH, in CUDA_HOME or /usr/local/cuda"; exit 1; }
# The toolkit's home as nvcc itself reports it: `nvcc` on the PATH may be a wrapper script.
CUDA_ROOT="$("$NVCC" --dryrun -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)"
CUDA_ROOT="$(readlink -f "${CUDA_ROOT:-$(dirname "$NVCC")/..}")"
NVCC="$CUDA_ROOT/bin/nvcc"
echo "nvcc: $NVCC, toolkit $CUDA_ROOT ($("$NVCC" --version | tail -1))"
extra=()
if [ -n "$WHEEL_INCLUDE" ] && [ ! -f "$CUDA_ROOT/include/cusparse.h" ]; then
  extra=(-DCMAKE_CXX_FLAGS="-idirafter $WHEEL_INCLUDE" -DCMAKE_CUDA_FLAGS="-Xcompiler=-idirafter,$WHEEL_INCLUDE")
fi

stamp "configure"
configure() {
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNUMPROBE_TORCH=ON \
    -DPROBE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT" -DCUDAToolkit_ROOT="$CUDA_ROOT" \
    "${prefix_args[@]}" "${extra[@]}" "$@"
}
# Without the examples' dependencies (CLI11, gloo headers) the kernel checks still run.
configure || { stamp "configure with examples FAILED: again without them"; configure -DNUMPROBE_EXAMPLES=OFF; } \
  || { stamp "configure FAILED"; exit 1; }
stamp "build"
cmake --build "$ROOT/build-gpu" --parallel "$(nproc)" \
  --target numprobe_probe cuda_tests stats_cuda_bench torch_tests || { stamp "build FAILED"; exit 1; }
# The example separately: a failure to build it must not cost the kernel's results.
if grep -q '^NUMPROBE_EXAMPLES:BOOL=ON' "$ROOT/build-gpu/CMakeCache.txt"; then
  cmake --build "$ROOT/build-gpu" --parallel "$(nproc)" --target moe_train || stamp "moe_train build FAILED"
fi

stamp "CUDA tests"
"$ROOT/build-gpu/tests/cuda_tests" --gtest_output=xml:"$OUT/cuda_tests.xml"; tests_rc=$?
stamp "CPU/ATen tests in the same build"
"$ROOT/build-gpu/tests/torch_tests" --gtest_brief=1 --gtest_output=xml:"$OUT/torch_tests.xml"
stamp "benchmark"
timeout 240 "$ROOT/build-gpu/bench/cuda/stats_cuda_bench" --quick | tee "$OUT/bench.txt"
if [ -x "$ROOT/build-gpu/examples/moe_train" ]; then
  stamp "example on the GPU: probe overhead per step (one rank, NCCL), and a probed run's log"
  TORCHRUN="$(dirname "$(command -v "$PY")")/torchrun"
  [ -x "$TORCHRUN" ] || TORCHRUN="$(command -v torchrun)"
  # The example's own size (launch-bound on a GPU: the probe's one launch per record counts
  # against few, tiny kernels), then a GPU-sized configuration of the same model.
  GPU_SIZED="--dim 1024 --heads 16 --kv-lora-rank 256 --moe-hidden 1024 --shared-hidden 2048 --microbatch-size 8 --seq-len 128"
  SETUPS="single 1;single 1 $GPU_SIZED" MOE_FLAGS="--device cuda" BUILD_DIR="$ROOT/build-gpu" TORCHRUN="$TORCHRUN" \
    STEPS=41 timeout 300 "$ROOT/scripts/perf_examples.sh" | tee "$OUT/example_overhead.md"
  timeout 120 "$TORCHRUN" --standalone --nproc-per-node 1 --no-python "$ROOT/build-gpu/examples/moe_train" \
    --setup single --device cuda --steps 3 --out "$OUT/example_run" > "$OUT/example_run.txt" 2>&1 \
    || stamp "example run FAILED (see example_run.txt)"
else
  stamp "moe_train not built: probe overhead on the example model NOT measured"
fi
stamp "done (cuda_tests rc=$tests_rc)"
exit $tests_rc
