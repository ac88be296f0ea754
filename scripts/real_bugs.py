#!/usr/bin/env python3
"""The corpus of real numerical bugs (examples/real_bugs/): each bug's runs trained, compared with
diff_logs, and one table printed.

    scripts/real_bugs.py [NAME...] [--quick] [--out DIR] [--markdown FILE]
    scripts/real_bugs.py --releases [NAME...] [--quick]   the release lists they need, one a line

--quick: the subset ctest runs (real_bugs_quick). diff_logs: $DIFF_LOGS, else build/bin's.

Each folder holds a bug.json that names four runs, each a release (scripts/releases/<name>.txt,
installed by scripts/real_bugs.sh into $NUMPROBE_RELEASES; null for the project's venv alone, where
a reproduction's train.py carries the bug itself), the folder's train.py flags and a rank count:
the bug's comparison (`bug`: base against test, where the bug lives) and the fixed release's
comparison of the same layouts (`fixed`). A bug is named when its comparison exits 1 with the
FIRST UNEXPLAINED DIVERGENCE line matching the folder's expected.txt (a regular expression); its
fixed release is clean when `fixed` exits 0 or 4 and a second run of fixed's test compares with
the first bitwise (exit 0). Beside each, what comparing the loss curves alone shows on the bug's
runs: the first step at which the logged losses are apart by more than 1e-5 (relative) and the largest
difference.

Exit 0 only when every bug is named and every fixed release is clean; 1 otherwise, 2 on bad
input (a bug.json that does not say what it must)."""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = ROOT / "examples" / "real_bugs"
RELEASES = pathlib.Path(os.environ.get("NUMPROBE_RELEASES", pathlib.Path.home() / ".cache" / "numprobe" / "releases"))
HEADLINE = "FIRST UNEXPLAINED DIVERGENCE"
# Three bugs on six releases, one of each kind of first record (a gradient, an optimizer setting,
# a learning rate), among them a release whose Trainer hands its callbacks no optimizer (4.49.0).
QUICK = ["transformers-34191-ga-loss-mean", "transformers-35927-decay-norms",
         "transformers-37923-schedule-floor"]


class BadBug(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="bug folders (default: every one)")
    p.add_argument("--quick", action="store_true", help=f"the subset ctest runs: {', '.join(QUICK)}")
    p.add_argument("--out", default=str(ROOT / "out" / "real_bugs"), help="run directories and reports")
    p.add_argument("--markdown", default="", help="also write the table to this file")
    p.add_argument("--releases", action="store_true", help="print the release lists the bugs need and exit")
    return p.parse_args(argv)


def load_bugs(names):
    folders = sorted(d for d in CORPUS.iterdir() if (d / "bug.json").is_file())
    known = {d.name: d for d in folders}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadBug(f"no bug named {', '.join(unknown)} (bugs: {', '.join(known)})")
    return [load_bug(known[n]) for n in (names or known)]


def load_bug(folder):
    try:
        bug = json.loads((folder / "bug.json").read_text())
    except json.JSONDecodeError as e:
        raise BadBug(f"{folder / 'bug.json'}:{e.lineno}: {e.msg}") from None
    for key in ("framework", "title", "layout", "bug", "fixed"):
        if key not in bug:
            raise BadBug(f"{folder / 'bug.json'}: no '{key}'")
    for comparison in ("bug", "fixed"):
        for side in ("base", "test"):
            run = bug[comparison].get(side)
            if not isinstance(run, dict) or "release" not in run:
                raise BadBug(f"{folder / 'bug.json'}: {comparison}.{side} names no release")
    expected = (folder / "expected.txt").read_text().strip() if (folder / "expected.txt").is_file() else ""
    if not expected:
        raise BadBug(f"{folder}: no expected.txt (the regular expression the headline must match)")
    bug.update(name=folder.name, folder=folder, expected=re.compile(expected))
    return bug


def releases_of(bugs):
    return sorted({bug[c][s]["release"] for bug in bugs for c in ("bug", "fixed") for s in ("base", "test")}
                  - {None})


class Runner:
    """Trains each distinct run once (same script, release, flags and ranks: one run directory)."""

    def __init__(self, out):
        self.out = out
        self.done = {}
        self.seconds = 0.0

    def run(self, bug, spec, again=False):
        ranks = int(spec.get("ranks", 1))
        args = [str(a) for a in spec.get("args", [])]
        key = (bug["name"], spec["release"] or "", ranks, tuple(args), again)
        if key in self.done:
            return self.done[key]
        directory = self.out / bug["name"] / f"run{len([k for k in self.done if k[0] == bug['name']])}"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        release = RELEASES / spec["release"] if spec["release"] else None
        if release and not release.is_dir():
            raise BadBug(f"release {spec['release']} is not installed in {RELEASES} (scripts/real_bugs.sh installs it)")
        script = bug["folder"] / "train.py"
        launch = [sys.executable, str(script)] if ranks == 1 else \
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(script)]
        env = dict(os.environ, PROBE_DIR=str(directory / "logs"), OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(release or ""), os.environ.get("PYTHONPATH")])))
        started = time.monotonic()
        done = subprocess.run(launch + args + ["--losses", str(directory / "losses.json")],
                              capture_output=True, text=True, env=env)
        self.seconds += time.monotonic() - started
        (directory / "train.log").write_text(done.stdout + done.stderr)
        failed = done.returncode != 0
        self.done[key] = None if failed else directory
        if failed:
            print(f"{bug['name']}: {spec['release']} {' '.join(args)} on {ranks} rank(s) failed "
                  f"(exit {done.returncode}); its output: {directory / 'train.log'}", file=sys.stderr)
        return self.done[key]


