#!/usr/bin/env bash
# tensor_stats on CPU against XXH3 streaming and the PyTorch-ops way, plus the raw kernel of each
# instruction set, in one run of build/bin/tensor_stats_bench (interleaved repetitions); prints
# the markdown tables of docs/perf.md with the ratios computed from that run.
#   scripts/bench_tensor_stats.sh           # REPS=3 MIN_TIME=0.3 by default
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
REPS="${REPS:-3}"
MIN_TIME="${MIN_TIME:-0.3}"
JSON="$(mktemp)"
trap 'rm -f "$JSON"' EXIT

"$BUILD_DIR/bin/tensor_stats_bench" --benchmark_min_time="$MIN_TIME" --benchmark_repetitions="$REPS" \
  --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true \
  --benchmark_format=json --benchmark_out="$JSON" --benchmark_out_format=json > /dev/null

python3 - "$JSON" <<'EOF'
import json, re, sys
data = json.load(open(sys.argv[1]))
dtypes = ["float32", "bfloat16", "float16", "float64"]
rate = {}  # (bench, dtype index, second arg) -> mean bytes/s
threads = 1  # tensor_stats' intra-op threads, from its label
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "mean" or "bytes_per_second" not in b:
        continue
    m = re.match(r"BM_(\w+)/dtype:(\d+)/(MiB|isa):(\d+)", b["run_name"])
    rate[(m.group(1), int(m.group(2)), int(m.group(4)))] = b["bytes_per_second"]
    if m.group(1) == "TensorStats":
        threads = int(re.search(r"threads=(\d+)", b.get("label", "")).group(1))
gb = lambda r: f"{r / 1e9:.2f} GB/s"
print(f"| dtype | size | tensor_stats ({threads} threads) | torch ops (b) | XXH3_64bits, 1 thread (a) | vs (b) | vs (a), per core | XXH3_64bits_dispatch, 1 thread | vs it, per core |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for d, name in enumerate(dtypes):
    for mib in (1, 16, 256):
        s, t, x, xd = (rate.get((k, d, mib)) for k in ("TensorStats", "TorchOps", "Xxh3Streaming", "Xxh3Dispatch"))
        if None in (s, t, x):
            continue
        dispatch = f"{gb(xd)} | {100 * s / threads / xd:.0f}%" if xd else "- | -"
        print(f"| {name} | {mib} MiB | {gb(s)} | {gb(t)} | {gb(x)} | {s / t:.1f}x | {100 * s / threads / x:.0f}% | {dispatch} |")
print()
print("| dtype | generic | avx2 | avx512 | avx512 vs XXH3 (16 MiB, one thread each) |")
print("| --- | --- | --- | --- | --- |")
for d, name in enumerate(dtypes):
    cells = [gb(rate[("StatsKernelIsa", d, i)]) if ("StatsKernelIsa", d, i) in rate else "-" for i in range(3)]
    best = rate.get(("StatsKernelIsa", d, 2))
    x = rate.get(("Xxh3Streaming", d, 16))
    ratio = f"{100 * best / x:.0f}%" if best and x else "-"
    print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
EOF
