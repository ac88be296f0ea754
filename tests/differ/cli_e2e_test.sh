#!/usr/bin/env bash
# End-to-end: the diff_logs CLI on runs written in different layouts (format_record, the
# probe's line writer). Checks exit codes and the first-divergence line of each seed case.
set -uo pipefail
DIFF="$1"
GEN="$2"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail=0
gen() { "$GEN" "$@" --steps 6 --params 12 --mbs 4 --mb-grads || { echo "generator failed: $*"; exit 1; }; }
expect() {  # expect RC PATTERN -- diff_logs args
  local want_rc="$1" pattern="$2"
  shift 3
  if [ -z "$pattern" ]; then  # an empty pattern matches anything: the case would test nothing
    echo "FAIL: diff_logs $* has no pattern to expect"
    fail=1
    return
  fi
  local out rc
  out="$("$DIFF" --no-color "$@" 2>&1)"
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: diff_logs $* -> rc=$rc (want $want_rc), pattern '$pattern'"
    echo "$out" | head -40
    fail=1
  else
    echo "ok: diff_logs $* -> rc=$rc, /$pattern/"
  fi
}

gen "$T/single" --layout single
gen "$T/zero3" --layout zero3 --world 4
gen "$T/ppdp" --layout pp --world 8 --stages 2
gen "$T/ddp" --layout ddp --world 2
gen "$T/sumorder" --layout zero3 --world 8 --variant sum_order --at-step 2 --param 5
gen "$T/rng" --layout ddp --world 4 --variant rng --at-step 3
gen "$T/nonegrads" --layout pp --world 4 --stages 2 --variant none_grads --at-step 0
gen "$T/nan" --layout single --variant nan --at-step 4 --param 7
gen "$T/lossulp" --layout single --variant loss_ulp --at-step 5

# Same model and data in four layouts: equal.
expect 0 "RESULT: equal" -- "$T/single" "$T/zero3"
expect 0 "RESULT: equal" -- "$T/zero3" "$T/ppdp"
expect 0 "RESULT: equal" -- "$T/ppdp" "$T/ddp"
expect 0 "RESULT: equal" -- "$T/single/rank0/diff.log" "$T/ddp"
# Seed cases.
# Layout noise alone: exit 4, the first divergence labelled with its noise explanation.
expect 4 "^FIRST DIVERGENCE  step 2  step end  grad layers.5.w  \[different\]  noise: summation_order" -- "$T/single" "$T/sumorder"
expect 4 "^FIRST UNEXPLAINED DIVERGENCE  none: every difference is explained as noise" -- "$T/single" "$T/sumorder"
expect 4 "^NOISE  [0-9]+ divergent pair\(s\) explained as noise" -- "$T/single" "$T/sumorder"
# --strict: the headline and exit status that tell no noise apart.
expect 1 "^RESULT: differences found \(exit 1\)$" -- --strict "$T/single" "$T/sumorder"
expect 4 "\[summation_order\] every mb_grad of layers.5.w is bitwise equal" -- "$T/ppdp" "$T/sumorder"
expect 1 "^FIRST UNEXPLAINED DIVERGENCE  step 3  forward  mb 0  rng cuda_rng" -- "$T/zero3" "$T/rng"
expect 1 "\[rng\] inputs are equal but the RNG fingerprint cuda_rng mb=0 differs at step 3" -- "$T/zero3" "$T/rng"
expect 1 "^FIRST UNEXPLAINED DIVERGENCE  step 0  step end  grad layers.0.w  \[none_one_side\]" -- "$T/single" "$T/nonegrads"
expect 1 "all 12 grads of step 0 are none there" -- "$T/single" "$T/nonegrads"
expect 1 "\[nonfinite\] NaN/Inf appears first at grad layers.7.w \(step 4, test run" -- "$T/zero3" "$T/nan"
expect 4 "exact 5 first-divergent 5" -- "$T/single" "$T/lossulp"
# Tolerance: a 1e-7 relative grad-norm change (other hash, same min/max/mean) is within
# --rtol 1e-6, so the runs pass.
expect 0 "RESULT: equal" -- --rtol 1e-6 "$T/single" "$T/sumorder"
# Filters.
expect 0 "RESULT: equal" -- --kinds scalar,rng "$T/single" "$T/sumorder"
expect 0 "RESULT: equal" -- --steps 0:1 "$T/single" "$T/sumorder"
expect 4 "FIRST DIVERGENCE" -- --name 'layers\.5\.' "$T/single" "$T/sumorder"
# JSON.
expect 4 "^RESULT: differences found, every one explained as noise .* \(exit 4\)$" -- --json "$T/out.json" "$T/single" "$T/sumorder"
grep -q '"first_divergence": {' "$T/out.json" || { echo "FAIL: json lacks first_divergence"; fail=1; }
grep -q '"result": "noise"' "$T/out.json" || { echo "FAIL: json result is not noise"; fail=1; }
grep -q '"first_unexplained_divergence": null' "$T/out.json" || { echo "FAIL: json has a first unexplained divergence"; fail=1; }
# A --json file that cannot be written is bad usage, found before any comparison: no report.
expect 2 "^diff_logs: error: cannot write --json file '$T/nowhere/x.json'$" -- --json "$T/nowhere/x.json" "$T/single" "$T/zero3"
stdout="$("$DIFF" --no-color --json "$T/nowhere/x.json" "$T/single" "$T/zero3" 2>/dev/null)"
if [ -n "$stdout" ]; then
  echo "FAIL: diff_logs printed a report before failing on its --json file: $stdout" | head -3
  fail=1