def compare(base, test, report):
    """(exit code, the FIRST UNEXPLAINED DIVERGENCE line or '') of diff_logs BASE TEST."""
    exe = os.environ.get("DIFF_LOGS") or shutil.which("diff_logs", path=str(ROOT / "build" / "bin")) \
        or shutil.which("diff_logs")
    done = subprocess.run([exe, str(base / "logs"), str(test / "logs"), "--no-color"],
                          capture_output=True, text=True)
    report.write_text(done.stdout + done.stderr)
    line = next((l.strip() for l in done.stdout.splitlines() if l.startswith(HEADLINE)), "")
    return done.returncode, line


# A logged loss is read to 4 or 5 digits: two curves apart by less than this, relative, look alike.
CURVE_RTOL = 1e-5


def loss_curves(base, test):
    """What comparing the logged loss curves shows: (the first step at which they are apart by
    more than CURVE_RTOL, or None; the largest difference)."""
    a = json.loads((base / "losses.json").read_text())
    b = json.loads((test / "losses.json").read_text())
    diffs = [abs(x - y) for x, y in zip(a, b)]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if abs(x - y) > CURVE_RTOL * max(abs(x), abs(y))), None)
    return first, max(diffs, default=0.0)


def check_bug(bug, runner):
    started = time.monotonic()
    row = {"bug": bug["name"], "framework": bug["framework"], "layout": bug["layout"],
           "code": bug.get("code", "release")}
    out = runner.out / bug["name"]
    base, test = (runner.run(bug, bug["bug"][s]) for s in ("base", "test"))
    fixed_base, fixed_test = (runner.run(bug, bug["fixed"][s]) for s in ("base", "test"))
    fixed_again = runner.run(bug, bug["fixed"]["test"], again=True)
    if None in (base, test, fixed_base, fixed_test, fixed_again):
        row.update(exit="run failed", headline="", named=False, fixed="run failed", clean=False, loss="")
    else:
        row["exit"], row["headline"] = compare(base, test, out / "bug.txt")
        row["named"] = row["exit"] == 1 and bool(bug["expected"].search(row["headline"]))
        fixed_exit, _ = compare(fixed_base, fixed_test, out / "fixed.txt")
        self_exit, _ = compare(fixed_test, fixed_again, out / "fixed-self.txt")
        row["fixed"] = f"{fixed_exit}, self {self_exit}"
        row["clean"] = fixed_exit in (0, 4) and self_exit == 0
        first, largest = loss_curves(base, test)
        row["loss"] = f"alike (largest {largest:.2g})" if first is None else f"apart from step {first}, largest {largest:.3g}"
    row["seconds"] = round(time.monotonic() - started, 1)
    return row


def table(rows):
    head = "| bug | framework | code | layout | exit | FIRST UNEXPLAINED DIVERGENCE | expected | fixed (exit) | loss curves alone | s |"
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        headline = r["headline"].replace(HEADLINE, "").strip()
        lines.append(f"| {r['bug']} | {r['framework']} | {r['code']} | {r['layout']} | {r['exit']} | `{headline}` | "
                     f"{'yes' if r['named'] else 'NO'} | {r['fixed']}{'' if r['clean'] else ' NOT CLEAN'} | "
                     f"{r['loss']} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    try:
        bugs = load_bugs(args.names or (QUICK if args.quick else []))
        if args.releases:
            print("\n".join(releases_of(bugs)))
            return 0
        runner = Runner(pathlib.Path(args.out).resolve())
        rows = [check_bug(bug, runner) for bug in bugs]
    except BadBug as e:
        print(f"scripts/real_bugs.py: {e}", file=sys.stderr)
        return 2
    named = sum(r["named"] for r in rows)
    clean = sum(r["clean"] for r in rows)
    text = table(rows) + f"\n\nreal bugs: {named} of {len(rows)} named at their record, " \
                         f"{clean} of {len(rows)} fixed versions clean"
    print(text)
    (runner.out / "real-bugs.json").write_text(json.dumps(rows, indent=1))
    if args.markdown:
        pathlib.Path(args.markdown).write_text(text + "\n")
    return 0 if named == len(rows) and clean == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
