#!/usr/bin/env bash
# The README's demo, on CPU from a fresh machine: installs and builds what is missing, then
# compares a 4-rank zero3 run with an 8-rank (2 pipeline stages x 4 data-parallel) run of the
# example MoE -- first as they are, then with the pipeline run logging its gradients at the
# wrong moment (--fault grads-none, the bug numprobe was started for) -- and shows both reports,
# each also written as a self-contained HTML page (out/demo1/report.html, out/demo2/report.html).
# The third comparison has one layer's attention softmax computed another, mathematically equal
# way in the pipeline run (--fault op=1): diff_logs can only say which layer differs and prints
# the PROBE_TRACE setting that records its ops; both runs are re-run with it and compared again,
# and the op trace names the softmax; its ops were dumped (dump=1), and numprobe_replay replays
# them in float64: noise, two correct roundings (out/demo3, out/demo3-traced). The fourth compares a single
# rank with 8 ranks of pipeline, data, tensor and sequence parallelism (2 x 2 x 2, --sp) whose
# norm weights' gradients are never all-reduced over the tensor-parallel group
# (--fault sp-norm-unreduced; out/demo4).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
cd "$NUMPROBE_ROOT"
export BUILD_DIR TORCHRUN="$VENV/bin/torchrun"
STEPS="${STEPS:-3}"

banner() { printf '\n\033[1m==== %s\033[0m\n' "$*"; }

banner "1/4  zero3 x4  vs  pp x ddp (2 stages x 4) x8: both reduce over 4 data-parallel ranks, expect bitwise equality"
set +e
OUT=out/demo1 DIFF_FLAGS="--html out/demo1/report.html" scripts/compare.sh "zero3 4" "pp-ddp 8 --stages 2" --rng-seed 42 --steps "$STEPS"
first=$?
banner "2/4  the same, with the pipeline run logging its gradients after the optimizer cleared them"
OUT=out/demo2 DIFF_FLAGS="--html out/demo2/report.html" scripts/compare.sh "zero3 4" "pp-ddp 8 --stages 2" --rng-seed 42 --steps "$STEPS" \
  --b --fault grads-none
second=$?
banner "3/4  the same, with layer 1's attention softmax computed in float64 in the pipeline run: compare, then follow the hint"
OUT=out/demo3 DIFF_FLAGS="--json out/demo3/diff.json" scripts/compare.sh "zero3 4" "pp-ddp 8 --stages 2" --rng-seed 42 --steps "$STEPS" \
  --b --fault op=1
third=$?
hint="$("$VENV/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["op_trace"]["trace_hint"] or "")' out/demo3/diff.json 2>/dev/null || true)"
if [ -n "$hint" ]; then
  banner "3/4  re-run both with PROBE_TRACE='$hint;dump=1', as the report says (with op dumps), and compare again"
  PROBE_TRACE="$hint;dump=1" OUT=out/demo3-traced DIFF_FLAGS="--html out/demo3-traced/report.html" scripts/compare.sh "zero3 4" "pp-ddp 8 --stages 2" \
    --rng-seed 42 --steps "$STEPS" --b --fault op=1
  third=$?
  banner "3/4  replay the ops where the runs part in float64, as the report says: noise or a bug?"
  "$BUILD_DIR/bin/numprobe_replay" out/demo3-traced/0 out/demo3-traced/1
  # The page again, now with the verdict in its headline.
  "$BUILD_DIR/bin/diff_logs" out/demo3-traced/0 out/demo3-traced/1 --html out/demo3-traced/report.html >/dev/null
else
  echo "demo.sh: the third comparison printed no PROBE_TRACE setting to follow" >&2
fi
banner "4/4  single x1  vs  pp x ddp x tp (2 x 2 x 2, sequence parallel) x8, norm gradients not all-reduced over tp"
OUT=out/demo4 DIFF_FLAGS="--html out/demo4/report.html" scripts/compare.sh "single 1" "pp-ddp 8 --stages 2 --tp 2 --sp" \
  --rng-seed 42 --steps "$STEPS" --b --fault sp-norm-unreduced
fourth=$?
set -e
banner "diff_logs exit status: $first (equal), $second (differences: the grads are none), $third (differences: the op trace names the softmax, its replay says noise) and $fourth (differences: a norm gradient unreduced over tp)"
echo "HTML reports (one self-contained file each: open in a browser, or copy it off a remote machine):"
for report in out/demo1/report.html out/demo2/report.html out/demo3-traced/report.html out/demo4/report.html; do
  if [ -f "$report" ]; then echo "  $NUMPROBE_ROOT/$report"; fi
done
