#!/usr/bin/env python3
"""Calibrate diff_logs' verdict on the MoE example and the Python transformer: a clean matrix and
a bug matrix.

Clean matrix: every layout of both trainers, optimizer, dtype and seed trained without a fault
and compared with the single-process run of the same settings over every step prefix
(--steps 0:k), and every two layouts with each other over all steps. A clean comparison must say equal (exit 0) or noise
(exit 4); one that says bug (exit 1) is a false alarm, one that cannot compare (2) an error.

Bug matrix: faults of a size epsilon (a learning rate, a gradient or a block's output scaled by
1 + epsilon) and faults without a size (a skipped reduction, a gradient left None, per-rank
dropout, tokens returned to the wrong place), each trained in the test run only and compared
with the clean single-process run. A sized fault is detected where it is called a bug headlined
at its own record (RIGHT_RECORD); its detection limit is the smallest epsilon from which on every
larger one is detected too.

The script fails (exit 1) on any false alarm or error, on a fault without a size that is
missed, and on a fault missed at or above its stated detection limit (STATED_LIMITS, the
figures docs/calibration.md promises). It writes calibration.md and calibration.json into --out.

  scripts/calibrate.sh            the full matrix (.ci/run runs it after scripts/test.sh --all)
  scripts/calibrate.sh --quick    a subset with a seed of its own (ctest runs it)
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Layouts of the clean matrix: "<setup> <ranks> [flags]".
LAYOUTS = [
    "ddp 4",
    "zero3 4",
    "pp 2",
    "pp-ddp 4 --stages 2",
    "ddp 2 --tp 2",
    "ddp 4 --tp 2 --sp",
    "zero3 4 --tp 2 --sp",
    "ddp 4 --ep 4",
    "ddp 4 --ep 2",
    "pp-ddp 8 --stages 2 --tp 2 --sp --ep 2",
]
QUICK_LAYOUTS = ["zero3 4", "ddp 2 --tp 2", "ddp 4 --ep 2"]
# The Python transformer (examples/python/transformer.py, FSDP2 and DTensor): its layouts against
# its single-process run, and each other.
TRANSFORMER_LAYOUTS = ["fsdp 2", "tp 2", "tp 2 --sp", "fsdp-tp 4 --tp 2 --sp"]
QUICK_TRANSFORMER_LAYOUTS = ["tp 2 --sp"]
# Other models of the MoE example, each a trainer of its own in the clean matrix, over fewer layouts:
# what a model computes changes what the rules see. Top-1 routing renormalised
# over its one expert (s / s = 1) gives the router a gradient of roundings alone (docs/diff-logs.md,
# "A gradient at the rounding floor").
MOE_VARIANTS = {"moe-top1": ["--top-k", "1", "--experts", "4", "--dim", "96", "--layers", "3"]}
VARIANT_LAYOUTS = ["zero3 4", "ddp 4 --tp 2 --sp", "ddp 4 --ep 2", "pp-ddp 8 --stages 2 --tp 2 --sp --ep 2"]
OPTIMIZERS = ["sgd", "adamw"]
DTYPES = ["float32", "bfloat16"]
SEEDS = [3, 1234, 2027]  # none of them a seed the tests train with
QUICK_SEEDS = [11]
STEPS = 8
QUICK_STEPS = 4

EPSILONS = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5]
QUICK_EPSILONS = [1e-1]
FAULT_STEP = 2  # the step a learning-rate or gradient fault hits (a step with noise before it)
# Faults of a size: a template with {eps} for the factor 1 + epsilon.
SIZED_FAULTS = {
    "lr": f"lr={FAULT_STEP}:{{factor}}",
    "grad-scale": f"grad-scale={FAULT_STEP}:layers.1.attention.wo.weight:{{factor}}",
    "out-scale": "out-scale=1:{factor}",
}
# The record each sized fault must be headlined at to count as detected: a bug found elsewhere
# (a later step, another record) is a bug, but not this fault's diagnosis.
_GRAD_SCALED = "layers.1.attention.wo.weight"
RIGHT_RECORD = {
    # the learning rate the update of the fault's step read, or the weights it produced
    "lr": lambda v: v.rule == "optimizer" and v.step in (FAULT_STEP, FAULT_STEP + 1),
    "grad-scale": lambda v: v.step == FAULT_STEP and v.kind == "grad" and v.name == _GRAD_SCALED,
    "out-scale": lambda v: v.step == 0 and (v.name == "layers.1" or v.name.startswith("layers.1.")),
}
BUG_LAYOUTS = ["ddp 4", "pp-ddp 8 --stages 2 --tp 2 --sp --ep 2"]
QUICK_BUG_LAYOUTS = ["ddp 4"]
# Faults without a size, with the layout they need.
STRUCTURAL_FAULTS = [
    ("grads-none", "pp-ddp 4 --stages 2"),
    ("skip-reduce=layers.2.attention.wq.weight", "ddp 4"),
    ("rng-per-rank", "ddp 4"),
    ("sp-norm-unreduced", "ddp 4 --tp 2 --sp"),
    ("tp-no-reduce=1", "ddp 2 --tp 2"),
    ("ep-permute=1", "ddp 4 --ep 2"),
]
# Faults without a size found in float32 whose first record lies, in bfloat16, within what an
# unrecorded op's rounding explains (docs/diff-logs.md, "Equal inputs, another rounding"): a few
# tokens returned to the wrong place move layer 1's output by 2e-3 in norm, within 10 roundings
# of bfloat16. Reported, not promised.
UNPROMISED_STRUCTURAL = {("ep-permute=1", "bfloat16")}
QUICK_STRUCTURAL = [("skip-reduce=layers.2.attention.wq.weight", "ddp 4")]

# The promise: from this epsilon on, a fault is called a bug, per fault, dtype and layout
# (None: no promise, the fault may go unseen at every size tried). docs/calibration.md states
# them with the measurement behind them.
# Each stated limit is one decade above the limit measured with the bug matrix's seed (3;
# 2026-12-03, docs/calibration.md): a margin for other seeds and steps, not itself measured.
_WIDE = "pp-ddp 8 --stages 2 --tp 2 --sp --ep 2"
STATED_LIMITS: dict[tuple[str, str, str], float | None] = {
    # The learning rate is compared as the number the update read (`<param>.lr`): any factor.
    ("lr", "float32", "ddp 4"): 1e-4,
    ("lr", "float32", _WIDE): 1e-4,
    ("lr", "bfloat16", "ddp 4"): 1e-4,
    ("lr", "bfloat16", _WIDE): 1e-4,
    ("grad-scale", "float32", "ddp 4"): 1e-1,
    ("grad-scale", "float32", _WIDE): 1e-1,
    ("out-scale", "float32", "ddp 4"): 1e-4,
    ("out-scale", "float32", _WIDE): 1e-1,
    # bfloat16: one gradient scaled after the first step is within the noise the error model
    # allows there (no promise); a block's output on the wide layout too, and on ddp 4 a factor
    # within 10 roundings of bfloat16 (7.8e-2) is below what the figures resolve.
}


def stated_limit(fault: str, dtype: str, layout: str) -> float | None:
    return STATED_LIMITS.get((fault, dtype, layout))


class TrainingFailed(SystemExit):
    """A training run that did not finish. `refused`: the trainer said `invalid setting` (a setting
    it does not accept, before training), not a failure while training; `reason`: that line, or
    the end of the output."""

    def __init__(self, proc: subprocess.CompletedProcess, cmd: list[str]):
        output = proc.stdout + proc.stderr
        refusals = [line.strip() for line in output.splitlines() if "moe_train: invalid setting:" in line]
        self.refused = bool(refusals)
        self.reason = refusals[0] if refusals else output.strip()[-2000:]
        super().__init__(f"calibrate: training failed (exit {proc.returncode}): {' '.join(cmd)}\n{self.reason}")


@dataclass
class Runner:
    moe_train: Path
    diff_logs: Path
    torchrun: str
    out: Path
    transformer: Path = Path(__file__).resolve().parent.parent / "examples" / "python" / "transformer.py"
    reuse: bool = False  # keep the training runs a previous call finished
    seconds: float = 0.0
    runs: int = 0

    def train(self, layout: str, dtype: str, optimizer: str, seed: int, steps: int, fault: str = "none",
              trainer: str = "moe", extra: tuple[str, ...] = ()) -> Path:
        """Trains `layout` (or reuses its finished run); `extra`: more of the trainer's flags."""
        words = layout.split()
        setup, ranks, flags = words[0], words[1], words[2:]
        name = "_".join([*([trainer] if trainer != "moe" else []), setup, ranks, *[w.lstrip("-") for w in flags],
                         dtype, optimizer, str(seed), str(steps),
                         fault.replace("=", "-").replace(":", "-").replace(".", "_"),
                         *([hashlib.sha1(" ".join(extra).encode()).hexdigest()[:10]] if extra else [])])
        run_dir = self.out / "runs" / name
        if self.reuse and (run_dir / "done").exists():
            return run_dir
        shutil.rmtree(run_dir, ignore_errors=True)
        common = ["--setup", setup, *flags, "--dtype", dtype, "--optimizer", optimizer, "--steps", str(steps),
                  "--fault", fault, "--out", str(run_dir)]
        if trainer == "moe" or trainer in MOE_VARIANTS:
            cmd = [self.torchrun, "--standalone", "--nproc-per-node", ranks, "--no-python", str(self.moe_train),
                   *common, *MOE_VARIANTS.get(trainer, []), *extra, "--rng-seed", str(seed)]
        else:
            cmd = [self.torchrun, "--standalone", "--nproc-per-node", ranks, str(self.transformer), *common,
                   *extra, "--seed", str(seed)]
        started = time.monotonic()
        proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        self.seconds += time.monotonic() - started
        self.runs += 1
        if proc.returncode != 0:
            raise TrainingFailed(proc, cmd)
        (run_dir / "done").touch()
        return run_dir

    def diff(self, base: Path, test: Path, last_step: int | None = None) -> "Verdict":
        cmd = [str(self.diff_logs), str(base), str(test)]
        if last_step is not None:
            cmd += ["--steps", f"0:{last_step}"]
        proc = subprocess.run(cmd + ["--json", "-"], capture_output=True, text=True)
        return Verdict.of(proc, " ".join(cmd))


