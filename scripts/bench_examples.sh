#!/usr/bin/env bash
# Probe overhead per training step of examples/moe, per setup, measured inside one run:
# PROBE_EVERY=2 makes the probe record even steps only, so probed and unprobed steps alternate
# in the same processes (same machine load, same warm caches). Reported: the median step
# time (rank 0, as moe_train prints it) of odd steps (probe idle: its hooks run but record
# nothing) and of even steps >= 2 (probe recording), per kind set (KINDS, ';'-separated;
# default "-mb_grad" and "all"), and the median wall time the recording steps spent inside the
# probe's step calls (begin_step, end_step: the parameter, gradient and optimizer-state records
# and the step's hand-off to the writer; moe_train times them), also as a share of the idle
# step. Prints a markdown table (docs/perf.md).
#   scripts/bench_examples.sh           # STEPS=41 by default
#   SETUPS="single 1" MOE_FLAGS="--device cuda" BUILD_DIR=build-gpu scripts/bench_examples.sh
#   SETUPS="single 1 --optimizer adamw" KINDS="-mb_grad,-param,-optim;-mb_grad" scripts/bench_examples.sh
#     (SETUPS: "setup ranks [moe_train flags]" entries separated by ';')
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
TORCHRUN="${TORCHRUN:-$(command -v torchrun || echo "$ROOT/.venv/bin/torchrun")}"
STEPS="${STEPS:-41}"
SETUPS="${SETUPS:-single 1;ddp 2;zero3 2;pp 2;pp-ddp 4 --stages 2}"
KINDS="${KINDS:--mb_grad;all}"
read -r -a MOE_FLAGS <<< "${MOE_FLAGS:-}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

step_times() {  # step_times SETUP RANKS KINDS [flags...]  -> "N step_ms probe_ms" lines
  local setup="$1" ranks="$2" kinds="$3"
  shift 3
  OMP_NUM_THREADS=1 PROBE_EVERY=2 "$TORCHRUN" --standalone --nproc-per-node "$ranks" --no-python \
    "$BUILD_DIR/examples/moe_train" --setup "$setup" --steps "$STEPS" --probe-kinds "$kinds" \
    --out "$WORK/run" ${MOE_FLAGS[@]+"${MOE_FLAGS[@]}"} "$@" 2>/dev/null | sed -n 's/^step \([0-9]*\) .* probe \([0-9.]*\) ms .* time \([0-9.]*\) ms$/\1 \3 \2/p'
  rm -rf "$WORK/run"
}

summarise() {  # stdin: "step ms probe_ms" lines -> "off on overhead% in_probe in_probe/off%"
  python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
off = [float(t) for s, t, _ in rows if int(s) % 2 == 1]
on = [(float(t), float(p)) for s, t, p in rows if int(s) % 2 == 0 and int(s) >= 2]
if not off or not on:  # the run failed: its stderr went to /dev/null, rerun it by hand
    print("- - failed - -")
    sys.exit()
a, b = statistics.median(off), statistics.median(t for t, _ in on)
calls = statistics.median(p for _, p in on)
print(f"{a:.1f} {b:.1f} {100 * (b / a - 1):+.1f}% {calls:.3f} {100 * calls / a:.2f}%")'
}

IFS=';' read -r -a kind_sets <<< "$KINDS"
echo "| setup | ranks | kinds | probe idle (ms/step) | recording (ms/step) | overhead | in probe calls (ms/step) | calls / idle step |"
echo "|---|---|---|---|---|---|---|---|"
IFS=';' read -r -a specs <<< "$SETUPS"
for spec in "${specs[@]}"; do
  set -- $spec
  setup="$1" ranks="$2"
  shift 2
  for kinds in "${kind_sets[@]}"; do
    read -r off on pct calls share < <(step_times "$setup" "$ranks" "$kinds" "$@" | summarise)
    echo "| $setup${*:+ ($*)} | $ranks | $kinds | $off | $on | $pct | $calls | $share |"
  done
done
