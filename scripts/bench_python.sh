#!/usr/bin/env bash
# The Python probe's cost on a training step (docs/perf.md, "Python probe"): the single-process
# step of examples/python/transformer.py without the probe, with its hooks only and with every
# kind, side by side in one process (probe/bench/python/step_overhead.py). Arguments go to it
# (--rounds, --steps, and the transformer's size flags: --batch 8).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${NUMPROBE_VENV:-$root/.venv}/bin/python"
"$python" -c "import numprobe" 2>/dev/null || {
  echo "scripts/bench_python.sh: numprobe is not installed in $python (scripts/test.sh installs it)" >&2
  exit 2
}
OMP_NUM_THREADS=1 exec "$python" "$root/probe/bench/python/step_overhead.py" "$@"
