#!/usr/bin/env python3
"""The verdict on clean runs of settings the calibration matrix does not name: random draws of a
model, its training settings and a layout.

Each draw picks a trainer (the MoE example or the Python transformer), a model size, the
training settings (steps, seed, batch, sequence length, optimizer and learning rate, dtype,
dropout) and one parallel layout; it trains the single-process run and the layout, both without a
fault, and compares them over all steps and over every step prefix (--steps 0:k). A clean
comparison must say equal (exit 0) or noise / cannot tell (exit 4); a bug (exit 1) is a false
alarm, any other exit an error. A draw the trainer refuses (its own "error:" line, e.g. a degree
that does not divide the experts) is listed with the trainer's reason and not compared.

The draws follow --seed: the same seed draws the same settings, so a false alarm can be rerun.

  scripts/sweep_clean.py --draws 40 --seed 2026 --out out/sweep
  (after scripts/test.sh or scripts/calibrate.sh built build/ and installed the package into .venv)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from calibrate import LAYOUTS, TRANSFORMER_LAYOUTS, Runner, Tally, TrainingFailed  # noqa: E402

# Layouts beyond the calibration matrix's, for the draws to reach too.
MOE_LAYOUTS = LAYOUTS + ["ddp 2", "zero3 2", "pp 4", "pp-ddp 8 --stages 4", "zero3 4 --ep 2",
                         "ddp 8 --ep 8", "pp-ddp 8 --stages 2 --ep 4", "pp-ddp 8 --stages 2 --tp 2"]
PY_LAYOUTS = TRANSFORMER_LAYOUTS + ["fsdp 4", "tp 4", "fsdp-tp 4 --tp 2"]


@dataclass
class Draw:
    trainer: str  # "moe" or "transformer"
    layout: str
    dtype: str
    optimizer: str
    seed: int
    steps: int
    flags: list[str]  # the model and training settings, the same in both runs

    def describe(self) -> str:
        return (f"{self.trainer} single 1 vs {self.layout}, {self.dtype} {self.optimizer} seed {self.seed} "
                f"steps {self.steps} {' '.join(self.flags)}")


def draw_moe(rng: random.Random) -> Draw:
    optimizer = rng.choice(["sgd", "adamw"])
    experts = rng.choice([2, 4, 8, 16])
    flags = ["--layers", rng.choice([2, 3, 4, 5]), "--dim", rng.choice([32, 48, 64, 96, 128]),
             "--experts", experts, "--top-k", rng.randint(1, min(3, experts)),
             "--moe-hidden", rng.choice([16, 32, 64]), "--dropout", rng.choice([0.0, 0.1, 0.3]),
             "--microbatches", rng.choice([4, 8]), "--microbatch-size", rng.choice([1, 2, 3]),
             "--seq-len", rng.choice([8, 16, 32, 48]),
             "--lr", rng.choice([0.03, 0.1, 0.2] if optimizer == "sgd" else [3e-4, 1e-3, 3e-3])]
    return Draw("moe", rng.choice(MOE_LAYOUTS), rng.choice(["float32", "bfloat16"]), optimizer,
                rng.randrange(1, 10**6), rng.randint(2, 16), [str(f) for f in flags])


def draw_transformer(rng: random.Random) -> Draw:
    optimizer = rng.choice(["sgd", "adamw"])
    flags = ["--layers", rng.choice([1, 2, 3]), "--dim", rng.choice([16, 32, 48, 64]),
             "--heads", 4, "--seq", rng.choice([8, 16, 32]), "--batch", rng.choice([1, 2, 3]),
             "--microbatches", rng.choice([4, 8]),
             "--lr", rng.choice([0.03, 0.1, 0.2] if optimizer == "sgd" else [1e-3, 1e-2, 0.1])]
    return Draw("transformer", rng.choice(PY_LAYOUTS), rng.choice(["float32", "bfloat16"]), optimizer,
                rng.randrange(1, 10**6), rng.randint(2, 16), [str(f) for f in flags])


def judge(r: Runner, d: Draw, tally: Tally) -> str:
    """Trains both runs of a draw and compares them; the draw's line of the report."""
    try:
        single = r.train("single 1", d.dtype, d.optimizer, d.seed, d.steps, trainer=d.trainer, extra=tuple(d.flags))
        test = r.train(d.layout, d.dtype, d.optimizer, d.seed, d.steps, trainer=d.trainer, extra=tuple(d.flags))
    except TrainingFailed as e:
        if e.refused:
            return f"refused by the trainer: {e.reason}"
        tally.errors.append(f"{d.describe()}: training failed: {e.reason}")
        return f"training failed: {e.reason}"
    before = (len(tally.alarms), len(tally.errors))
    for last in [None, *range(d.steps - 1)]:
        tally.add(r.diff(single, test, last), d.describe() + ("" if last is None else f" steps 0:{last}"))
    verdicts = f"{d.steps} comparisons"
    if (len(tally.alarms), len(tally.errors)) == before:
        return verdicts + ", none a bug"
    return verdicts + f", {len(tally.alarms) - before[0]} false alarm(s), {len(tally.errors) - before[1]} error(s)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=16, help="how many settings to draw (default 16)")
    ap.add_argument("--seed", type=int, default=2026, help="the seed of the draws (default 2026)")
    ap.add_argument("--trainers", nargs="+", choices=["moe", "transformer"], default=["moe", "transformer"])
    ap.add_argument("--out", default="out/sweep", help="run directories and the report (default out/sweep)")
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", str(ROOT / "build")),
                    help="the build directory (MOE_TRAIN and DIFF_LOGS name the binaries instead)")
    ap.add_argument("--torchrun", default=os.environ.get("TORCHRUN") or next(
        (str(p) for p in [ROOT / ".venv" / "bin" / "torchrun"] if p.exists()), shutil.which("torchrun") or "torchrun"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build = Path(args.build)
    r = Runner(Path(os.environ.get("MOE_TRAIN", build / "examples" / "moe_train")),
               Path(os.environ.get("DIFF_LOGS", build / "bin" / "diff_logs")), args.torchrun, out)
    rng = random.Random(args.seed)
    makers = {"moe": draw_moe, "transformer": draw_transformer}
    tally = Tally()
    lines = ["# Clean runs of drawn settings", "", f"`{' '.join(sys.argv)}`", "",
             "| draw | comparison | result |", "|---|---|---|"]
    rows = []
    for i in range(args.draws):
        d = makers[rng.choice(args.trainers)](rng)
        result = judge(r, d, tally)
        rows.append({"draw": i, "comparison": d.describe(), "result": result})
        lines.append(f"| {i} | {d.describe()} | {result} |")
        print(f"  draw {i}: {d.describe()}: {result}", flush=True)
    lines += ["", f"{tally.comparisons} comparisons: {tally.equal} equal, {tally.noise} noise or cannot tell, "
              f"{len(tally.alarms)} false alarm(s), {len(tally.errors)} error(s); {r.runs} training runs in "
              f"{r.seconds / 60:.1f} min"]
    lines += [f"- false alarm: {a}" for a in tally.alarms] + [f"- error: {e}" for e in tally.errors]
    text = "\n".join(lines) + "\n"
    (out / "sweep.md").write_text(text)
    (out / "sweep.json").write_text(json.dumps({"draws": rows, "comparisons": tally.comparisons,
                                                "false_alarms": tally.alarms, "errors": tally.errors}, indent=1))
    print(text)
    return 1 if tally.alarms or tally.errors else 0


if __name__ == "__main__":
    sys.exit(main())