@dataclass
class Verdict:
    rc: int
    command: str
    headline: str = ""  # the first unexplained divergence and its cause, for a bug
    step: int | None = None
    kind: str = ""
    name: str = ""
    rule: str = ""

    @staticmethod
    def of(proc: subprocess.CompletedProcess, command: str) -> "Verdict":
        v = Verdict(proc.returncode, command)
        if proc.returncode == 1:
            try:
                result = json.loads(proc.stdout)
            except json.JSONDecodeError:
                v.headline = "(no JSON)"
                return v
            first = result.get("first_unexplained_divergence") or result.get("first_divergence") or {}
            v.step, v.kind, v.name = first.get("step"), first.get("kind", ""), first.get("name", "")
            v.rule = (first.get("cause") or first.get("explanation") or {}).get("rule", "")
            v.headline = f"step {v.step} {v.kind} {v.name} [{v.rule}]"
        elif proc.returncode not in (0, 4):
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            v.headline = lines[-1] if lines else "(no output)"
        return v


@dataclass
class Tally:
    comparisons: int = 0
    equal: int = 0
    noise: int = 0
    alarms: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, v: Verdict, what: str) -> None:
        self.comparisons += 1
        if v.rc == 0:
            self.equal += 1
        elif v.rc == 4:
            self.noise += 1
        elif v.rc == 1:
            self.alarms.append(f"{what}: {v.headline}  ({v.command})")
        else:
            self.errors.append(f"{what}: exit {v.rc}: {v.headline}  ({v.command})")


