#!/usr/bin/env bash
# diff_logs before/after on the workload of a run with every kind on (docs/perf.md, "diff_logs
# on sharded mb_grad runs"): two 8-rank ZeRO-3 runs with one mb_grad record per parameter,
# shard and microbatch, the second with a summation-order change. PAIRS interleaved rounds of
# `diff_logs BEFORE`, `diff_logs AFTER` and `diff -r` (which goes first alternates), then the
# medians of wall and CPU (user + sys) seconds, records per CPU-second and the ratios to diff -r.
# The two reports must be byte for byte the same (the comparison stops otherwise).
#   scripts/bench_diff_logs_ab.sh BEFORE/bin/diff_logs AFTER/bin/diff_logs [WORK_DIR]
# STEPS (default 200), PAIRS (default 5); the runs are generated once into WORK_DIR by
# AFTER's gen_synthetic_runs.
set -euo pipefail
BEFORE="$1" AFTER="$2"
WORK="${3:-/tmp/numprobe-bench-ab}"
STEPS="${STEPS:-200}" PAIRS="${PAIRS:-5}"
GEN="$(dirname "$AFTER")/gen_synthetic_runs"
mkdir -p "$WORK"
A="$WORK/zero3_s$STEPS" B="$WORK/zero3_sum_order_s$STEPS"
run_args=(--layout zero3 --world 8 --steps "$STEPS" --params 500 --mbs 8 --mb-grads)
[ -d "$A" ] || "$GEN" "$A" "${run_args[@]}" >/dev/null
[ -d "$B" ] || "$GEN" "$B" "${run_args[@]}" --variant sum_order >/dev/null
records=$(cat "$A"/rank*/diff.log "$B"/rank*/diff.log | grep -vc '^#')
cat "$A"/rank*/diff.log "$B"/rank*/diff.log >/dev/null  # a warm page cache for every run

timed() {  # timed NAME CMD... : appends "wall cpu" to $WORK/NAME.times; the report to NAME.out
  local name="$1"
  shift
  /usr/bin/time -f "%e %U %S" -o "$WORK/t" "$@" >"$WORK/$name.out" 2>/dev/null || true
  read -r w u s < <(tail -1 "$WORK/t")  # after "Command exited with non-zero status N"
  echo "$w $(awk "BEGIN{print $u+$s}")" >>"$WORK/$name.times"
}
rm -f "$WORK"/{before,after,diff}.times
for i in $(seq "$PAIRS"); do
  if (( i % 2 )); then order=(before after diff); else order=(after before diff); fi
  for name in "${order[@]}"; do
    case "$name" in
      before) timed before "$BEFORE" --no-color "$A" "$B" ;;
      after) timed after "$AFTER" --no-color "$A" "$B" ;;
      diff) timed diff diff -r "$A" "$B" ;;
    esac
  done
  cmp -s "$WORK/before.out" "$WORK/after.out" || { echo "the reports differ: $WORK/{before,after}.out" >&2; exit 1; }
done

median() { sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
col() { cut -d' ' -f"$2" "$WORK/$1.times" | median; }
dw=$(col diff 1) dc=$(col diff 2)
echo "records compared: $records ($(du -cb "$A" "$B" | tail -1 | cut -f1 | awk '{printf "%.0f MB", $1/1e6}')), $PAIRS interleaved rounds, medians"
echo "| | wall | CPU user+sys | records / CPU-second | wall / diff -r | CPU / diff -r |"
echo "| --- | --- | --- | --- | --- | --- |"
for name in before after; do
  w=$(col "$name" 1) c=$(col "$name" 2)
  awk -v n="$name" -v w="$w" -v c="$c" -v r="$records" -v dw="$dw" -v dc="$dc" \
    'BEGIN{printf "| diff_logs %s | %.2f s | %.2f s | %.2f M | %.2fx | %.2fx |\n", n, w, c, r/c/1e6, w/dw, c/dc}'
done
printf '| diff -r | %.2f s | %.2f s | | | |\n' "$dw" "$dc"
