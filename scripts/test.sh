#!/usr/bin/env bash
# The test command. Installs what is missing (scripts/setup.sh), builds build/, runs every test
# under ctest, and ends with what ran, what was skipped and why, and what was built but not run.
#
#   scripts/test.sh         set-up, build, every ctest
#   scripts/test.sh --all   the same, then the checks that cost the most (what .ci/run calls):
#     - the torch-free targets built with AddressSanitizer and UndefinedBehaviorSanitizer in
#       build-asan/ and their tests run (scripts/sanitize_check.sh),
#     - every torch translation unit compiled against the oldest supported LibTorch's headers,
#       2.4 (scripts/torch_min_check.sh),
#     - the CUDA path compiled against a CUDA build of torch, where nvcc is present
#       (scripts/cuda_compile_check.sh; nothing runs on a GPU: scripts/gpu_check.sh does that).
#   Any of the three can be left out of --all: NUMPROBE_SANITIZE=0, NUMPROBE_TORCH_MIN_CHECK=0,
#   NUMPROBE_CUDA_CHECK=0.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
all=0
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/setup.sh"
started=$(date +%s)
configure_and_build

SUMMARY=()  # one line per step, printed last
note() { SUMMARY+=("$*"); }
minutes() { printf '%d min %02d s' $(( ($(date +%s) - $1) / 60 )) $(( ($(date +%s) - $1) % 60 )); }

# ctest's own closing lines name the tests that did not run ("(Skipped)") and the failures; the
# summary repeats them so that they are not lost above the checks --all adds.
CTEST_COUNTS=""
run_ctest() {
  local log="$BUILD_DIR/ctest-summary.log" rc=0 line total failed skipped
  (cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 -j "$(nproc)") 2>&1 | tee "$log" || rc=$?
  line="$(grep -E '^[0-9]+% tests passed' "$log" | tail -1 || true)"
  if [ -z "$line" ]; then
    note "ctest (build/): no summary line (see above)"
    return 1
  fi
  skipped="$(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '\((Skipped|Disabled)\)' || true)"
  total="$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')"
  failed="$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')"
  local n_skipped=0
  [ -n "$skipped" ] && n_skipped="$(echo "$skipped" | wc -l)"
  CTEST_COUNTS="$(( total - failed - n_skipped )) passed, $failed failed, $n_skipped skipped"
  note "ctest (build/): $CTEST_COUNTS, of $total"
  if [ -n "$skipped" ]; then
    note "  skipped (each one's output above says why):"
    while IFS= read -r test; do note "    $(echo "$test" | sed -E 's/^[[:space:]]*[0-9]+ - //')"; done <<< "$skipped"
  fi
  return "$rc"
}

# The CUDA targets: never run here (no GPU); built only by --all's compile check.
note_cuda() {
  if [ "$all" = 1 ] && [ "${NUMPROBE_CUDA_CHECK:-1}" != "0" ] && [ -x "${CUDA_ROOT:-/usr/local/cuda}/bin/nvcc" ]; then
    note "CUDA tests (build-cuda/bin/cuda_tests) and stats_cuda_bench: compiled, not run (no GPU here; scripts/gpu_check.sh runs them on one)"
  elif [ "$all" = 1 ]; then
    note "CUDA path: not compiled (NUMPROBE_CUDA_CHECK=0 or no nvcc), not run"
  else
    note "not run without --all: sanitizers, LibTorch 2.4 header check, CUDA compile check (the CUDA tests need a GPU: scripts/gpu_check.sh)"
  fi
}

step() {  # step NAME COMMAND...: runs a check of --all and notes how it ended
  local name="$1" t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  if [ "$rc" = 0 ]; then note "$name: passed ($(minutes "$t0"))"; else note "$name: FAILED (exit $rc)"; fi
  return "$rc"
}

rc=0
run_ctest || rc=$?
if [ "$all" = 1 ] && [ "$rc" = 0 ]; then
  if [ "${NUMPROBE_SANITIZE:-1}" != "0" ]; then
    step "sanitizers (build-asan/, ASan + UBSan, torch-free targets)" \
      "$NUMPROBE_ROOT/scripts/sanitize_check.sh" "${SANITIZE_BUILD_DIR:-$NUMPROBE_ROOT/build-asan}" || rc=$?
  fi
  if [ "$rc" = 0 ] && [ "${NUMPROBE_TORCH_MIN_CHECK:-1}" != "0" ]; then
    step "LibTorch 2.4 header check" env BUILD_DIR="$BUILD_DIR" PYTHON="$VENV/bin/python" \
      "$NUMPROBE_ROOT/scripts/torch_min_check.sh" || rc=$?
  fi
  if [ "$rc" = 0 ] && [ "${NUMPROBE_CUDA_CHECK:-1}" != "0" ]; then
    step "CUDA compile check (build-cuda/)" "$NUMPROBE_ROOT/scripts/cuda_compile_check.sh" || rc=$?
  fi
fi
note_cuda

echo
printf '\033[1m== scripts/test.sh%s: %s in %s\033[0m\n' "$([ "$all" = 1 ] && echo ' --all')" \
  "$([ "$rc" = 0 ] && echo passed || echo FAILED)" "$(minutes "$started")"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
# The closing line in the plain form test runners' readers know.
[ -n "$CTEST_COUNTS" ] && echo "ctest: $CTEST_COUNTS"
exit "$rc"
