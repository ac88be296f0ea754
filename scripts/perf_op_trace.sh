#!/usr/bin/env bash
# What the op trace (kind `op`, PROBE_TRACE) costs a training step of examples/moe, single rank
# on CPU (docs/perf.md, "Op trace"):
#
# 1. Tracing one layer: PROBE_TRACE traces layer $LAYER's scopes on the odd steps only, so traced
#    and untraced steps alternate in one process (same load, same warm caches). Reported: the
#    median step time of even steps >= 2 (probe recording, no trace) and of odd steps (the same,
#    plus the trace), and the op records a traced step writes. Once for every microbatch, once
#    for microbatch 0 only (what diff_logs' re-run setting asks for).
# 2. With BASE_BUILD set (a build of the code before the op trace): the A/B of the probe on
#    without a trace, this build against that one. Processes alternate, PAIRS pairs, each the
#    median step time of steps >= 1; the ratio per pair, then their median and range.
#
#   scripts/perf_op_trace.sh
#   BASE_BUILD=../base/build PAIRS=10 scripts/perf_op_trace.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
TORCHRUN="${TORCHRUN:-$(command -v torchrun || echo "$ROOT/.venv/bin/torchrun")}"
STEPS="${STEPS:-41}"
LAYER="${LAYER:-1}"
PAIRS="${PAIRS:-10}"
AB_STEPS="${AB_STEPS:-21}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

train() {  # train BUILD STEPS [env...] -> moe_train's stdout; the run in $WORK/run
  local build="$1" steps="$2"
  shift 2
  rm -rf "$WORK/run"
  env OMP_NUM_THREADS=1 "$@" "$TORCHRUN" --standalone --nproc-per-node 1 --no-python \
    "$build/examples/moe_train" --setup single --steps "$steps" --out "$WORK/run" 2>/dev/null
}

step_times() { sed -n 's/^step \([0-9]*\) .* time \([0-9.]*\) ms$/\1 \2/p'; }

odd_steps="$(seq -s, 1 2 $((STEPS - 1)))"
echo "| traced on odd steps | untraced (ms/step) | traced (ms/step) | overhead | op records per traced step |"
echo "|---|---|---|---|---|"
for mb in "" ";mb=0"; do
  trace="steps=$odd_steps;scopes=^layers\\.$LAYER(\\.|\$)$mb"
  times="$(train "$BUILD_DIR" "$STEPS" PROBE_TRACE="$trace" | step_times)"
  ops="$(grep -c '^step=1 kind=op ' "$WORK/run/rank0/diff.log" || true)"
  python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
off = [float(t) for s, t in rows if int(s) % 2 == 0 and int(s) >= 2]
on = [float(t) for s, t in rows if int(s) % 2 == 1]
if not off or not on:
    print(f"| {sys.argv[1]} | - | - | failed | - |")
    sys.exit()
a, b = statistics.median(off), statistics.median(on)
shown = sys.argv[1].split(";", 1)[1].replace("|", "\\|")  # a table cell
print(f"| layer, {shown} | {a:.1f} | {b:.1f} | {100 * (b / a - 1):+.1f}% | {sys.argv[2]} |")' "$trace" "$ops" <<<"$times"
done

[ -n "${BASE_BUILD:-}" ] || exit 0
median_step() { step_times | python3 -c '
import statistics, sys
print(statistics.median(float(t) for s, t in (l.split() for l in sys.stdin if l.strip()) if int(s) >= 1))'; }
echo
echo "| pair | base $BASE_BUILD (ms/step) | this build (ms/step) | ratio |"
echo "|---|---|---|---|"
ratios=()
for i in $(seq 1 "$PAIRS"); do
  # Alternate which goes first: drift within a pair does not favour one side.
  if [ $((i % 2)) -eq 1 ]; then
    a="$(train "$BASE_BUILD" "$AB_STEPS" | median_step)"; b="$(train "$BUILD_DIR" "$AB_STEPS" | median_step)"
  else
    b="$(train "$BUILD_DIR" "$AB_STEPS" | median_step)"; a="$(train "$BASE_BUILD" "$AB_STEPS" | median_step)"
  fi
  r="$(python3 -c "print(f'{$b / $a:.4f}')")"
  ratios+=("$r")
  echo "| $i | $a | $b | $r |"
done
python3 -c '
import statistics, sys
r = sorted(float(x) for x in sys.argv[1:])
q = statistics.quantiles(r, n=4) if len(r) >= 2 else [r[0]] * 3
print(f"\nratio this/base: median {statistics.median(r):.4f} ({100 * (statistics.median(r) - 1):+.1f}%), "
      f"interquartile {q[0]:.4f} .. {q[2]:.4f}, range {r[0]:.4f} .. {r[-1]:.4f} over {len(r)} pairs")' "${ratios[@]}"
