#!/usr/bin/env bash
# bench_diff_logs_html.sh BUILD_DIR WORK: what --html costs on 1,000 series x 1,000 steps.
# Writes two single-process runs with gen_synthetic_runs (1000 grads + 2 scalars, 1000 steps;
# the test run's grads all differ from step 3), times diff_logs without and with --html
# (/usr/bin/time: wall, CPU, peak RSS), and renders the page in headless Chromium
# (tests/differ/html_check.py: the page's own navigation-to-drawn time). docs/perf.md.
set -euo pipefail
BUILD="${1:?usage: bench_diff_logs_html.sh BUILD_DIR WORK}"
WORK="${2:?usage: bench_diff_logs_html.sh BUILD_DIR WORK}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$BUILD/bin"
mkdir -p "$WORK"
big=(--layout single --steps 1000 --params 1000 --no-forward)
[ -d "$WORK/base" ] || "$BIN/gen_synthetic_runs" "$WORK/base" "${big[@]}"
[ -d "$WORK/test" ] || "$BIN/gen_synthetic_runs" "$WORK/test" "${big[@]}" --variant rng --at-step 3
fmt="wall %e s  CPU %U+%S s  peak RSS %M KB"
echo "== diff_logs (text report only)"
/usr/bin/time -f "$fmt" "$BIN/diff_logs" "$WORK/base" "$WORK/test" > /dev/null || true
echo "== diff_logs --html"
/usr/bin/time -f "$fmt" "$BIN/diff_logs" "$WORK/base" "$WORK/test" --html "$WORK/report.html" > /dev/null || true
echo "== report.html: $(stat -c %s "$WORK/report.html") bytes"
echo "== rendered in headless Chromium"
python3 "$ROOT/tests/differ/html_check.py" "$WORK/report.html" --cells 1002000
