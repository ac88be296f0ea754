#!/usr/bin/env bash
# numprobe's on-GPU check: runs the CUDA path, which `scripts/test.sh --all` only compiles.
# Needs a CUDA GPU, a CUDA build of torch in $PYTHON (default python3), nvcc, cmake and ninja.
#
# Builds build-gpu/ (RelWithDebInfo, -DNUMPROBE_CUDA=ON, against $PYTHON's torch): libnumprobe
# with the CUDA kernel, cuda_tests, torch_tests, stats_cuda_bench, diff_logs and, when the
# examples' dependencies are there, moe_train. Then runs, in order of importance:
#   1. cuda_tests: the GPU's figures bitwise equal to the kernel's CPU reference and to the CPU
#      kernel's hash, across dtypes, shards, views, 0..512 MiB, NaN/Inf; no host sync while
#      computing; a probed CUDA training step;
#   2. torch_tests, in the same build;
#   3. stats_cuda_bench --quick: throughput against the same run's copy bandwidth and against
#      the PyTorch-ops way (docs/perf.md, "CUDA");
#   4. moe_train on the GPU as `single` and as one-rank zero3 through NCCL, compared with
#      diff_logs, which must find them equal;
#   5. scripts/bench_examples.sh on the GPU: the probe's overhead per step at the example's size
#      and at a GPU-sized configuration.
# Results go to $OUT (default out/): gpu_check.log (everything printed), cuda_tests.xml,
# torch_tests.xml, bench.txt, nccl_check.txt, example_overhead.md and summary.txt (one line per
# phase). Exit status: cuda_tests'.
# Time: at most GPU_CHECK_BUDGET_S seconds (default 500). Each phase is capped (build 300 s,
# cuda_tests 150 s, torch_tests 60 s, benchmark 150 s, NCCL check 120 s, overhead 200 s) and
# gets no more than what is left, so a slow one cannot cost the later ones their results.
# Without a GPU it still builds everything, and the GPU parts skip or fail.
#
# On a machine without the dev packages of gtest, spdlog, fmt, xxhash, CLI11 and gloo (and no
# way to install them), fetch their Debian packages first on one that has apt:
# `scripts/gpu_check.sh --fetch-deps` unpacks them into .deps/root (gitignored); copy the tree
# with .deps over, and the check builds against .deps/root when it is there.
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
# The nvidia-* wheels' headers sit beside torch's own package (not always in sysconfig's purelib).
SITE="$($PY -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
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

# Every phase gets at most what is left of the whole check's time limit (GPU_CHECK_BUDGET_S):
# a slow phase cannot starve the later ones, and whatever ran leaves its files in $OUT.
BUDGET_S="${GPU_CHECK_BUDGET_S:-500}"
phase_limit() {  # phase_limit CAP -> seconds for the next phase: CAP or what is left, if less
  local left=$(( BUDGET_S - ($(date +%s) - start) - 10 )) cap="$1"
  (( left < cap )) && cap=$left
  (( cap < 1 )) && cap=1
  echo "$cap"
}
results=()
note() { results+=("$*"); stamp "$*"; }

stamp "configure"
configure() {
  cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNUMPROBE_TORCH=ON \
    -DNUMPROBE_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_ROOT" -DCUDAToolkit_ROOT="$CUDA_ROOT" \
    "${prefix_args[@]}" "${extra[@]}" "$@"
}
# Without the examples' dependencies (CLI11, gloo headers) the kernel checks still run.
configure || { stamp "configure with examples FAILED: again without them"; configure -DNUMPROBE_EXAMPLES=OFF; } \
  || { stamp "configure FAILED"; exit 1; }
stamp "build"
targets=(numprobe_probe cuda_tests stats_cuda_bench torch_tests diff_logs)
grep -q '^NUMPROBE_EXAMPLES:BOOL=ON' "$ROOT/build-gpu/CMakeCache.txt" && targets+=(moe_train)
# -k 0: a target that fails to build (the example, say) must not cost the others' results.
timeout "$(phase_limit 300)" cmake --build "$ROOT/build-gpu" --parallel "$(nproc)" --target "${targets[@]}" -- -k 0 \
  || stamp "build FAILED in part"
B="$ROOT/build-gpu"
[ -x "$B/tests/cuda_tests" ] || { note "cuda_tests not built"; exit 1; }

stamp "CUDA tests"
timeout "$(phase_limit 150)" "$B/tests/cuda_tests" --gtest_output=xml:"$OUT/cuda_tests.xml"; tests_rc=$?
note "cuda_tests rc=$tests_rc"
stamp "CPU/ATen tests in the same build"
timeout "$(phase_limit 60)" "$B/tests/torch_tests" --gtest_brief=1 --gtest_output=xml:"$OUT/torch_tests.xml"
note "torch_tests rc=$?"
stamp "benchmark"
timeout "$(phase_limit 150)" "$B/bin/stats_cuda_bench" --quick | tee "$OUT/bench.txt"
note "stats_cuda_bench rc=${PIPESTATUS[0]}"

if [ -x "$B/examples/moe_train" ] && [ -x "$B/bin/diff_logs" ]; then
  TORCHRUN="$(dirname "$(command -v "$PY")")/torchrun"
  [ -x "$TORCHRUN" ] || TORCHRUN="$(command -v torchrun)"
  RUNS="$(mktemp -d)"
  stamp "example on the GPU through NCCL (one rank, groups built anyway), against the same run without collectives"
  nccl_deadline=$(( $(date +%s) + $(phase_limit 120) ))
  until_deadline() { local t=$(( nccl_deadline - $(date +%s) )); (( t < 1 )) && t=1; echo "$t"; }
  {
    for spec in "single|--setup single" "zero3_nccl|--setup zero3 --backend-at-one-rank"; do
      name="${spec%%|*}"
      timeout "$(until_deadline)" "$TORCHRUN" --standalone --nproc-per-node 1 --no-python "$B/examples/moe_train" \
        ${spec#*|} --device cuda --steps 3 --out "$RUNS/$name" || echo "moe_train $name FAILED (exit $?)"
    done
    timeout "$(until_deadline)" "$B/bin/diff_logs" "$RUNS/single" "$RUNS/zero3_nccl" --no-color
    echo "diff_logs exit $?"
  } > "$OUT/nccl_check.txt" 2>&1
  note "NCCL check: $(grep -E '^RESULT|^moe_train .*FAILED|^diff_logs exit' "$OUT/nccl_check.txt" | tr '\n' ' ')"

  stamp "example on the GPU: probe overhead per step, the example's size then a GPU-sized configuration"
  # The example's own size is launch-bound on a GPU (one probe launch per record against few,
  # tiny kernels); the GPU-sized configuration shows the cost where the GPU is the bottleneck.
  GPU_SIZED="--dim 1024 --heads 16 --kv-lora-rank 256 --moe-hidden 1024 --shared-hidden 2048 --microbatch-size 8 --seq-len 128"
  SETUPS="single 1;single 1 $GPU_SIZED" MOE_FLAGS="--device cuda" BUILD_DIR="$B" TORCHRUN="$TORCHRUN" \
    STEPS=31 timeout "$(phase_limit 200)" "$ROOT/scripts/bench_examples.sh" | tee "$OUT/example_overhead.md"
  note "bench_examples rc=${PIPESTATUS[0]}"
  rm -rf "$RUNS"
else
  note "moe_train or diff_logs not built: NCCL check and probe overhead on the example NOT measured"
fi
stamp "done"
printf '%s\n' "${results[@]}" | tee "$OUT/summary.txt"
exit $tests_rc
