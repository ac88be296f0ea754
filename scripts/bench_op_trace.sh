#!/usr/bin/env bash
# What the op trace (kind `op`, PROBE_TRACE) costs a training step of examples/moe, single rank
# on CPU, one intra-op thread (docs/perf.md, "Op trace"):
#
# 1. Tracing one layer: PROBE_TRACE traces layer $LAYER's scopes on the odd steps only, so traced
#    and untraced steps alternate in one process (same load, same warm caches). Reported: the
#    median step time of even steps >= 2 (probe recording, no trace) and of odd steps (the same,
#    plus the trace), and the op records a traced step writes. Once for every microbatch, once
#    for microbatch 0 only (what diff_logs' re-run setting asks for), and once more for
#    microbatch 0 with op dumps (dump=1, a cap above what the run writes: ~23 MB a traced step).
# 2. With BASE_BUILD set (a build of the code before the op trace): the A/B of the probe on
#    (all kinds) without a trace, this build against that one. Processes alternate, PAIRS pairs
#    of AB_STEPS steps each, the first of a pair alternating too. Per process: the median step
#    time of steps >= 1 (wall clock, as moe_train prints it) and the process's CPU time (user +
#    sys, startup included: it does not count time spent waiting for a core, so other work on
#    the machine disturbs it less). Per pair the ratio this/base of each; then their median,
#    interquartile range and range.
#
#   scripts/bench_op_trace.sh
#   BASE_BUILD=../base/build PAIRS=16 scripts/bench_op_trace.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$ROOT/build}" STEPS="${STEPS:-41}" LAYER="${LAYER:-1}" \
  PAIRS="${PAIRS:-16}" AB_STEPS="${AB_STEPS:-21}" BASE_BUILD="${BASE_BUILD:-}"
exec python3 - <<'PYEOF'
import os, re, resource, shutil, statistics, subprocess, tempfile

build, steps, layer = os.environ["BUILD_DIR"], int(os.environ["STEPS"]), os.environ["LAYER"]
work = tempfile.mkdtemp()
run_dir = os.path.join(work, "run")


def train(build_dir, n, trace=None):
    """Runs moe_train --setup single; returns ({step: ms}, CPU seconds of the process)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PROBE_TRACE", None)
    if trace:
        env["PROBE_TRACE"] = trace
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([os.path.join(build_dir, "examples", "moe_train"), "--setup", "single",
                          "--steps", str(n), "--out", run_dir],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    times = {int(s): float(t) for s, t in re.findall(r"^step (\d+) .* time ([0-9.]+) ms$", out, re.M)}
    return times, cpu


def quartiles(values):
    v = sorted(values)
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
    return f"median {statistics.median(v):.4f} ({100 * (statistics.median(v) - 1):+.1f}%), " \
           f"interquartile {q[0]:.4f} .. {q[2]:.4f}, range {v[0]:.4f} .. {v[-1]:.4f}"


try:
    odd = ",".join(str(s) for s in range(1, steps, 2))
    print("| traced on odd steps | untraced (ms/step) | traced (ms/step) | overhead | op records per traced step |")
    print("|---|---|---|---|---|")
    for mb in ("", ";mb=0", ";mb=0;dump=1;dump_cap=4096"):
        trace = f"steps={odd};scopes=^layers\\.{layer}(\\.|$){mb}"
        times, _ = train(build, steps, trace)
        with open(os.path.join(run_dir, "rank0", "diff.log")) as f:
            ops = sum(1 for line in f if line.startswith("step=1 kind=op "))
        off = [t for s, t in times.items() if s % 2 == 0 and s >= 2]
        on = [t for s, t in times.items() if s % 2 == 1]
        a, b = statistics.median(off), statistics.median(on)
        shown = trace.split(";", 1)[1].replace("|", "\\|")  # a table cell
        print(f"| layer {layer}, {shown} | {a:.1f} | {b:.1f} | {100 * (b / a - 1):+.1f}% | {ops} |", flush=True)

    base = os.environ["BASE_BUILD"]
    if base:
        n = int(os.environ["AB_STEPS"])
        print(f"\n| pair | base step (ms) | this step (ms) | ratio | base CPU (s) | this CPU (s) | ratio |")
        print("|---|---|---|---|---|---|---|")
        wall, cpu, cpu_per_step = [], [], []
        for i in range(int(os.environ["PAIRS"])):
            order = [base, build] if i % 2 == 0 else [build, base]
            res = {}
            for b in order:
                times, c = train(b, n)
                res[b] = (statistics.median(t for s, t in times.items() if s >= 1), c)
            (wa, ca), (wb, cb) = res[base], res[build]
            wall.append(wb / wa)
            cpu.append(cb / ca)
            cpu_per_step.append(1000 * (cb - ca) / n)
            print(f"| {i + 1} | {wa:.1f} | {wb:.1f} | {wb / wa:.4f} | {ca:.2f} | {cb:.2f} | {cb / ca:.4f} |", flush=True)
        print(f"\nstep time this/base: {quartiles(wall)}")
        print(f"process CPU this/base: {quartiles(cpu)}  ({len(cpu)} pairs of {n} steps)")
        print(f"process CPU this - base, per step: median {statistics.median(cpu_per_step):+.2f} ms")
finally:
    shutil.rmtree(work, ignore_errors=True)
PYEOF
