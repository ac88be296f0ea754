#!/usr/bin/env bash
# The demo: installs what is missing, builds, trains the quickstart model with the probe
# attached, and shows the log it wrote.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
cd "$NUMPROBE_ROOT"
run_dir="out/quickstart"
rm -rf "$run_dir"
"$BUILD_DIR/examples/numprobe_quickstart" "$run_dir" 3
echo
echo "== $run_dir/rank0/diff.log (first 25 lines) =="
head -25 "$run_dir/rank0/diff.log"
echo "..."
echo "== records per kind =="
sed -n 's/.* kind=\([a-z_]*\) .*/\1/p' "$run_dir/rank0/diff.log" | sort | uniq -c
