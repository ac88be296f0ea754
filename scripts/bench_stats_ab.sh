#!/usr/bin/env bash
# The AVX-512 statistics kernel of an earlier commit against this tree's, on the same machine in
# the same run: each tree's kernel sources compiled with the build's flags into its own copy of
# probe/bench/cpu/stats_kernel_ab.cpp (one thread, 16 MiB, tensor_stats' chunks), the two run in
# alternation PAIRS times; prints, per dtype, the medians of their best passes, the ratio, and
# the vector instructions of each fast path's main loop per 16 elements (from objdump), which
# the kernel's time follows: it is bound by instruction issue.
#
#   scripts/bench_stats_ab.sh [BASE]   BASE defaults to 60a6f9d^, the tree before format 8 (the format-7 kernel)
#   PAIRS=5 ROUNDS=10 by default. Needs an AVX-512 CPU (avx512f, dq, vl, bw), g++ and objdump.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE="${1:-60a6f9d^}"
PAIRS="${PAIRS:-5}"
ROUNDS="${ROUNDS:-10}"
for flag in avx512f avx512dq avx512vl avx512bw; do
  grep -qw "$flag" /proc/cpuinfo || { echo "bench_stats_ab: this CPU has no $flag" >&2; exit 2; }
done
base_commit="$(git -C "$ROOT" rev-parse --short "$BASE^{commit}")" ||
  { echo "bench_stats_ab: '$BASE' names no commit" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The flags probe/CMakeLists.txt gives the kernel library and its AVX-512 source.
FLAGS=(-std=c++20 -O3 -DNDEBUG -Wno-psabi -ffp-contract=off -mavx512f -mavx512dq -mavx512vl
  -mavx512bw -mf16c -mbmi2 -mprefer-vector-width=512)
build() {  # build TREE OUT
  g++ "${FLAGS[@]}" -I"$1/probe/src" -I"$1/probe/include" "$ROOT/probe/bench/cpu/stats_kernel_ab.cpp" \
    "$1/probe/src/core/kernels/stats_run_avx512.cpp" -o "$2"
}
mkdir -p "$WORK/base"
git -C "$ROOT" archive "$base_commit" probe/src probe/include | tar -x -C "$WORK/base"
build "$WORK/base" "$WORK/base.bin" &
base_build=$!
build "$ROOT" "$WORK/tree.bin"
wait "$base_build"

for ((p = 0; p < PAIRS; ++p)); do
  "$WORK/base.bin" "$ROUNDS" > "$WORK/base.$p"
  "$WORK/tree.bin" "$ROUNDS" > "$WORK/tree.$p"
done
for side in base tree; do objdump -d --no-show-raw-insn "$WORK/$side.bin" > "$WORK/$side.s"; done

python3 - "$WORK" "$PAIRS" "$base_commit" "$(git -C "$ROOT" rev-parse --short HEAD)" <<'EOF'
import re, statistics, sys
work, pairs, base, head = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
dtypes = ["float32", "bfloat16", "float16", "float64"]
# scan<Bits, Decode, kCountSpecials = false>'s mangled tail: the fast path, per dtype.
decode = {"0": "float32", "1": "float64", "2": "float16", "3": "bfloat16"}
per_iteration = {"float32": 16, "bfloat16": 16, "float16": 16, "float64": 8}

def rates(side):
    out = {d: [] for d in dtypes}
    for p in range(pairs):
        for line in open(f"{work}/{side}.{p}"):
            name, value = line.split()
            out[name].append(float(value))
    return {d: statistics.median(v) for d, v in out.items()}

def main_loops(side):
    """Per dtype: the vector instructions of the fast path's main loop, the backward jump with
    the most 64-bit multiplies (the hashes), the shortest of those."""
    ins, fn = [], None
    for line in open(f"{work}/{side}.s"):
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\t(.*)$", line.rstrip("\n"))
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip(), fn))
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    best = {}
    for i, (a, text, fn) in enumerate(ins):
        m = re.match(r"j\w+\s+([0-9a-f]+)\b", text)
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        body = [t for _, t, f in ins[at[int(m.group(1), 16)]:i + 1] if f == fn]
        scan = re.search(r"4scanI[jmt]LNS\w*?_6DecodeE([0-3])ELb0E", fn or "")
        if scan:
            d = decode[scan.group(1)]
            key = (-sum("vpmullq" in t for t in body), len(body))
            vector = sum(t.startswith("v") for t in body)
            if d not in best or key < best[d][0]:
                best[d] = (key, vector)
    return {d: best[d][1] * 16 // per_iteration[d] for d in best}

rate = {s: rates(s) for s in ("base", "tree")}
loop = {s: main_loops(s) for s in ("base", "tree")}
print(f"base {base}, tree {head} (working tree); one thread, 16 MiB, medians of {pairs} alternating "
      "pairs of best-of-rounds passes")
print()
print(f"| dtype | {base} | tree | tree / {base} | vector instr. per 16 elements, {base} | tree | "
      f"{base} / tree |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for d in dtypes:
    b, t = rate["base"][d], rate["tree"][d]
    lb, lt = loop["base"].get(d), loop["tree"].get(d)
    ratio = f"{lb / lt:.2f}" if lb and lt else "-"
    print(f"| {d} | {b / 1e9:.2f} GB/s | {t / 1e9:.2f} GB/s | {t / b:.2f} | {lb or '-'} | {lt or '-'} "
          f"| {ratio} |")
EOF
