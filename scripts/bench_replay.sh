#!/usr/bin/env bash
# What numprobe_replay costs (docs/perf.md, "Replay verdict"): for each softmax fault of the
# replay's acceptance (op=, op-wrong=, op-lowp= in layer $LAYER), `ddp 2` against `single 1`
# traced with op dumps (scripts/compare.sh), then, alternating in one loop, REPS times the
# comparison alone (diff_logs, the baseline: the replay runs it too) and REPS times the replay
# (numprobe_replay --no-json: the comparison, the dumps loaded, both regions replayed and
# judged). Reported per fault: the median wall time of each and their ratio, and the verdict.
#
#   scripts/bench_replay.sh
#   LAYER=1 REPS=9 scripts/bench_replay.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$ROOT/build}" LAYER="${LAYER:-2}" REPS="${REPS:-7}" ROOT
exec python3 - <<'PYEOF'
import os, statistics, subprocess, tempfile, time

build, layer, reps, root = os.environ["BUILD_DIR"], os.environ["LAYER"], int(os.environ["REPS"]), os.environ["ROOT"]
work = tempfile.mkdtemp()
trace = f"steps=0;scopes=^layers\\.{layer}(\\.|$);mb=0;dump=1"

def wall(cmd):
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return time.perf_counter() - t, proc

print(f"| fault | diff_logs (s) | numprobe_replay (s) | ratio | verdict |")
print(f"|---|---|---|---|---|")
for fault in [f"op={layer}", f"op-wrong={layer}", f"op-lowp={layer}"]:
    out = os.path.join(work, fault.split("=")[0])
    env = dict(os.environ, PROBE_TRACE=trace, OUT=out)
    subprocess.run([os.path.join(root, "scripts/compare.sh"), "ddp 2", "single 1", "--steps", "2", "--b", "--fault", fault],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = [os.path.join(out, "0"), os.path.join(out, "1")]
    diff_t, replay_t, verdict = [], [], ""
    for _ in range(reps):
        diff_t.append(wall([os.path.join(build, "bin/diff_logs"), *runs])[0])
        t, proc = wall([os.path.join(build, "bin/numprobe_replay"), *runs, "--no-json"])
        replay_t.append(t)
        verdict = next((l[len("VERDICT  "):] for l in proc.stdout.splitlines() if l.startswith("VERDICT  ")), "?")
    d, r = statistics.median(diff_t), statistics.median(replay_t)
    print(f"| {fault} | {d:.3f} | {r:.3f} | {r / d:.2f} | {verdict} |", flush=True)
PYEOF
