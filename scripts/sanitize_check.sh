#!/usr/bin/env bash
# The torch-free targets (the core, the differ, their tests with the fuzz corpus, diff_logs'
# script tests) built with AddressSanitizer and UndefinedBehaviorSanitizer in their own build
# directory, and run under ctest. Cheap: no LibTorch. Any report fails the run.
#   usage: scripts/sanitize_check.sh [BUILD_DIR]   (default build-asan)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-asan}"
log() { printf '\033[1m[sanitizers]\033[0m %s\n' "$*" >&2; }
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# GCC 12's -Wmaybe-uninitialized misfires inside <regex> (std::function moves) once the
# sanitizers instrument it: a false positive of the instrumented build, not of numprobe's code.
WARN="-Wno-maybe-uninitialized"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
log "configuring $BUILD (NUMPROBE_TORCH=OFF, $FLAGS)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNUMPROBE_TORCH=OFF \
  -DNUMPROBE_WERROR=ON -DNUMPROBE_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="$FLAGS $WARN" \
  -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$FLAGS" "${launcher[@]}" >/dev/null
log "building"
cmake --build "$BUILD" --parallel "$(nproc)"
cd "$BUILD"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The 1000x1000 page test runs the same code as diff_logs_html_pages at a scale that takes
# minutes uninstrumented; the main build runs it.
ctest --output-on-failure --timeout 900 -j "$(nproc)" -E 1000x1000
