#!/usr/bin/env python3
"""The verdict on clean runs of trainers as they ship, at settings no test names: random draws of a
trainer (the plain loop with numprobe.attach, the Hugging Face Trainer with its callback, Lightning
with its callback, Accelerate), its settings (seed, accumulation steps, batch, sequence length,
optimizer, learning rate, steps) and a layout that trains the same steps on the same samples (one
process against DDP or FSDP2 over 2 ranks, or another split of the step into microbatches, or
compiled against eager). Each draw trains both without a fault and compares them with diff_logs:
equal (exit 0) or noise / cannot tell (exit 4) is right; a bug (exit 1) is a false alarm.

The draws follow --seed: the same seed draws the same settings, so a false alarm can be rerun.

  scripts/sweep_trainers.py --draws 12 --seed 7 --out out/sweep-trainers
  (after scripts/test.sh built build/ and installed the package and the trainers into .venv)

Writes sweep.md (a row per draw) into --out; exits 1 on a false alarm or a failed run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "python"
PYTHON = ROOT / ".venv" / "bin" / "python"
SCRIPTS = {"loop": "attach_loop.py", "hf": "hf_trainer.py", "lightning": "lightning_train.py",
           "accelerate": "accelerate_train.py"}


def draw(rng: random.Random) -> dict:
    """One draw: the trainer, the settings both runs share, and the two layouts (flags, ranks)."""
    trainer = rng.choice(sorted(SCRIPTS))
    shared = ["--seed", rng.randint(0, 10**6), "--steps", rng.randint(2, 4), "--seq", rng.choice([8, 12, 16])]
    if trainer == "loop":
        shared += ["--optimizer", rng.choice(["adamw", "sgd"]), "--lr", rng.choice([1e-3, 1e-2, 3e-2])]
    elif trainer == "hf":
        shared += ["--optim", rng.choice(["adamw_torch", "sgd"]), "--lr", rng.choice([1e-4, 1e-3, 5e-3])]
    else:
        shared += ["--lr", rng.choice([1e-3, 1e-2])]
    batch = rng.choice([1, 2])
    ga = rng.choice([2, 4])  # the one process's accumulation steps, with 2 ranks' worth of samples
    base = (["--ga", ga, "--batch", batch], 1)
    kinds = ["ddp", "regroup"] + (["fsdp"] if trainer == "loop" else []) + (["compile"] if trainer == "hf" else [])
    kind = rng.choice(kinds)
    if kind == "ddp":
        test = (["--ga", ga // 2, "--batch", batch], 2)
    elif kind == "fsdp":
        test = (["--fsdp", "--ga", ga // 2, "--batch", batch], 2)
    elif kind == "compile":
        test = (["--ga", ga, "--batch", batch, "--compile", "aot_eager"], 1)
    else:  # the same samples in microbatches of another size
        test = (["--ga", ga * batch, "--batch", 1], 1) if batch > 1 else (["--ga", ga // 2, "--batch", 2], 1)
    return {"trainer": trainer, "kind": kind, "shared": [str(x) for x in shared],
            "base": ([str(x) for x in base[0]], base[1]), "test": ([str(x) for x in test[0]], test[1])}


def train(d: dict, side: str, out: Path) -> None:
    flags, ranks = d[side]
    script = EXAMPLES / SCRIPTS[d["trainer"]]
    cmd = [str(PYTHON), str(script)] if ranks == 1 else \
        [str(PYTHON), "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)]
    env = dict(os.environ, PROBE_DIR=str(out), OMP_NUM_THREADS="1")
    done = subprocess.run(cmd + d["shared"] + flags, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + d['shared'] + flags)} exited {done.returncode}\n{done.stderr[-2000:]}")


def compare(base: Path, test: Path) -> tuple[int, str]:
    exe = ROOT / "build" / "bin" / "diff_logs"
    done = subprocess.run([str(exe), str(base), str(test), "--json", "-"], capture_output=True, text=True)
    if done.returncode not in (0, 1, 4):
        return done.returncode, done.stderr.strip()
    p = json.loads(done.stdout).get("first_unexplained_divergence")
    if not p:
        return done.returncode, ""
    return done.returncode, f"step {p['step']} {p['kind']} {p['name']}" + (f" mb {p['mb']}" if p.get("mb") is not None else "")


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--draws", type=int, default=12)
    a.add_argument("--seed", type=int, default=7)
    a.add_argument("--out", type=Path, default=ROOT / "out" / "sweep-trainers")
    args = a.parse_args()
    rng = random.Random(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    rows, alarms, failures, started = [], 0, 0, time.time()
    for i in range(args.draws):
        d = draw(rng)
        label = (f"{d['trainer']} {' '.join(d['shared'])}: {' '.join(d['base'][0])} x{d['base'][1]} vs "
                 f"{' '.join(d['test'][0])} x{d['test'][1]}")
        try:
            train(d, "base", args.out / f"{i}-base")
            train(d, "test", args.out / f"{i}-test")
            code, headline = compare(args.out / f"{i}-base", args.out / f"{i}-test")
        except RuntimeError as e:
            failures += 1
            rows.append(f"| {i} | {label} | failed | {str(e).splitlines()[0]} |")
            print(f"draw {i}: FAILED {e}", flush=True)
            continue
        alarms += code == 1
        failures += code not in (0, 1, 4)
        verdict = {0: "equal", 4: "noise", 1: "FALSE ALARM"}.get(code, f"error {code}")
        rows.append(f"| {i} | {label} | {verdict} | {headline} |")
        print(f"draw {i}: {verdict} {headline}  ({label})", flush=True)
    summary = (f"{args.draws} draws (seed {args.seed}): {alarms} false alarms, {failures} failed, "
               f"{time.time() - started:.0f} s")
    (args.out / "sweep.md").write_text("| draw | setting | verdict | headline |\n| --- | --- | --- | --- |\n" +
                                       "\n".join(rows) + f"\n\n{summary}\n")
    print(summary)
    return 1 if alarms or failures else 0


if __name__ == "__main__":
    sys.exit(main())
