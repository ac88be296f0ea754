#!/usr/bin/env python3
"""The Python probe's cost on a training step: examples/python/transformer.py's single-process
step at a size where a step takes well over 100 ms, trained side by side in one process by
identical models that differ only in what observes them, in interleaved rounds (so that a busy
moment of the machine falls on every variant alike):

  off    no probe;
  hooks  the probe watching everything with kinds=scalar: every hook installed and called, almost
         nothing recorded (the Python side's own cost);
  all    the probe with every kind (the default).

    python probe/bench/python/step_overhead.py [--rounds 6] [--steps 5]

Prints each variant's median and fastest step time and their ratios to `off`'s (on a busy
machine the minima are the steadier figure)."""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/python"))
import transformer  # noqa: E402

import numprobe  # noqa: E402

BIG = ["--dim", "256", "--layers", "4", "--heads", "8", "--vocab", "1024", "--seq", "64", "--batch", "2"]


def variant(name, args, layout, run_dir):
    model = transformer.build_model(args, layout)
    optimizer = transformer.make_optimizer(args, model)
    if name == "off":
        probe = transformer.NoProbe()
    else:
        probe = numprobe.Probe(os.path.join(run_dir, name), kinds="scalar" if name == "hooks" else "all")
    probe.watch(model)
    probe.watch_optimizer(optimizer)
    return {"model": model, "optimizer": optimizer, "probe": probe, "step": 0, "times": []}


def run_steps(v, steps, args, layout, record):
    for _ in range(steps):
        start = time.perf_counter()
        transformer.train_step(v["step"], v["model"], v["optimizer"], v["probe"], args, layout)
        if record:
            v["times"].append(time.perf_counter() - start)
        v["step"] += 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    opts, rest = p.parse_known_args()
    args = transformer.parse_args(BIG + ["--optimizer", "adamw", "--lr", "0.001"] + rest)
    torch.set_num_threads(1)
    layout = transformer.init_layout(args)
    names = ["off", "hooks", "all"]
    with tempfile.TemporaryDirectory(prefix="numprobe-bench-") as run_dir:
        variants = {n: variant(n, args, layout, run_dir) for n in names}
        for n in names:  # warm-up: first steps allocate
            run_steps(variants[n], 1, args, layout, record=False)
        for r in range(opts.rounds):
            for n in names[r % 3:] + names[:r % 3]:  # a rotating order
                run_steps(variants[n], opts.steps, args, layout, record=True)
    base = statistics.median(variants["off"]["times"])
    base_min = min(variants["off"]["times"])
    print(f"dim {args.dim} layers {args.layers} heads {args.heads} vocab {args.vocab} seq {args.seq} "
          f"batch {args.batch}, adamw, {args.microbatches} microbatches, 1 thread; "
          f"{opts.rounds} rounds x {opts.steps} steps per variant")
    for n in names:
        times = variants[n]["times"]
        median = statistics.median(times)
        print(f"{n:6s} median {median * 1e3:7.1f} ms  min {min(times) * 1e3:7.1f} ms  "
              f"ratio to off: medians {median / base:.3f}, minima {min(times) / base_min:.3f}")


if __name__ == "__main__":
    main()