def clean_matrix(r: Runner, layouts, seeds, steps, trainer="moe") -> dict[tuple[str, str, str], Tally]:
    tallies: dict[tuple[str, str, str], Tally] = {}
    for dtype, optimizer, seed in itertools.product(DTYPES, OPTIMIZERS, seeds):
        tally = tallies.setdefault((trainer, dtype, optimizer), Tally())
        single = r.train("single 1", dtype, optimizer, seed, steps, trainer=trainer)
        runs = {layout: r.train(layout, dtype, optimizer, seed, steps, trainer=trainer) for layout in layouts}
        for layout, run in runs.items():
            for last in range(steps):
                tally.add(r.diff(single, run, last),
                          f"{trainer} single 1 vs {layout}, {dtype} {optimizer} seed {seed} steps 0:{last}")
        for a, b in itertools.combinations(layouts, 2):
            tally.add(r.diff(runs[a], runs[b]), f"{trainer} {a} vs {b}, {dtype} {optimizer} seed {seed}")
        print(f"  clean {trainer} {dtype} {optimizer} seed {seed}: {tally.comparisons} compared so far, "
              f"{len(tally.alarms)} false alarm(s)", flush=True)
    return tallies


@dataclass
class Detection:
    fault: str
    dtype: str
    layout: str
    caught: dict[float, Verdict] = field(default_factory=dict)  # epsilon -> verdict

    def detected(self, eps: float) -> bool:
        """Called a bug, and headlined at the fault's own record."""
        v = self.caught[eps]
        return v.rc == 1 and RIGHT_RECORD[self.fault](v)

    def cell(self, eps: float) -> str:
        v = self.caught[eps]
        if v.rc == 1:
            return "bug" if self.detected(eps) else f"bug elsewhere: {v.headline}"
        return {4: "noise", 0: "equal"}.get(v.rc, f"exit {v.rc}")

    def limit(self) -> float | None:
        """The smallest epsilon from which on every larger one is detected."""
        limit = None
        for eps in sorted(self.caught, reverse=True):
            if not self.detected(eps):
                break
            limit = eps
        return limit


