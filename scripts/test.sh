#!/usr/bin/env bash
# The test command. Installs what is missing (scripts/setup.sh), builds build/ and the Python
# package (into the venv), runs every test under ctest (the pytest suites too), and ends with
# what ran, what was skipped and why, and what was built but not run.
#
#   scripts/test.sh         set-up, build, every ctest
#   scripts/test.sh --all   the same, then the checks that cost the most (what .ci/run calls):
#     - the C++ sources formatted as .clang-format says, by the pinned clang-format
#       (scripts/format.sh --check),
#     - the torch-free targets built with AddressSanitizer and UndefinedBehaviorSanitizer in
#       build-asan/ and their tests run (scripts/sanitize_check.sh),
#     - every torch translation unit compiled against the oldest supported LibTorch's headers,
#       2.4 (scripts/torch_min_check.sh),
#     - the CUDA path compiled against a CUDA build of torch, where nvcc is present
#       (scripts/cuda_compile_check.sh; nothing runs on a GPU: scripts/gpu_check.sh does that).
#   Any of the three can be left out of --all: NUMPROBE_SANITIZE=0, NUMPROBE_TORCH_MIN_CHECK=0,
#   NUMPROBE_CUDA_CHECK=0. The verdict's full calibration matrix is a script of its own
#   (scripts/calibrate.sh, ~40 min), run before a change to the verdict's rules lands.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
all=0
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

started=$(date +%s)
source "$(dirname "$0")/setup.sh"
configure_and_build
install_python_package  # the pytest suites under ctest test the installed package
# The older trainer releases python_trainer_releases and real_bugs_quick run.
mapfile -t quick_releases < <("$VENV/bin/python" "$NUMPROBE_ROOT/scripts/real_bugs.py" --releases --quick)
ensure_releases transformers-4.48.3 "${quick_releases[@]}"

SUMMARY=()  # one line per step, printed last
note() { SUMMARY+=("$*"); }
minutes() { printf '%d min %02d s' $(( ($(date +%s) - $1) / 60 )) $(( ($(date +%s) - $1) % 60 )); }

# The reason a skipped test printed: its "SKIP: ..." line, or the line after gtest's "Skipped".
skip_reason() {
  awk -v name="$1" '
    $2 == "Test:" && $3 == name { inside = 1; next }
    inside && /<end of output>/ { exit }
    inside && (/^SKIP/ || after) { print; exit }
    inside && /: Skipped$/ { after = 1 }
  ' "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null
}

# ctest's closing lines name the tests that did not run and those that failed; the summary
# repeats them, with each skip's reason, so that they are not lost above the checks --all adds.
CTEST_COUNTS=""
run_ctest() {
  local log="$BUILD_DIR/ctest-summary.log" rc=0 line total failed skipped test
  (cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 -j "$(nproc)") 2>&1 | tee "$log" || rc=$?
  line="$(grep -E '^[0-9]+% tests passed' "$log" | tail -1 || true)"
  if [ -z "$line" ]; then
    note "ctest (build/): no summary line (see above)"
    return 1
  fi
  total="$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')"
  failed="$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')"
  # Disabled tests are not in ctest's total; skipped ones are.
  skipped="$(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '\(Skipped\)' |
    sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+) \(Skipped\)$/\1/' || true)"
  local n_skipped=0
  [ -n "$skipped" ] && n_skipped="$(echo "$skipped" | wc -l)"
  CTEST_COUNTS="$(( total - failed - n_skipped )) passed, $failed failed, $n_skipped skipped"
  note "ctest (build/): $CTEST_COUNTS, of $total"
  if [ -n "$skipped" ]; then
    note "  skipped:"
    while IFS= read -r test; do
      note "    $test: $(skip_reason "$test" || true)"
    done <<< "$skipped"
  fi
  if [ "$failed" != 0 ]; then
    note "  FAILED:"
    while IFS= read -r test; do note "    $test"; done < <(sed -n '/The following tests FAILED:/,/^$/p' "$log" |
      grep -E '^[[:space:]]+[0-9]+ - ' | sed -E 's/^[[:space:]]*[0-9]+ - //')
  fi
  return "$rc"
}

# What is built and never run by a test here.
note_not_run() {
  note "built, run by no test: the benchmarks (build/bin/*_bench: scripts/README.md says how to run them)"
  note "the full calibration matrix is scripts/calibrate.sh (ctest ran its quick subset, calibration_quick)"
  if [ "$all" != 1 ]; then
    note "not run without --all: sanitizers, LibTorch 2.4 header check, CUDA compile check"
  elif [ "$CUDA_COMPILED" = 1 ]; then
    note "CUDA tests (build-cuda/tests/cuda_tests) and stats_cuda_bench: compiled, not run (no GPU here; scripts/gpu_check.sh runs them on one)"
  else
    note "CUDA tests: not compiled (see the CUDA compile check above), not run"
  fi
}

step() {  # step NAME COMMAND...: runs a check of --all and notes how it ended
  local name="$1" t0 rc=0
  shift
  if [ "$rc_all" != 0 ]; then
    note "$name: not run (an earlier step failed)"
    return 0
  fi
  t0=$(date +%s)
  "$@" || rc=$?
  if [ "$rc" = 0 ]; then note "$name: passed ($(minutes "$t0"))"; else note "$name: FAILED (exit $rc)"; fi
  rc_all=$rc
}

rc_all=0
CUDA_COMPILED=0
run_ctest || rc_all=$?
if [ "$all" = 1 ]; then
  step "C++ formatting (scripts/format.sh --check)" "$NUMPROBE_ROOT/scripts/format.sh" --check
  if [ "${NUMPROBE_SANITIZE:-1}" != "0" ]; then
    step "sanitizers (build-asan/, ASan + UBSan, torch-free targets)" \
      "$NUMPROBE_ROOT/scripts/sanitize_check.sh" "${SANITIZE_BUILD_DIR:-$NUMPROBE_ROOT/build-asan}"
  else
    note "sanitizers: left out (NUMPROBE_SANITIZE=0)"
  fi
  if [ "${NUMPROBE_TORCH_MIN_CHECK:-1}" != "0" ]; then
    step "LibTorch 2.4 header check" env BUILD_DIR="$BUILD_DIR" PYTHON="$VENV/bin/python" \
      "$NUMPROBE_ROOT/scripts/torch_min_check.sh"
  else
    note "LibTorch 2.4 header check: left out (NUMPROBE_TORCH_MIN_CHECK=0)"
  fi
  if [ "${NUMPROBE_CUDA_CHECK:-1}" = "0" ]; then
    note "CUDA compile check: left out (NUMPROBE_CUDA_CHECK=0)"
  elif [ ! -x "${CUDA_ROOT:-/usr/local/cuda}/bin/nvcc" ]; then
    note "CUDA compile check: left out (no nvcc under ${CUDA_ROOT:-/usr/local/cuda})"
  else
    step "CUDA compile check (build-cuda/)" "$NUMPROBE_ROOT/scripts/cuda_compile_check.sh"
    if [ "$rc_all" = 0 ]; then CUDA_COMPILED=1; fi
  fi
fi
note_not_run
rc=$rc_all

echo
printf '\033[1m== scripts/test.sh%s: %s in %s\033[0m\n' "$([ "$all" = 1 ] && echo ' --all')" \
  "$([ "$rc" = 0 ] && echo passed || echo FAILED)" "$(minutes "$started")"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
# The closing line in the plain form test runners' readers know.
[ -n "$CTEST_COUNTS" ] && echo "ctest: $CTEST_COUNTS"
exit "$rc"
