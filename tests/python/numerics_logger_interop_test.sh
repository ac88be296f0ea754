#!/usr/bin/env bash
# A NumericsLogger log written by Python and a probe log of the same model, weights and data
# (torch-compatible hash on) must pair record by record: every microbatch's forward output and
# every parameter gradient `equal`. A probe run with one weight perturbed must not be equal.
#   usage: numerics_logger_interop_test.sh PYTHON TWIN DIFF_LOGS SOURCE_DIR
# Exits 77 (ctest: skipped), saying why, when no Python with torch.hash_tensor is at hand.
set -uo pipefail
PYTHON="$1" TWIN="$2" DIFF="$3" SRC="$4"
if [ -z "$PYTHON" ]; then
  echo "SKIP: no Python configured (configure with -DNUMPROBE_PYTHON=<python with torch>)"
  exit 77
fi
if ! "$PYTHON" -c "import torch; torch.hash_tensor" 2>/dev/null; then
  echo "SKIP: $PYTHON cannot import torch with torch.hash_tensor (torch >= 2.9 needed)"
  exit 77
fi
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
fail=0
"$PYTHON" "$SRC/tests/python/numerics_logger_run.py" "$T/py" || { echo "FAIL: the Python run failed"; exit 1; }
"$TWIN" "$T/py" "$T/probe" || { echo "FAIL: the probe run failed"; exit 1; }
"$TWIN" "$T/py" "$T/perturbed" --perturb || { echo "FAIL: the perturbed probe run failed"; exit 1; }

# check JSON RESULT KIND:CLASS=N[,CLASS=N]...: the result, and every pair of those kinds counted.
check() {
  "$PYTHON" - "$@" <<'PY'
import json, sys
path, result, *specs = sys.argv[1:]
j = json.load(open(path))
errors = []
if j["result"] != result:
    errors.append(f"result {j['result']!r}, want {result!r}")
for spec in specs:
    kind, counts = spec.split(":")
    want = {c: int(n) for c, n in (item.split("=") for item in counts.split(","))}
    got = {c: n for c, n in j["summary"][kind].items() if n}
    if got != want:
        errors.append(f"{kind}: {got}, want {want}")
kinds = {spec.split(":")[0] for spec in specs}
others = {k: sum(v.values()) for k, v in j["summary"].items() if k not in kinds}
if any(others.values()):
    errors.append(f"other kinds compared: {others}")
if j["base"]["python"] is not True or j["test"]["python"] is not False:
    errors.append("base should be the Python log, test the probe run")
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
PY
}

"$DIFF" --no-color --json "$T/equal.json" "$T/py/diff.log" "$T/probe"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: diff_logs exit $rc, want 0 (equal)"; fail=1; }
check "$T/equal.json" equal output:equal=8 grad:equal=8 || fail=1

"$DIFF" --no-color --json "$T/perturbed.json" "$T/py/diff.log" "$T/perturbed" > "$T/perturbed.txt"
rc=$?
[ "$rc" = 1 ] || { echo "FAIL: perturbed: diff_logs exit $rc, want 1 (different)"; fail=1; }
# fc2.bias's gradient is the sum of the output gradients fed in, whatever the weights: equal.
check "$T/perturbed.json" different output:different=8 grad:different=6,equal=2 || fail=1
# The Python log records no weights, so nothing recorded explains the output's difference: it heads.
grep -q "^FIRST UNEXPLAINED DIVERGENCE  step 0  forward  mb 0  output model  \[different\]" "$T/perturbed.txt" ||
  { echo "FAIL: perturbed: first divergence is not step 0's output of mb 0:"; head -20 "$T/perturbed.txt"; fail=1; }

[ "$fail" = 0 ] && echo "ok: 8 forward outputs and 8 grads equal; the perturbed run's outputs and weight-dependent grads differ"
exit $fail