def bug_matrix(r: Runner, layouts, epsilons, structural, seed, steps):
    sized: list[Detection] = []
    for dtype in DTYPES:
        single = r.train("single 1", dtype, "sgd", seed, steps)
        for fault, layout in itertools.product(SIZED_FAULTS, layouts):
            d = Detection(fault, dtype, layout)
            for eps in epsilons:
                spec = SIZED_FAULTS[fault].format(factor=f"{1 + eps:.10g}")
                d.caught[eps] = r.diff(single, r.train(layout, dtype, "sgd", seed, steps, spec))
            sized.append(d)
            print(f"  bug {fault} {dtype} {layout}: detected from epsilon {d.limit()}", flush=True)
    plain: list[tuple[str, str, str, Verdict]] = []
    for dtype in DTYPES:
        single = r.train("single 1", dtype, "sgd", seed, steps)
        for fault, layout in structural:
            v = r.diff(single, r.train(layout, dtype, "sgd", seed, steps, fault))
            plain.append((fault, dtype, layout, v))
            print(f"  bug {fault} {dtype} {layout}: exit {v.rc} {v.headline}", flush=True)
    return sized, plain


def report(tallies, sized, plain, args, r: Runner) -> tuple[str, list[str]]:
    failures: list[str] = []
    lines = [f"# Calibration ({'quick' if args.quick else 'full'} matrix)", "",
             f"`{' '.join(sys.argv)}`, {r.runs} training runs in {r.seconds / 60:.1f} min", "",
             "## Clean runs (no fault)", "",
             "| trainer | dtype | optimizer | comparisons | equal | noise | false alarms | errors |",
             "|---|---|---|---|---|---|---|---|"]
    for (trainer, dtype, optimizer), t in tallies.items():
        lines.append(f"| {trainer} | {dtype} | {optimizer} | {t.comparisons} | {t.equal} | {t.noise} | "
                     f"{len(t.alarms)} | {len(t.errors)} |")
        failures += [f"false alarm: {a}" for a in t.alarms] + [f"error: {e}" for e in t.errors]
    lines += ["", "## Faults of a size (test run only, compared with the clean single-process run)", "",
              "| fault | dtype | layout | " + " | ".join(f"{e:g}" for e in sorted(sized[0].caught, reverse=True))
              + " | detected from | stated |" if sized else "",
              "|---|---|---|" + "---|" * (len(sized[0].caught) + 2) if sized else ""]
    for d in sized:
        cells = [d.cell(e) for e in sorted(d.caught, reverse=True)]
        stated = stated_limit(d.fault, d.dtype, d.layout)
        limit = d.limit()
        lines.append(f"| {d.fault} | {d.dtype} | {d.layout} | " + " | ".join(cells) +
                     f" | {limit if limit is not None else 'not detected'} | {stated if stated is not None else '-'} |")
        if stated is not None:
            missed = [e for e in d.caught if e >= stated and not d.detected(e)]
            if missed:
                failures.append(f"{d.fault} {d.dtype} {d.layout}: missed at epsilon {missed}, stated limit {stated}")
        for e, v in d.caught.items():
            if v.rc not in (0, 1, 4):
                failures.append(f"error: {d.fault} {d.dtype} {d.layout} epsilon {e}: exit {v.rc} {v.headline}")
    lines += ["", "## Faults without a size", "", "| fault | dtype | layout | verdict | headline |", "|---|---|---|---|---|"]
    for fault, dtype, layout, v in plain:
        promised = (fault, dtype) not in UNPROMISED_STRUCTURAL
        verdict = "bug" if v.rc == 1 else f"exit {v.rc}" + ("" if promised else " (not promised)")
        lines.append(f"| {fault} | {dtype} | {layout} | {verdict} | {v.headline} |")
        if v.rc != 1 and promised:
            failures.append(f"missed: {fault} {dtype} {layout}: exit {v.rc}  ({v.command})")
    if failures:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n", failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset: one seed, three layouts, fewer faults")
    ap.add_argument("--out", default="out/calibration", help="run directories and the report (default out/calibration)")
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", "build"),
                    help="the build directory (MOE_TRAIN and DIFF_LOGS name the binaries instead)")
    ap.add_argument("--torchrun", default=os.environ.get("TORCHRUN") or shutil.which("torchrun") or "torchrun")
    ap.add_argument("--seeds", type=int, nargs="+", help="seeds of the clean matrix")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse the training runs a previous call left in --out (same binaries only)")
    ap.add_argument("--no-bugs", action="store_true", help="the clean matrix only")
    ap.add_argument("--no-clean", action="store_true", help="the bug matrix only")
    trainers = ["moe", "transformer", *MOE_VARIANTS]
    ap.add_argument("--trainers", nargs="+", choices=trainers, default=trainers,
                    help="the trainers of the clean matrix (default all; moe-top1 is the MoE example with top-1 "
                         "routing, not in --quick; the bug matrix is the MoE example's)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build = Path(args.build)
    r = Runner(Path(os.environ.get("MOE_TRAIN", build / "examples" / "moe_train")),
               Path(os.environ.get("DIFF_LOGS", build / "bin" / "diff_logs")), args.torchrun, out, reuse=args.reuse)
    steps = QUICK_STEPS if args.quick else STEPS
    seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    tallies = {}
    if not args.no_clean:
        if "moe" in args.trainers:
            tallies |= clean_matrix(r, QUICK_LAYOUTS if args.quick else LAYOUTS, seeds, steps)
        if "transformer" in args.trainers:
            tallies |= clean_matrix(r, QUICK_TRANSFORMER_LAYOUTS if args.quick else TRANSFORMER_LAYOUTS, seeds,
                                    steps, trainer="transformer")
        for variant in MOE_VARIANTS:
            if variant in args.trainers and not args.quick:
                tallies |= clean_matrix(r, VARIANT_LAYOUTS, seeds, steps, trainer=variant)
    sized, plain = ([], []) if args.no_bugs else bug_matrix(
        r, QUICK_BUG_LAYOUTS if args.quick else BUG_LAYOUTS, QUICK_EPSILONS if args.quick else EPSILONS,
        QUICK_STRUCTURAL if args.quick else STRUCTURAL_FAULTS, seeds[0], steps)
    text, failures = report(tallies, sized, plain, args, r)
    (out / "calibration.md").write_text(text)
    (out / "calibration.json").write_text(json.dumps({
        "clean": {f"{tr} {d} {o}": {"comparisons": t.comparisons, "equal": t.equal, "noise": t.noise,
                                    "false_alarms": t.alarms, "errors": t.errors}
                  for (tr, d, o), t in tallies.items()},
        "sized": [{"fault": d.fault, "dtype": d.dtype, "layout": d.layout, "limit": d.limit(),
                   "verdicts": {f"{e:g}": {"rc": v.rc, "detected": d.detected(e), "headline": v.headline}
                                for e, v in d.caught.items()}} for d in sized],
        "plain": [{"fault": f, "dtype": dt, "layout": l, "rc": v.rc, "headline": v.headline} for f, dt, l, v in plain],
    }, indent=1))
    print(text)
    if failures:
        print(f"calibrate: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