fi
# --html beside --json; its file too is checked before comparing, and removed on failure.
if "$DIFF" --no-color "$T/nowhere" "$T/nowhere" --html "$T/probe.html" 2>&1 | grep -q "built without the plotting"; then
  echo "SKIP --html checks: diff_logs built without the plotting libraries"
else
  expect 4 "^RESULT: differences found, every one explained as noise .* \(exit 4\)$" -- --json "$T/both.json" --html "$T/both.html" "$T/single" "$T/sumorder"
  grep -q 'id="numprobe-data"' "$T/both.html" && [ -s "$T/both.json" ] ||
    { echo "FAIL: --json with --html did not write both files"; fail=1; }
  expect 2 "^diff_logs: error: cannot write --html file '$T/nowhere/x.html'$" -- --html "$T/nowhere/x.html" "$T/single" "$T/zero3"
  echo stale > "$T/stale.html"
  expect 2 "^diff_logs: error: .*does-not-exist. does not exist" -- --html "$T/stale.html" "$T/single" "$T/does-not-exist"
  [ ! -e "$T/stale.html" ] || { echo "FAIL: a failed comparison left its --html file behind"; fail=1; }
fi
# Input that cannot be compared leaves no --json file (not an empty one, nor an earlier result).
echo '{"stale": true}' > "$T/stale.json"
expect 2 "^diff_logs: error: .*does-not-exist. does not exist" -- --json "$T/stale.json" "$T/single" "$T/does-not-exist"
[ ! -e "$T/stale.json" ] || { echo "FAIL: a failed comparison left its --json file behind"; fail=1; }
# A pipeline whose stage 1 (ranks 4-7; layers 6-11) numbers its layers from 0: its
# names collide with stage 0's (replica mismatches) until a rank-scoped --map renumbers them.
gen "$T/pprenum" --layout pp --world 8 --stages 2 --pp-renumber
expect 1 "base only: grad layers.6.w" -- "$T/single" "$T/pprenum"
expect 1 "replica_mismatch=" -- "$T/single" "$T/pprenum"
expect 0 "RESULT: equal" -- --map-test '@4-7:^layers\.(\d+)\.=layers.${1+6}.' "$T/single" "$T/pprenum"
# Bad input and usage: exit 2.
mkdir -p "$T/empty"
expect 2 "holds no logs" -- "$T/single" "$T/empty"
expect 2 "does not exist" -- "$T/single" "$T/nowhere"
expect 2 "^diff_logs: error: --kinds 'bogus': unknown record kind 'bogus'" -- --kinds bogus "$T/single" "$T/single"
expect 2 "'-1' is not a number >= 0" -- --rtol -1 "$T/single" "$T/single"
# A question left unanswered is not "equal": a filter that matches nothing, exit 2.
expect 2 "RESULT: nothing compared: no record passes" -- --name typo_no_match "$T/single" "$T/zero3"
expect 0 "RESULT: equal" -- --kinds -mb_grad "$T/single" "$T/zero3"
# One rank's log of a multi-rank run is that rank's view (a warning, no missing ranks).
expect 0 "partial_run=1" -- "$T/zero3/rank2/diff.log" "$T/zero3/rank2/diff.log"
expect 2 "test is required" -- "$T/single"
cp -r "$T/single" "$T/garbage"
sed -i '5i garbage here' "$T/garbage/rank0/diff.log"
expect 2 "garbage/rank0/diff.log:5: unexpected token 'garbage'" -- "$T/single" "$T/garbage"
# A stray line is skipped, and is no record: the step end still agrees with the records.
expect 0 "RUN ISSUES \(test\)  skipped_line=1$" -- --lenient "$T/single" "$T/garbage"
cp -r "$T/single" "$T/garbled"
sed -i '5s/.*/garbage here/' "$T/garbled/rank0/diff.log"
# A record garbled into garbage is lost: its step end says so too.
expect 1 "step end says [0-9]+ records of step 0, read" -- --lenient "$T/single" "$T/garbled"
# A rank killed inside a step's write, cut at a line boundary: that step has no end marker, so
# the comparison stops there (incomplete), with no divergence from the records it lost.
cp -r "$T/zero3" "$T/cut"
log="$T/cut/rank1/diff.log"
n="$(grep -n '^#end step=2 ' "$log" | cut -d: -f1)"
head -n "$((n + 3))" "$log" > "$T/cut.log" && mv "$T/cut.log" "$log"
expect 1 "rank1/diff.log:$((n + 1)): step 3 has no end marker" -- "$T/single" "$T/cut"
expect 1 "RESULT: incomplete" -- "$T/single" "$T/cut"
rm "$T/ppdp/rank3/diff.log"
expect 1 "rank3/diff.log is missing" -- "$T/single" "$T/ppdp"
exit $fail
