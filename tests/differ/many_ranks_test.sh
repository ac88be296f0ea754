#!/usr/bin/env bash
# diff_logs on a run of thousands of ranks under an open-file limit (soft and hard) below the
# two runs' rank count: it must read the ranks beyond what it may hold open step by step, and
# give exactly the result it gives with enough descriptors.
#   usage: many_ranks_test.sh DIFF_LOGS GEN_SYNTHETIC_RUNS [RANKS] [LIMIT]
set -uo pipefail
DIFF="$1" GEN="$2" RANKS="${3:-2048}" LIMIT="${4:-1024}"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
# The generator writes every rank's file at once: it needs RANKS descriptors.
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null
if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt $((RANKS + 64)) ]; then
  echo "SKIP: the hard open-file limit ($(ulimit -Hn)) is below the $((RANKS + 64)) the generator needs"
  exit 77
fi
gen() { "$GEN" "$@" --layout ddp --world "$RANKS" --mbs "$RANKS" --steps 3 --params 4 ||
  { echo "FAIL: generator failed: $*"; exit 1; }; }
gen "$T/a"
gen "$T/b" --variant sum_order --at-step 1 --param 2
fail=0

"$DIFF" --no-color --json "$T/full.json" "$T/a" "$T/b" > "$T/full.txt" 2>&1
rc_full=$?
# A subshell: its limits (soft and hard) end with it. diff_logs cannot raise them again.
( ulimit -n "$LIMIT" && exec "$DIFF" --no-color --json "$T/low.json" "$T/a" "$T/b" ) > "$T/low.txt" 2>&1
rc_low=$?

# sum_order: a grad reduced in another order, nothing else: noise alone, exit 4.
[ "$rc_full" = 4 ] || { echo "FAIL: diff_logs exit $rc_full with enough descriptors, want 4"; head -30 "$T/full.txt"; fail=1; }
grep -q "^FIRST DIVERGENCE  step 1  step end  grad layers.2.w  \[different\]" "$T/full.txt" ||
  { echo "FAIL: unexpected first divergence:"; head -30 "$T/full.txt"; fail=1; }
grep -q "\"ranks_found\": $RANKS," "$T/full.json" || { echo "FAIL: not every rank was found"; fail=1; }
[ "$rc_low" = "$rc_full" ] || { echo "FAIL: under ulimit -n $LIMIT: exit $rc_low, want $rc_full"; head -30 "$T/low.txt"; fail=1; }
cmp -s "$T/full.txt" "$T/low.txt" || { echo "FAIL: the report differs under ulimit -n $LIMIT:"; diff "$T/full.txt" "$T/low.txt" | head -20; fail=1; }
cmp -s "$T/full.json" "$T/low.json" || { echo "FAIL: the --json result differs under ulimit -n $LIMIT"; fail=1; }
[ "$fail" = 0 ] && echo "ok: $RANKS ranks per run, the same result with the open-file limit at $LIMIT (soft and hard) as with $(ulimit -Hn)"
exit $fail
