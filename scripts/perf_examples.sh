#!/usr/bin/env bash
# Probe overhead per training step of examples/moe, per setup, on this machine:
# probe off, probe on without mb_grad (-mb_grad), probe on with every kind. Each
# configuration runs REPS times, interleaved, and the best mean step time (steps 1..N-1, as
# moe_train prints it) is kept. Prints a markdown table (docs/perf.md).
#   scripts/perf_examples.sh            # STEPS=12 REPS=3 by default
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
TORCHRUN="${TORCHRUN:-torchrun}"
STEPS="${STEPS:-12}"
REPS="${REPS:-3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

mean_ms() {  # mean_ms SETUP RANKS PROBE KINDS [flags...]
  local setup="$1" ranks="$2" probe="$3" kinds="$4"
  shift 4
  OMP_NUM_THREADS=1 "$TORCHRUN" --standalone --nproc-per-node "$ranks" --no-python \
    "$BUILD_DIR/examples/moe_train" --setup "$setup" --steps "$STEPS" --probe "$probe" \
    --probe-kinds "$kinds" --out "$WORK/run" "$@" 2>/dev/null |
    sed -n 's/^mean step time.*: \([0-9.]*\) ms$/\1/p'
  rm -rf "$WORK/run"
}

echo "| setup | ranks | probe off (ms/step) | all but mb_grad | overhead | all kinds | overhead |"
echo "|---|---|---|---|---|---|---|"
for spec in "single 1" "ddp 2" "zero3 2" "pp 2" "pp-ddp 4 --stages 2"; do
  set -- $spec
  setup="$1" ranks="$2"
  shift 2
  best_off=1e9 best_some=1e9 best_all=1e9
  for _ in $(seq "$REPS"); do
    off=$(mean_ms "$setup" "$ranks" off all "$@")
    some=$(mean_ms "$setup" "$ranks" on -mb_grad "$@")
    all=$(mean_ms "$setup" "$ranks" on all "$@")
    best_off=$(python3 -c "print(min($best_off, $off))")
    best_some=$(python3 -c "print(min($best_some, $some))")
    best_all=$(python3 -c "print(min($best_all, $all))")
  done
  python3 -c "
off, some, every = $best_off, $best_some, $best_all
print(f'| $setup | $ranks | {off:.1f} | {some:.1f} | {100*(some/off-1):+.1f}% | {every:.1f} | {100*(every/off-1):+.1f}% |')"
done
