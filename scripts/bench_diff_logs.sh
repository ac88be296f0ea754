#!/usr/bin/env bash
# Measures diff_logs on synthetic runs (docs/perf.md, "## diff_logs"): records per second,
# time relative to GNU diff on the same files, peak RSS; then a run of MANY_RANKS ranks
# (default 2048; 0 skips it) with every log open and under `ulimit -n 1024` (logs opened step
# by step; MANY_RANKS_ONLY=1 runs only that part). Usage:
#   scripts/bench_diff_logs.sh [BUILD_DIR] [WORK_DIR]
# BUILD_DIR must hold a Release/RelWithDebInfo build (bin/diff_logs, bin/gen_synthetic_runs).
set -euo pipefail
BUILD="${1:-build}"
WORK="${2:-$(mktemp -d)}"
BIN="$BUILD/bin"
REPS="${REPS:-3}"
mkdir -p "$WORK"
records() { cat "$1"/rank*/diff.log | grep -vc '^#'; }
calc() { awk "BEGIN{print $1}"; }

best() {  # best (minimum) wall, its CPU (user+sys) seconds and peak RSS of REPS runs: best CMD...
  local bw=999999 bu=0 rss=0
  for _ in $(seq "$REPS"); do
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/t" "$@" >/dev/null 2>&1 || true
    read -r w u s m < <(tail -1 "$WORK/t")
    if awk "BEGIN{exit !($w < $bw)}"; then bw=$w; bu=$(calc "$u+$s"); fi
    rss=$m
  done
  echo "$bw $bu $rss"
}

gen() { [ -d "$WORK/$1" ] || "$BIN/gen_synthetic_runs" "$WORK/$1" "${@:2}"; }
if [ "${MANY_RANKS_ONLY:-0}" != 1 ]; then
gen zero3 --layout zero3 --world 8 --steps 1000 --params 500
gen zero3_b --layout zero3 --world 8 --steps 1000 --params 500 --variant sum_order --at-step 500 --param 5
gen pp --layout pp --world 8 --stages 2 --steps 1000 --params 500
cat "$WORK"/zero3/rank*/diff.log "$WORK"/zero3_b/rank*/diff.log "$WORK"/pp/rank*/diff.log >/dev/null  # warm the page cache
for pair in "zero3 zero3_b" "zero3 pp"; do
  set -- $pair
  n=$(( $(records "$WORK/$1") + $(records "$WORK/$2") ))
  size=$(du -cb "$WORK/$1" "$WORK/$2" | tail -1 | cut -f1)
  read -r w u m < <(best "$BIN/diff_logs" --no-color "$WORK/$1" "$WORK/$2")
  printf '%-16s records %9d  %5.0f MB  diff_logs %6.2f s wall %6.2f s CPU  %5.2f M records/s (CPU)  peak RSS %6.1f MB\n' \
    "$1 vs $2" "$n" "$(calc "$size/1000000")" "$w" "$u" "$(calc "$n/$u/1000000")" "$(calc "$m/1024")"
  if [ "$pair" = "zero3 zero3_b" ]; then  # same layout: plain diff works on these
    read -r dw du dm < <(best diff -r "$WORK/$1" "$WORK/$2")
    printf '%-16s GNU diff -r %6.2f s wall %6.2f s CPU  peak RSS %6.1f MB   diff_logs/diff: wall %.2fx, CPU %.2fx\n' \
      "" "$dw" "$du" "$(calc "$dm/1024")" "$(calc "$w/$dw")" "$(calc "$u/$du")"
  fi
done
fi

# Thousands of ranks: every log open (the soft limit raised to the hard one) against a hard
# limit of 1024, where diff_logs opens most ranks' logs step by step.
RANKS="${MANY_RANKS:-2048}"
if [ "$RANKS" != 0 ]; then
  ulimit -Sn "$(ulimit -Hn)"
  many() { "$BIN/gen_synthetic_runs" "$@" --layout ddp --world "$RANKS" --mbs "$RANKS" --steps 20 --params 8; }
  [ -d "$WORK/ranks_a" ] || many "$WORK/ranks_a"
  [ -d "$WORK/ranks_b" ] || many "$WORK/ranks_b" --variant sum_order --at-step 10 --param 3
  cat "$WORK"/ranks_a/rank*/diff.log "$WORK"/ranks_b/rank*/diff.log >/dev/null
  n=$(( $(records "$WORK/ranks_a") + $(records "$WORK/ranks_b") ))
  for limit in "$(ulimit -Hn)" 1024; do
    read -r w u m < <(best bash -c "ulimit -n $limit && exec $BIN/diff_logs --no-color $WORK/ranks_a $WORK/ranks_b")
    printf '%-16s records %9d  ulimit -n %-8s diff_logs %6.2f s wall %6.2f s CPU  %5.2f M records/s (CPU)  peak RSS %6.1f MB\n' \
      "$RANKS ranks" "$n" "$limit" "$w" "$u" "$(calc "$n/$u/1000000")" "$(calc "$m/1024")"
  done
fi
