#!/usr/bin/env bash
# compare.sh "<setup A> <ranks>" "<setup B> <ranks>" [extra flags]
#
# Runs moe_train under torchrun twice, setup A into out/0 and setup B into out/1 (replacing
# them), then diff_logs out/0 out/1. Exit status: diff_logs' (0 equal, 1 different, 2 could not
# compare), or 3 when a training run failed (nothing compared). Extra flags go to both runs;
# flags after a lone `--b` go to run B only (e.g. `--b --fault grads-none`).
# A setup may carry its own flags: "pp-ddp 8 --stages 2".
#   scripts/compare.sh "zero3 4" "pp-ddp 8 --stages 2" --steps 3 --b --fault grads-none
# Environment: BUILD_DIR (default build), OUT (default out), TORCHRUN (default: torchrun on
# PATH, else the one beside NUMPROBE_PYTHON, else the project venv's), DIFF_FLAGS (extra
# diff_logs flags, e.g. --json x).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
OUT="${OUT:-out}"
if [ $# -lt 2 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
  exit 2
fi
spec_a=($1)
spec_b=($2)
shift 2
common=() only_b=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--b" ]; then shift; only_b=("$@"); break; fi
  common+=("$1"); shift
done

if [ -z "${TORCHRUN:-}" ]; then
  if command -v torchrun >/dev/null; then TORCHRUN=torchrun
  elif [ -n "${NUMPROBE_PYTHON:-}" ]; then TORCHRUN="$(dirname "$NUMPROBE_PYTHON")/torchrun"
  elif [ -x "$ROOT/.venv/bin/torchrun" ]; then TORCHRUN="$ROOT/.venv/bin/torchrun"
  else echo "compare.sh: torchrun not found (run scripts/demo.sh, set TORCHRUN, or put a venv with torch on PATH)" >&2; exit 2
  fi
fi

run() {  # run DIR SETUP RANKS [flags...]
  local dir="$1" setup="$2" ranks="$3"
  shift 3
  rm -rf "$dir"
  echo "== $setup on $ranks rank(s) -> $dir" >&2
  local rc=0
  OMP_NUM_THREADS=1 "$TORCHRUN" --standalone --nproc-per-node "$ranks" --no-python \
    "$BUILD_DIR/examples/moe_train" --setup "$setup" --out "$dir" "$@" >&2 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "compare.sh: the $setup run failed (exit $rc): nothing compared" >&2
    exit 3
  fi
}

run "$OUT/0" "${spec_a[0]}" "${spec_a[1]}" "${spec_a[@]:2}" "${common[@]}"
run "$OUT/1" "${spec_b[0]}" "${spec_b[1]}" "${spec_b[@]:2}" "${common[@]}" "${only_b[@]}"
echo "== diff_logs $OUT/0 $OUT/1" >&2
set +e
"$BUILD_DIR/bin/diff_logs" "$OUT/0" "$OUT/1" ${DIFF_FLAGS:-}
exit $?
