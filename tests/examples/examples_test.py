#!/usr/bin/env python3
"""Integration tests of examples/moe: moe_train under torchrun, then diff_logs.

    examples_test.py CASE        (CASE: pairs, fault-grads-none, fault-rng-per-rank, fault-nan,
                                  fault-skip-reduce, fault-init, fault-lr, noise-or-bug, fault-op,
                                  fault-op-backward, weights-zero3-pp-ddp, killed-rank, probe-off,
                                  html-report, tensor-parallel, fault-tensor-parallel,
                                  op-trace-tensor-parallel, op-dumps, replay-verdict, bisect-sp,
                                  bisect-pp, bisect-op, bisect-bad-input, bisect-interrupt,
                                  expert-parallel, fault-expert-parallel)

Environment (set by ctest): MOE_TRAIN, DIFF_LOGS, NUMPROBE_REPLAY, NUMPROBE_BISECT, TORCHRUN,
WORK (a scratch directory).
Each case prints what it ran and why it failed; the exit status is the verdict.
"""
import itertools
import json
import os
import shutil
import subprocess
import sys

MOE_TRAIN = os.environ["MOE_TRAIN"]
DIFF_LOGS = os.environ["DIFF_LOGS"]
NUMPROBE_REPLAY = os.environ.get("NUMPROBE_REPLAY", "")
NUMPROBE_BISECT = os.environ.get("NUMPROBE_BISECT", "")
TORCHRUN = os.environ["TORCHRUN"]
WORK = os.environ["WORK"]
STEPS = "2"
# Every kind recorded per microbatch must match bitwise across setups, and the weights of step 0.
MICROBATCH_KINDS = ["param", "rng", "input", "output", "tap", "output_grad", "mb_grad"]


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def train(name, setup, ranks, *flags, expect_ok=True, steps=STEPS, env_extra=None):
    """Runs moe_train; returns its run directory."""
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", str(ranks), "--no-python", MOE_TRAIN,
           "--setup", setup, "--steps", str(steps), "--out", out, *flags]
    print("$ " + " ".join(cmd), flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    print(proc.stdout[-3000:], flush=True)
    if expect_ok and proc.returncode != 0:
        fail(f"{setup} x{ranks} exited {proc.returncode}")
    return out


def diff(a, b, *flags, expect=None):
    """Runs diff_logs --json; returns the parsed result."""
    js = os.path.join(WORK, f"diff_{os.path.basename(a)}_{os.path.basename(b)}.json")
    cmd = [DIFF_LOGS, a, b, "--no-color", "--json", js, *flags]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    print(proc.stdout, flush=True)
    if proc.returncode == 2:
        fail("diff_logs could not read the runs")
    if expect is not None and proc.returncode != expect:
        fail(f"diff_logs exited {proc.returncode}, expected {expect}")
    with open(js) as f:
        result = json.load(f)
    result["text"] = proc.stdout
    return result


def first_divergence(result, step, kind, name=None):
    fd = result["first_divergence"]
    if fd is None:
        fail("no divergence reported")
    if fd["step"] != step or fd["kind"] != kind or (name is not None and fd["name"] != name):
        fail(f"first divergence is step {fd['step']} {fd['kind']} {fd['name']}, expected step {step} {kind} {name}")
    return fd


def cause(result, rule, must_mention=()):
    for c in result["likely_causes"]:
        if c["rule"] == rule and all(m in c["message"] for m in must_mention):
            return c
    fail(f"no likely cause [{rule}] mentioning {must_mention}: {result['likely_causes']}")


def check_fault_free_pair(a, b):
    """Step 0: per-microbatch records bitwise equal, grads equal or summation-order only."""
    r = diff(a, b, "--steps", "0")
    s = r["summary"]
    for kind in MICROBATCH_KINDS:
        row = s[kind]
        if row["equal"] == 0 or any(n for cls, n in row.items() if cls != "equal"):
            fail(f"{a} vs {b}: {kind} records are not all bitwise equal: {row}")
    if any(n for cls, n in s["scalar"].items() if cls != "equal"):
        fail(f"{a} vs {b}: step-0 loss differs: {s['scalar']}")
    grads = s["grad"]
    if grads["equal"] + grads["different"] == 0 or any(
            n for cls, n in grads.items() if cls not in ("equal", "different")):
        fail(f"{a} vs {b}: unexpected grad classes {grads}")
    if grads["different"] != r["summation_order_grads"]:
        fail(f"{a} vs {b}: {grads['different']} grads differ but only {r['summation_order_grads']} "
             "at summation-order size")
    if grads["different"]:
        first_divergence(r, 0, "grad")
        cause(r, "summation_order")
        if "summation-order size" not in r["text"]:
            fail("the report does not say the grads differ only at summation-order size")
    # All steps: losses per step reported with paired statistics.
    whole = diff(a, b)
    loss = [x for x in whole["series"] if x["kind"] == "scalar" and x["name"] == "loss"]
    if not loss or loss[0]["paired_steps"] != int(STEPS):
        fail(f"loss series missing or not paired over {STEPS} steps: {loss}")
    verdict = "bitwise equal" if grads["different"] == 0 else f"{grads['different']} grads at summation-order size"
    print(f"OK {os.path.basename(a)} vs {os.path.basename(b)}: {verdict}", flush=True)


def case_pairs():
    runs = [
        train("single", "single", 1),
        train("ddp2", "ddp", 2),
        train("zero3_2", "zero3", 2),
        train("pp2", "pp", 2),
        train("pp2_ddp2", "pp-ddp", 4, "--stages", "2"),
    ]
    for a, b in itertools.combinations(runs, 2):
        check_fault_free_pair(a, b)
    # Collectives through the backend with one rank (how a single GPU runs NCCL): same records.
    check_fault_free_pair(runs[0], train("zero3_1_backend", "zero3", 1, "--backend-at-one-rank"))


def case_fault_grads_none():
    # The motivating case: zero3 x4 against 2-stage pipeline x 4-way data parallel.
    a = train("zero3_4", "zero3", 4)
    b = train("pp2_ddp4_grads_none", "pp-ddp", 8, "--stages", "2", "--fault", "grads-none")
    r = diff(a, b, expect=1)
    fd = first_divergence(r, 0, "grad")
    if fd["class"] != "none_one_side":
        fail(f"first divergence class {fd['class']}, expected none_one_side")
    cause(r, "none_gradient", ["none in the test run", "all "])
    first_screen(r, "RESULT: differences found", "FIRST UNEXPLAINED DIVERGENCE", "[none_gradient]")
    if r["op_trace"]["trace_hint"] is not None:
        fail(f"a gradient never computed is no op to trace: {r['op_trace']['trace_hint']}")


def case_html_report():
    """The demo's two comparisons (scripts/demo.sh), a skipped all-reduce, an unreduced norm gradient
    under sequence parallelism and a scaled expert gradient as --html reports,
    rendered in Chromium: at 1280x800 the RESULT line, the "First unexplained divergence" panel
    and its cause's rule lie on the first screen, as the browser lays the page out."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "differ"))
    import html_check
    chromium = html_check.find_chromium()
    if not chromium:
        print("SKIP: chromium not found (scripts/setup.sh installs Debian's chromium)", flush=True)
        sys.exit(html_check.SKIP)
    seed = ("--rng-seed", "42")  # as scripts/demo.sh runs them
    a = train("html_zero3_4", "zero3", 4, *seed, steps=3)
    b = train("html_pp2_ddp4", "pp-ddp", 8, "--stages", "2", *seed, steps=3)
    c = train("html_pp2_ddp4_grads_none", "pp-ddp", 8, "--stages", "2", *seed, "--fault", "grads-none", steps=3)
    # Data-parallel 4 vs 2 stages x 2: noise from the reduction order, and one bug.
    param = "layers.1.attention.wq.weight"
    d = train("html_ddp4", "ddp", 4, *seed, steps=3)
    e = train("html_pp2_ddp2_skip_reduce", "pp-ddp", 4, "--stages", "2", *seed, "--fault", f"skip-reduce={param}",
              steps=3)
    # Tensor and sequence parallelism against one rank: partial sums set aside, and a bug.
    f = train("html_single", "single", 1, *seed, steps=3)
    g = train("html_ddp4_tp2_sp_norm", "ddp", 4, "--tp", "2", "--sp", *seed, "--fault", "sp-norm-unreduced", steps=3)
    # Expert parallelism against one rank: covered microbatches set aside, and a bug.
    h = train("html_ddp4_ep4_grad_scale", "ddp", 4, "--ep", "4", *seed, "--fault", "ep-grad-scale=0", steps=3)
    browser = html_check.Browser(chromium)
    try:
        for name, base, run, expect, fd_name, rule in [
                ("demo1", a, b, 0, None, None),
                ("demo2", a, c, 1, "tok_embeddings.weight", "none_gradient"),
                ("skip_reduce", d, e, 1, param, "unreduced_gradient"),
                ("sp_norm", f, g, 1, "layers.0.attention_norm.weight", "unreduced_gradient"),
                ("ep_grad_scale", f, h, 1, "layers.0.moe.experts.w1", "constant_factor")]:
            html = os.path.join(WORK, name + ".html")
            r = diff(base, run, "--html", html, expect=expect)
            dom, log = browser.dump_dom(html)
            problems = html_check.render_problems(dom, log)
            drawn = html_check.attr(dom, "heatmap-canvas", "data-cells-drawn")
            if drawn != str(r["records_compared"]):
                problems.append(f"heat map drew {drawn} cells, expected {r['records_compared']}")
            for what, count in (("bug", r["noise"]["bug_pairs"]), ("noise", r["noise"]["pairs"])):
                if html_check.attr(dom, "heatmap-canvas", f"data-cells-{what}") != str(count):
                    problems.append(f"heat map coloured {html_check.attr(dom, 'heatmap-canvas', f'data-cells-{what}')} "
                                    f"cells as {what}, the --json counts {count}")
            partial = r["partial_records"]["pairs"]
            if html_check.attr(dom, "partial-records", "data-pairs") != (str(partial) if partial else None):
                problems.append(f"the page's partial-records line says {html_check.attr(dom, 'partial-records', 'data-pairs')}"
                                f", the --json counts {partial}")
            covered = r["covered_records"]["pairs"]
            if html_check.attr(dom, "covered-records", "data-pairs") != (str(covered) if covered else None):
                problems.append(f"the page's covered-records line says {html_check.attr(dom, 'covered-records', 'data-pairs')}"
                                f", the --json counts {covered}")
            if fd_name is None and html_check.attr(dom, "no-divergence", "class") is None:
                problems.append("the equal runs' page does not say there is no divergence")
            if fd_name is not None and html_check.attr(dom, "fd-headline", "data-name") != fd_name:
                problems.append(f"first divergence panel names {html_check.attr(dom, 'fd-headline', 'data-name')}")
            # The first screen, measured in the browser at 1280x800.
            layout = html_check.measure(browser, html)[0]
            problems += html_check.first_screen_problems(
                layout, rule, required=("result", "panel", "title", "noise") if rule is None else
                ("result", "panel", "title", "record", "cause", "rule", "noise"))
            png = os.path.join(WORK, name + ".png")
            browser.screenshot(html, png, 1280, 800)
            problems += html_check.screenshot_problems(png, 1280, 800)
            if problems:
                fail(f"{html}: " + "; ".join(problems))
            boxes = layout["elements"]
            print(f"OK {html}: {drawn} cells, render {html_check.attr(dom, 'body', 'data-render-ms')} ms; first screen: "
                  f"result at {boxes['result']['top']:.0f} px, panel {boxes['panel']['top']:.0f}-"
                  f"{boxes['panel']['bottom']:.0f} px" + (f", [{rule}] at {boxes['rule']['top']:.0f} px" if rule else "") +
                  f"; screenshot {png}", flush=True)
    finally:
        browser.close()


def case_fault_rng_per_rank():
    a = train("single_rng", "single", 1)
    b = train("ddp2_rng", "ddp", 2, "--fault", "rng-per-rank")
    r = diff(a, b, expect=1)
    fd = first_divergence(r, 0, "rng", "layers.0.dropout")
    if fd["mb"] != 4:  # the first microbatch of rank 1 (8 microbatches over 2 ranks)
        fail(f"first divergence at mb {fd['mb']}, expected 4")
    cause(r, "rng", ["layers.0.dropout"])


def case_fault_nan():
    param = "layers.1.moe.experts.w1"
    a = train("zero3_nan_base", "zero3", 2)
    b = train("zero3_nan", "zero3", 2, "--fault", f"nan=1:{param}")
    r = diff(a, b, expect=1)
    first_divergence(r, 1, "grad", param)
    cause(r, "nonfinite", ["grad " + param, "step 1"])


def case_fault_skip_reduce():
    param = "layers.0.attention.wq.weight"
    a = train("ddp2_skip_base", "ddp", 2)
    b = train("ddp2_skip", "ddp", 2, "--fault", f"skip-reduce={param}")
    r = diff(a, b, expect=1)
    first_divergence(r, 0, "grad", param)
    cause(r, "unreduced_gradient", ["grad " + param, "not reduced"])
    issues = [i for i in r["test"]["issues"] if i["type"] == "replica_mismatch"]
    if not any(param in i["message"] for i in issues):
        fail(f"no replica_mismatch issue names {param}")
    # zero3 shards have no replicas to disagree: the cause comes from the equal mb_grads.
    a = train("zero3_skip_base", "zero3", 2)
    b = train("zero3_skip", "zero3", 2, "--fault", f"skip-reduce={param}")
    r = diff(a, b, expect=1)
    first_divergence(r, 0, "grad", param)
    cause(r, "wrong_reduction", [param, "every mb_grad"])


def case_fault_init():
    param = "layers.1.attention.wo.weight"
    a = train("zero3_init_base", "zero3", 2)
    b = train("zero3_init", "zero3", 2, "--fault", f"init={param}")
    r = diff(a, b, expect=1)
    first_divergence(r, 0, "param", param)
    c = cause(r, "init", ["param " + param, "step 0", "1 of "])
    if c["evidence"]["first_param"] != param or c["evidence"]["params_differing"] != 1:
        fail(f"[init] evidence: {c['evidence']}")
    if any(x["rule"] == "optimizer" for x in r["likely_causes"]):
        fail("[optimizer] must not fire for an initialization difference")
    if "evidence: step=0 first_param=" + param not in r["text"]:
        fail("the text report does not show the [init] evidence")


def case_fault_lr():
    """A learning rate halved at step 0: the probe records each parameter's rate (`<param>.lr`),
    so the headline is that record at step 0. Without optim records, the step-1 weights of an
    update whose gradients agree bitwise say the same."""
    for optimizer in ("sgd", "adamw"):
        a = train(f"zero3_lr_base_{optimizer}", "zero3", 2, "--optimizer", optimizer)
        b = train(f"zero3_lr_{optimizer}", "zero3", 2, "--optimizer", optimizer, "--fault", "lr=0:0.5")
        r = diff(a, b, expect=1)
        u = headline(r, 0, "optim", "optimizer")
        if not u["name"].endswith(".lr") or "reads another learning rate" not in u["cause"]["message"]:
            fail(f"the lr fault's headline is not a learning rate: {u['name']}: {u['cause']['message']}")
        print(f"OK lr fault with {optimizer}: [optimizer] {u['name']} at step 0", flush=True)

        no_optim = {"PROBE_KINDS": "-optim"}
        a = train(f"zero3_lr_base_{optimizer}_no_optim", "zero3", 2, "--optimizer", optimizer, env_extra=no_optim)
        b = train(f"zero3_lr_{optimizer}_no_optim", "zero3", 2, "--optimizer", optimizer, "--fault", "lr=0:0.5",
                  env_extra=no_optim)
        r = diff(a, b, expect=1)
        fd = first_divergence(r, 1, "param")
        c = cause(r, "optimizer", ["grads of step 0 agree bitwise", "param " + fd["name"] + " differs at step 1",
                                   "no optim records of step 0"])
        ev = c["evidence"]
        if ev["update_step"] != 0 or ev["first_param"] != fd["name"] or ev["optim_compared"] != 0:
            fail(f"[optimizer] evidence: {ev}")
        if any(x["rule"] == "init" for x in r["likely_causes"]):
            fail("[init] must not fire for an update difference")
        print(f"OK lr fault with {optimizer}, no optim records: [optimizer] names step 0 and {fd['name']}", flush=True)


FIRST_SCREEN = 40  # lines: what a terminal shows before the user scrolls

# Causes where op records have nothing to show: no PROBE_TRACE hint may point at them (nor at
# the noise before them).
UNTRACEABLE = {"optimizer", "init", "none_gradient", "missing_record", "data", "rng", "replica_mismatch",
               "unreduced_gradient", "wrong_reduction"}


def first_screen(result, *needles):
    """The text report's first FIRST_SCREEN lines hold every needle."""
    top = "\n".join(result["text"].splitlines()[:FIRST_SCREEN])
    missing = [n for n in needles if n not in top]
    if missing:
        fail(f"the first {FIRST_SCREEN} lines of the report lack {missing}:\n{top}")


def headline(result, step, kind, rule, name=None):
    """The first unexplained divergence: where, and the cause that explains it."""
    u = result["first_unexplained_divergence"]
    if u is None:
        fail(f"no unexplained divergence headlined; expected step {step} {kind} [{rule}]")
    if u["step"] != step or (kind is not None and u["kind"] != kind) or (name is not None and u["name"] != name):
        fail(f"the headline is step {u['step']} {u['kind']} {u['name']}, expected step {step} {kind} {name}")
    if rule is not None and u["cause"]["rule"] != rule:
        fail(f"the headline's cause is [{u['cause']['rule']}], expected [{rule}]: {u['cause']['message']}")
    rule = rule or u["cause"]["rule"]
    first_screen(result, "RESULT: ", "FIRST UNEXPLAINED DIVERGENCE", f"[{rule}]")
    hint = result["op_trace"]["trace_hint"]
    if rule in UNTRACEABLE and (hint is not None or "OP TRACE" in result["text"]):
        fail(f"an op trace cannot locate [{rule}], yet the report says to trace {hint}")
    print(f"OK headline step {step} {kind} {u['name']} [{rule}], in the first {FIRST_SCREEN} lines"
          f"{'' if hint is None else ', trace hint ' + hint}", flush=True)
    return u


def case_noise_or_bug():
    """Layouts of different data-parallel degrees (4 vs 2): their clean comparison is noise
    alone (exit 4); each fault in the second headlines its own cause above that noise."""
    base = train("nb_ddp4", "ddp", 4)
    pp = ("pp-ddp", 4, "--stages", "2")
    r = diff(base, train("nb_ppddp", *pp), expect=4)
    if r["first_unexplained_divergence"] is not None or r["result"] != "noise":
        fail(f"the clean comparison names a bug: {r['first_unexplained_divergence']}")
    if r["noise"]["pairs"] == 0 or r["noise"]["bug_pairs"] != 0 or "summation_order" not in r["noise"]["by_rule"]:
        fail(f"the clean comparison's noise summary: {r['noise']}")
    if r["first_divergence"]["explanation"]["category"] != "noise":
        fail(f"the first divergence is not labelled noise: {r['first_divergence']}")
    print(f"OK clean ddp x4 vs pp-ddp x4: {r['noise']['pairs']} pairs of noise, largest "
          f"{r['noise']['max_rel_diff']}", flush=True)
    param = "layers.1.attention.wq.weight"
    cases = [
        (("--fault", f"skip-reduce={param}"), (0, "grad", "unreduced_gradient", param)),
        (("--fault", f"nan=1:{param}"), (1, "grad", "nonfinite", param)),
        (("--fault", "grads-none"), (0, "grad", "none_gradient", None)),
        (("--fault", "rng-per-rank"), (0, "rng", "rng", None)),
        (("--fault", f"init={param}"), (0, "param", "init", param)),
        # The learning rate each parameter's update read (`<param>.lr`) differs at step 0.
        (("--fault", "lr=0:0.5"), (0, "optim", "optimizer", None)),
    ]
    for flags, (step, kind, rule, name) in cases:
        tag = flags[1].split("=")[0]
        r = diff(base, train(f"nb_ppddp_{tag}", *pp, *flags), expect=1)
        headline(r, step, kind, rule, name)
        if r["first_divergence"]["explanation"]["category"] == "noise" and "noise: " not in r["text"]:
            fail("the first divergence, noise, is not labelled so")


def case_weights_zero3_pp_ddp():
    """The demo's layouts with either optimizer: every param and optim record bitwise equal."""
    for optimizer in ("sgd", "adamw"):
        a = train(f"zero3_4_{optimizer}", "zero3", 4, "--optimizer", optimizer, steps=3)
        b = train(f"pp2_ddp4_{optimizer}", "pp-ddp", 8, "--stages", "2", "--optimizer", optimizer, steps=3)
        r = diff(a, b, expect=0)
        for kind in ("param", "optim"):
            row = r["summary"][kind]
            if row["equal"] == 0 or any(n for cls, n in row.items() if cls != "equal"):
                fail(f"{optimizer}: {kind} records are not all bitwise equal: {row}")
        print(f"OK zero3 x4 vs pp-ddp x8 with {optimizer}: {r['summary']['param']['equal']} param and "
              f"{r['summary']['optim']['equal']} optim records bitwise equal", flush=True)


def follow_trace_hint(name, setup, ranks, fault, *extra):
    """Compare without a trace, re-run both with the PROBE_TRACE diff_logs prints, compare again."""
    a = train(name + "_base", setup, ranks, *extra)
    b = train(name, setup, ranks, *extra, "--fault", fault)
    r = diff(a, b, expect=1)
    hint = r["op_trace"]["trace_hint"]
    if not hint or f"PROBE_TRACE='{hint}'" not in r["text"]:
        fail(f"no re-run setting printed: {r['op_trace']}")
    first_screen(r, "FIRST UNEXPLAINED DIVERGENCE", f"PROBE_TRACE='{hint}'")
    env = {"PROBE_TRACE": hint}
    a = train(name + "_base_traced", setup, ranks, *extra, env_extra=env)
    b = train(name + "_traced", setup, ranks, *extra, "--fault", fault, env_extra=env)
    traced = diff(a, b, expect=1)
    first_screen(traced, "FIRST UNEXPLAINED DIVERGENCE", "[op_root_cause]")
    return traced, hint


def check_html_root_cause(a, b, name):
    """The --html page of the traced comparison shows the root-cause op (when Chromium is here)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "differ"))
    import html_check
    chromium = html_check.find_chromium()
    if not chromium:
        print("chromium not found: the --html page is not rendered", flush=True)
        return
    html = os.path.join(WORK, "op_trace.html")
    diff(a, b, "--html", html, expect=1)
    browser = html_check.Browser(chromium)
    try:
        dom, log = browser.dump_dom(html)
    finally:
        browser.close()
    problems = html_check.render_problems(dom, log)
    if html_check.attr(dom, "op-root-cause", "data-name") != name:
        problems.append(f"the root-cause op panel names {html_check.attr(dom, 'op-root-cause', 'data-name')}")
    if problems:
        fail(f"{html}: " + "; ".join(problems))
    print(f"OK {html} shows the root-cause op {name}", flush=True)


def case_fault_op():
    layer = 1
    r, hint = follow_trace_hint("single_op", "single", 1, f"op={layer}")
    if f"scopes=^layers\\.{layer}(" not in hint or not hint.startswith("steps=0;"):
        fail(f"the hint should trace layer {layer} at step 0: {hint}")
    root = r["op_trace"]["root_cause"]
    if not root or not root["name"].startswith(f"layers.{layer}.attention/") or root["phase"] != "forward":
        fail(f"the root cause should be an op of layers.{layer}.attention in the forward: {r['op_trace']}")
    if "softmax" not in root["name"]:
        fail(f"the root cause should be the softmax: {root}")
    cause(r, "op_root_cause", [f"layers.{layer}.attention/aten::softmax#0"])
    print(f"OK root cause {root['name']} ({hint})", flush=True)
    check_html_root_cause(os.path.join(WORK, "single_op_base_traced"), os.path.join(WORK, "single_op_traced"),
                          root["name"])

    # The observer does not perturb: the traced run's losses equal the untraced run's bitwise.
    untraced = train("single_op_losses", "single", 1, "--fault", f"op={layer}")
    traced = os.path.join(WORK, "single_op_traced")
    same = diff(untraced, traced, "--kinds", "scalar,output,tap,mb_grad,grad", expect=0)
    if same["result"] != "equal":
        fail("tracing changed the run's results")
    print("OK traced and untraced runs bitwise equal", flush=True)


def case_fault_op_wrong_lowp():
    """The softmax bugs a replay tells apart: op-wrong (times 1 + 1e-3, another function) and
    op-lowp (through bfloat16, lost precision), each the headline at its layer and, traced, found
    where the runs run other ops around layer 2's softmax."""
    for fault, test_ops in [("op-wrong=2", ["aten::mul"]), ("op-lowp=2", ["aten::to", "aten::softmax"])]:
        r, hint = follow_trace_hint("single_" + fault.split("=")[0], "single", 1, fault)
        root = r["op_trace"]["root_cause"]
        if not root or root["phase"] != "forward" or not root["name"].startswith("layers.2.attention/"):
            fail(f"{fault}: the root cause should be in layers.2.attention's forward: {r['op_trace']}")
        if "the runs execute different ops in layers.2.attention" not in root["message"] or any(
                op not in root["message"] for op in test_ops):
            fail(f"{fault}: the root cause should name the test run's {test_ops}: {root['message']}")
        print(f"OK {fault}: {root['name']} ({hint})", flush=True)


def case_fault_op_backward():
    layer = 2
    r, hint = follow_trace_hint("single_opb", "single", 1, f"op-backward={layer}")
    root = r["op_trace"]["root_cause"]
    if not root or root["phase"] != "backward" or not root["name"].startswith(f"layers.{layer}.attention/aten::softmax#0/"):
        fail(f"the root cause should be in the backward of layers.{layer}.attention's softmax: {r['op_trace']}")
    print(f"OK backward root cause {root['name']} ({hint})", flush=True)


def case_killed_rank():
    # Rank 1 is SIGKILLed during step 2, after that step's collectives; torchrun then stops
    # rank 0, which may or may not have logged step 2 by then. Every line either rank wrote is
    # complete (the probe writes a step at once): the killed run just ends early.
    a = train("ddp2_full", "ddp", 2, steps=3)
    b = train("ddp2_killed", "ddp", 2, "--die-after-step", "1", "--die-rank", "1", steps=3,
              expect_ok=False)
    r = diff(a, b, expect=1)  # a killed run is never "equal"
    if "truncated" in r["test"]["issue_counts"]:
        # Rank 0 logged step 2, rank 1 did not: the run is cut at step 2 and says so.
        if r["truncated_at"] != 2 or r["first_divergence"] is not None:
            fail(f"steps 0-1 must agree and the comparison stop at step 2: {r['truncated_at']}, {r['first_divergence']}")
        if r["result"] != "incomplete" or r["test"]["steps"] != 3:
            fail(f"the result must be incomplete, with the killed run's 3 steps read: {r['result']}, {r['test']['steps']}")
        if "rank 1's log ends after step 1" not in r["text"]:
            fail("the report does not say that rank 1 stopped after step 1")
        diff(a, b, "--steps", ":1", expect=0)  # the complete steps alone agree
    else:
        # Both ranks stopped after step 1: the killed run is just shorter.
        fd = r["first_divergence"]
        if fd is None or fd["step"] != 2 or fd["class"] != "only_base":
            fail(f"steps 0-1 must agree and step 2 be missing from the killed run: {fd}")
    if r["test"]["records"] >= r["base"]["records"]:
        fail("the killed run has as many records as the full one")

    # A kill in the middle of a write leaves a torn last line: cut rank 1's log inside its last
    # line, as the OS would leave it, and check diff_logs reads the rest and says so.
    torn = os.path.join(WORK, "ddp2_torn")
    shutil.rmtree(torn, ignore_errors=True)
    shutil.copytree(b, torn)
    log = os.path.join(torn, "rank1", "diff.log")
    with open(log, "rb") as f:
        data = f.read()
    with open(log, "wb") as f:
        f.write(data[: data.rstrip(b"\n").rfind(b"\n") + 20])
    r = diff(a, torn)
    if "truncated" not in r["test"]["issue_counts"]:
        fail(f"diff_logs does not report the torn log as truncated: {r['test']['issue_counts']}")
    if "truncat" not in r["text"]:
        fail("the text report does not mention the truncation")


def case_probe_off():
    for setup, ranks, extra in [("single", 1, []), ("zero3", 2, []), ("pp-ddp", 4, ["--stages", "2"])]:
        fingerprints = []
        for probe in ("on", "off"):
            name = f"params_{setup}_{probe}"
            params = os.path.join(WORK, name)
            shutil.rmtree(params, ignore_errors=True)
            train(name + "_run", setup, ranks, *extra, "--probe", probe, "--params-out", params)
            fingerprints.append({f: open(os.path.join(params, f)).read() for f in sorted(os.listdir(params))})
        if fingerprints[0] != fingerprints[1]:
            fail(f"{setup}: final parameters differ with the probe on and off")
        print(f"OK {setup}: final parameters bitwise equal with the probe on and off", flush=True)

    # PROBE_* variables set defaults; a flag on the command line wins (--out over PROBE_DIR).
    env_dir = os.path.join(WORK, "probe_dir_from_env")
    shutil.rmtree(env_dir, ignore_errors=True)
    out = train("out_flag_wins", "single", 1, steps=1, env_extra={"PROBE_DIR": env_dir})
    if os.path.exists(env_dir) or not os.path.exists(os.path.join(out, "rank0", "diff.log")):
        fail("--out must win over PROBE_DIR")
    print("OK --out wins over PROBE_DIR", flush=True)

    # A bad --fault is refused before the probe makes its run directory; one that cannot fire
    # in the run's setup is warned about.
    bad_out = os.path.join(WORK, "bad_fault")
    shutil.rmtree(bad_out, ignore_errors=True)
    proc = subprocess.run([MOE_TRAIN, "--steps", "1", "--fault", "nan=oops", "--out", bad_out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if proc.returncode == 0 or "--fault 'nan=oops'" not in proc.stdout or os.path.exists(bad_out):
        fail(f"a bad --fault must fail before the run directory exists (exit {proc.returncode}): {proc.stdout}")
    proc = subprocess.run([MOE_TRAIN, "--steps", "1", "--fault", "skip-reduce=output.weight", "--probe", "off"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if proc.returncode != 0 or "has no effect here" not in proc.stdout:
        fail(f"skip-reduce with one data-parallel rank must warn: {proc.stdout}")
    print("OK bad and ineffective faults", flush=True)


def shard_field(run, kind, name):
    """The shard= field of rank 0's step-0 record of (kind, name), or None."""
    with open(os.path.join(run, "rank0", "diff.log")) as f:
        for line in f:
            if line.startswith(f"step=0 kind={kind} name={name} "):
                fields = dict(x.split("=", 1) for x in line.split() if "=" in x)
                return fields.get("shard")
    fail(f"{run}: no step-0 {kind} record {name}")


def case_tensor_parallel():
    """Tensor and sequence parallelism against layouts without them: no unexplained divergence
    (exit 0 or 4), what the row-parallel sums change explained by [partial_sum], the split
    parameters recorded as their shards, and --tp 1 changing nothing."""
    single = train("tp_single", "single", 1)
    same = train("tp_single_tp1", "single", 1, "--tp", "1")
    log = os.path.join("rank0", "diff.log")
    if open(os.path.join(single, log), "rb").read() != open(os.path.join(same, log), "rb").read():
        fail("--tp 1 changed the single run's log")
    print("OK --tp 1 leaves the log byte for byte as it is", flush=True)
    zero3 = train("tp_zero3_4", "zero3", 4)
    pairs = [
        (single, "tp_ddp2_tp2", ("ddp", 2, "--tp", "2")),
        (single, "tp_ddp4_tp2_sp", ("ddp", 4, "--tp", "2", "--sp")),
        (single, "tp_ppddp8_tp2_sp", ("pp-ddp", 8, "--stages", "2", "--tp", "2", "--sp")),
        (single, "tp_zero3_4_tp2_sp", ("zero3", 4, "--tp", "2", "--sp")),
        (single, "tp_pp4_tp2", ("pp", 4, "--tp", "2")),
        (zero3, "tp_ppddp8_tp2", ("pp-ddp", 8, "--stages", "2", "--tp", "2")),
    ]
    for base, name, (setup, ranks, *flags) in pairs:
        test = train(name, setup, ranks, *flags)
        r = diff(base, test)
        if r["result"] not in ("equal", "noise") or r["first_unexplained_divergence"] is not None:
            fail(f"{name}: the clean comparison names a bug: {r['first_unexplained_divergence']}")
        if "partial_sum" not in r["noise"]["by_rule"]:
            fail(f"{name}: no divergence explained by the row-parallel sums [partial_sum]: {r['noise']}")
        for kind, param, want in [("param", "layers.0.attention.wq.weight", "[96,64]@"),
                                  ("param", "layers.0.attention.wo.weight", "[64,64]@"),
                                  ("grad", "layers.1.moe.shared_experts.w2.weight", "[64,64]@")]:
            shard = shard_field(test, kind, param)
            if shard is None or not shard.startswith(want):
                fail(f"{name}: {kind} {param} has shard={shard}, expected {want}...")
        print(f"OK {os.path.basename(base)} vs {name}: {r['result']}, noise by rule {r['noise']['by_rule']}",
              flush=True)


def case_fault_tensor_parallel():
    """The bugs of tensor and sequence parallelism, each the headline against the single run, on
    more than one layer; a fault of a layout the run does not have changes nothing."""
    base = train("ftp_single", "single", 1)
    tp = ("ddp", 2, "--tp", "2")
    sp = ("ddp", 4, "--tp", "2", "--sp")
    cases = [
        ("tp_no_reduce_1", tp, "tp-no-reduce=1", (0, "tap", "replica_mismatch", "layers.1")),
        ("tp_no_reduce_3", tp, "tp-no-reduce=3", (0, "tap", "replica_mismatch", "layers.3")),
        ("sp_no_reduce_2", sp, "tp-no-reduce=2", (0, "tap", "unexplained", "layers.2")),
        ("sp_norm_unreduced", sp, "sp-norm-unreduced", (0, "grad", "unreduced_gradient", None)),
        ("sp_dropout_seed", sp, "sp-dropout-seed", (0, "tap", "unexplained", "layers.0")),
        # zero3 rows of a tensor-parallel slice: the skipped reduce-scatter keeps the slice's rows.
        # Shards have no replicas to disagree, and the mb_grads carry the row-parallel noise: the
        # grad is beyond what that noise explains.
        ("zero3_tp_skip_reduce", ("zero3", 4, "--tp", "2"), "skip-reduce=layers.1.attention.wq.weight",
         (0, "grad", "unexplained", "layers.1.attention.wq.weight")),
    ]
    for name, layout, fault, (step, kind, rule, record) in cases:
        r = diff(base, train("ftp_" + name, *layout, "--fault", fault), expect=1)
        u = headline(r, step, kind, rule, record)
        if fault == "sp-norm-unreduced" and not u["name"].endswith("norm.weight"):
            fail(f"sp-norm-unreduced headlines {u['name']}, not a norm weight")
    # Accepted without the layout it needs, warned about, and without effect.
    for fault in ("tp-no-reduce=1", "sp-norm-unreduced", "sp-dropout-seed"):
        out = train("ftp_single_" + fault.split("=")[0], "single", 1, "--fault", fault)
        diff(base, out, expect=0)
    print("OK faults of tp and sp are accepted, and change nothing, without tp or sp", flush=True)


def case_op_trace_tensor_parallel():
    """Op traces across layouts: the ops of a tensor-parallel run, recorded as pieces of their
    split scope, compose and align with the single run's; the root cause of a fault in layer 0
    (whose inputs come before any row-parallel sum) is named, and clean traced comparisons of
    tp and tp + sp layouts against the single run name no bug."""
    # Untraced, op=0 (layer 0's softmax in float64, rounded back) stays within the noise of the
    # row-parallel sums after it: the records say noise. The op itself differs.
    hint = "steps=0;scopes=^layers\\.0(\\.|$);mb=0"
    env = {"PROBE_TRACE": hint}
    base_traced = train("optp_single_traced", "single", 1, env_extra=env)
    traced = diff(base_traced, train("optp_tp_traced", "ddp", 2, "--tp", "2", "--fault", "op=0", env_extra=env),
                  expect=1)
    root = traced["op_trace"]["root_cause"]
    if not root or root["name"] != "layers.0.attention/aten::softmax#0" or root["phase"] != "forward":
        fail(f"the root cause should be layer 0's softmax: {traced['op_trace']}")
    first_screen(traced, "FIRST UNEXPLAINED DIVERGENCE", "[op_root_cause] layers.0.attention/aten::softmax#0")
    split = record_fields(os.path.join(WORK, "optp_tp_traced"), 1, 0, "op", "layers.0.attention/aten::softmax#0", 0)
    if not split or split.get("split") != "1/2" or "cand" not in split:
        fail(f"rank 1's softmax record does not say it is the piece 1/2 of a split scope: {split}")
    print(f"OK root cause {root['name']} across single 1 and ddp 2 --tp 2 ({hint})", flush=True)
    for name, layout in [("optp_tp_clean", ("ddp", 2, "--tp", "2")), ("optp_sp_clean", ("ddp", 4, "--tp", "2", "--sp"))]:
        clean = diff(base_traced, train(name, *layout, env_extra=env))
        if clean["result"] not in ("equal", "noise") or clean["first_unexplained_divergence"] is not None:
            fail(f"{name}: the clean traced comparison names a bug: {clean['first_unexplained_divergence']}")
        ops = clean["summary"]["op"]
        if ops["equal"] < 100:
            fail(f"{name}: too few op records aligned bitwise with the single run's: {ops}")
        print(f"OK traced single 1 vs {' '.join(map(str, layout))}: {clean['result']}, op records {ops}", flush=True)
    # The observer does not perturb: hashing the pieces changes none of the tp run's results.
    untraced = train("optp_tp_untraced", "ddp", 2, "--tp", "2")
    same = diff(untraced, os.path.join(WORK, "optp_tp_clean"), "--kinds", "scalar,output,tap,mb_grad,grad", expect=0)
    if same["result"] != "equal":
        fail("tracing the split scopes changed the tp run's results")
    print("OK traced and untraced ddp 2 --tp 2 runs bitwise equal", flush=True)


def case_op_dumps():
    """PROBE_TRACE dump=1: every traced op record names its dump, torch.load opens each with its
    defaults (weights_only=True) as (schema, name, arguments, outputs), and the run's results are
    bitwise those of the run without a trace."""
    trace = "steps=0;scopes=^layers\\.2(\\.|$);mb=0;dump=1"
    run = train("dump_single", "single", 1, env_extra={"PROBE_TRACE": trace})
    rank_dir = os.path.join(run, "rank0")
    dumps, records = set(), 0
    with open(os.path.join(rank_dir, "diff.log")) as f:
        for line in f:
            if " kind=op " not in line:
                continue
            records += 1
            fields = dict(x.split("=", 1) for x in line.split() if "=" in x)
            if "dump" not in fields:
                fail(f"an op record without dump=: {line[:200]}")
            dumps.add(fields["dump"])
    if records < 50:
        fail(f"only {records} op records traced")
    python = os.path.join(os.path.dirname(TORCHRUN), "python")
    check = (
        "import sys, torch\n"
        "for path in sys.argv[1:]:\n"
        "    d = torch.load(path)\n"
        "    assert isinstance(d, tuple) and len(d) == 4 and isinstance(d[0], str) and isinstance(d[2], tuple), path\n"
        "    assert d[0] == '' or d[0].startswith('aten::'), (path, d[0])\n"
        "print('loaded', len(sys.argv) - 1)\n")
    proc = subprocess.run([python, "-c", check, *[os.path.join(rank_dir, d) for d in sorted(dumps)]],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if proc.returncode != 0:
        fail(f"torch.load refused a dump: {proc.stdout[-2000:]}")
    print(f"OK {records} op records, {len(dumps)} dumps, each opened by torch.load: {proc.stdout.strip()}", flush=True)
    untraced = train("dump_single_untraced", "single", 1)
    same = diff(untraced, run, "--kinds", "scalar,output,tap,mb_grad,grad", expect=0)
    if same["result"] != "equal":
        fail("dumping changed the run's results")
    print("OK the run with dumps and the run without a trace bitwise equal", flush=True)


def replay(a, b, *flags, expect, js=None):
    """Runs numprobe_replay; returns its verdict document (written to js, else into WORK)."""
    js = js or os.path.join(WORK, f"replay_{os.path.basename(b)}.json")
    cmd = [NUMPROBE_REPLAY, a, b, "--json", js, *flags]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(proc.stdout, flush=True)
    if proc.returncode != expect:
        fail(f"numprobe_replay exited {proc.returncode}, expected {expect}")
    with open(js) as f:
        verdict = json.load(f)
    if not proc.stdout.startswith("REGION  step 0 mb 0 forward") or f"VERDICT  {verdict['verdict']}" not in proc.stdout:
        fail("numprobe_replay's first lines should name the region, then the verdict")
    return verdict


def case_replay_verdict():
    """The issue's acceptance: `ddp 2` against `single 1` with a softmax fault in layer 2, traced
    with dumps: numprobe_replay says noise for op= (float64, rounded back), different math for
    op-wrong= (times 1 + 1e-3) and precision: test for op-lowp= (through bfloat16); diff_logs
    offers the command, then shows the verdict; an op that inherits is `inputs differ`, a trace
    without dumps `not replayable`."""
    trace = {"PROBE_TRACE": "steps=0;scopes=^layers\\.2(\\.|$);mb=0;dump=1"}
    base = train("replay_ddp2", "ddp", 2, env_extra=trace)
    for fault, verdict, code in [("op=2", "noise", 0), ("op-wrong=2", "different math", 1),
                                 ("op-lowp=2", "precision: test", 1)]:
        test = train("replay_" + fault.split("=")[0], "single", 1, "--fault", fault, env_extra=trace)
        before = diff(base, test)
        if not (before["replay_command"] or "").startswith("numprobe_replay ") or "numprobe_replay" not in before["text"]:
            fail(f"{fault}: diff_logs should print the replay command: {before['replay_command']}")
        v = replay(base, test, expect=code, js=os.path.join(test, "replay.json"))  # where diff_logs looks
        if v["verdict"] != verdict:
            fail(f"{fault}: verdict {v['verdict']}, expected {verdict}: {v['evidence']}")
        after = diff(base, test)
        if (after["replay"] or {}).get("verdict") != verdict or f"REPLAY VERDICT  {verdict}" not in after["text"]:
            fail(f"{fault}: diff_logs should show the verdict beside the test run: {after['replay']}")
        print(f"OK {fault}: {verdict} ({v['evidence'][-1]})", flush=True)
    # The op after the region takes the inherited difference: not where the runs part.
    v = replay(base, os.path.join(WORK, "replay_op-wrong"), "--op", "layers.2.attention/aten::matmul#4", expect=3)
    if v["verdict"] != "inputs differ":
        fail(f"matmul#4 inherits the difference: {v['verdict']} {v['reason']}")
    print(f"OK --op matmul#4: inputs differ ({v['reason'][:80]}...)", flush=True)
    no_dump = {"PROBE_TRACE": trace["PROBE_TRACE"].replace(";dump=1", "")}
    plain_base = train("replay_ddp2_nodump", "ddp", 2, env_extra=no_dump)
    plain_test = train("replay_op_nodump", "single", 1, "--fault", "op=2", env_extra=no_dump)
    if diff(plain_base, plain_test)["replay_command"] is not None:
        fail("without dumps diff_logs should offer no replay")
    v = replay(plain_base, plain_test, expect=3)
    if v["verdict"] != "not replayable" or "not dumped" not in v["reason"]:
        fail(f"a trace without dumps: {v['verdict']} {v['reason']}")
    print(f"OK without dumps: not replayable ({v['reason']})", flush=True)


def bisect_launch(flags):
    """The example as numprobe_bisect's --launch template: dp, tp, pp (and sp, f) its degrees."""
    return (f"{TORCHRUN} --standalone --nproc-per-node {{world}} --no-python {MOE_TRAIN} --setup pp-ddp "
            f"--stages {{pp}} --steps 2 --out {{out}} {flags}")


def bisect(name, launch, world, base, test, expect):
    """Runs numprobe_bisect; returns (its output, its JSON answer)."""
    out = os.path.join(WORK, name)
    shutil.rmtree(out, ignore_errors=True)
    js = os.path.join(WORK, name + ".json")
    cmd = [NUMPROBE_BISECT, "--launch", launch, "--world", world, "--base", base, "--test", test, "--out", out,
           "--json", js]
    print("$ " + " ".join(cmd), flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    print(proc.stdout, flush=True)
    if proc.returncode != expect:
        fail(f"numprobe_bisect exited {proc.returncode}, expected {expect}")
    answer = None
    if os.path.exists(js):
        with open(js) as f:
            answer = json.load(f)
    return proc.stdout, answer


def case_bisect_sp():
    """The issue's acceptance: dp=4,tp=1,pp=1,sp=0 against dp=2,tp=2,pp=2,sp=1, every run with the
    norm gradients unreduced under sequence parallelism: the culprit is sp (tp is what it needs to
    run), the headline the norm weight's gradient; without the fault, noise."""
    launch = bisect_launch("--tp {tp} $([ {sp} = 1 ] && echo --sp)")
    text, answer = bisect("bisect_sp", launch + " --fault sp-norm-unreduced", "dp,tp,pp", "dp=4,tp=1,pp=1,sp=0",
                          "dp=2,tp=2,pp=2,sp=1", expect=1)
    if "\nCULPRIT  sp 0 -> 1 (at " not in text or answer["culprit"]["degrees"] != ["sp"]:
        fail(f"the culprit should be sp: {answer and answer['culprit']}")
    if answer["culprit"]["prerequisites"] != ["tp"]:
        fail(f"sp needs tp > 1 to run: {answer['culprit']['prerequisites']}")
    head = answer["comparison"]["first_unexplained_divergence"]
    if head["kind"] != "grad" or not head["name"].endswith("norm.weight") or "FIRST UNEXPLAINED DIVERGENCE" not in text:
        fail(f"the headline should be a norm weight's gradient: {head['kind']} {head['name']}")
    if any(r["config"] == answer["runs"][0]["config"] for r in answer["runs"][1:] if not r["traced"]):
        fail("a configuration ran twice")
    print(f"OK sp: {answer['culprit']['text']}, {len(answer['runs'])} runs, {answer['wall_seconds']:.0f} s", flush=True)
    text, answer = bisect("bisect_sp_clean", launch, "dp,tp,pp", "dp=4,tp=1,pp=1,sp=0", "dp=2,tp=2,pp=2,sp=1", expect=4)
    if "NO CULPRIT" not in text or len(answer["runs"]) != 2:
        fail("without the fault: noise, from the two runs alone")
    print("OK without the fault: noise (exit 4), 2 runs", flush=True)


def case_bisect_pp():
    """Gradients read as None only where a pipeline schedule runs the backward: blamed on pp."""
    text, answer = bisect("bisect_pp", bisect_launch("--fault pp-grads-none"), "dp,pp", "dp=4,pp=1", "dp=2,pp=2",
                          expect=1)
    if answer["culprit"]["degrees"] != ["pp"] or "\nCULPRIT  pp 1 -> 2 (at dp=4,pp=1)" not in text:
        fail(f"the culprit should be pp at dp=4: {answer['culprit']}")
    if answer["comparison"]["first_unexplained_divergence"]["class"] != "none_one_side":
        fail("the headline should be a gradient that is none in the pipelined run")
    print(f"OK pp: {answer['culprit']['text']}", flush=True)


def case_bisect_op():
    """A code change as a degree (f: layer 2's softmax in float64): blamed, its root-cause op named
    by the traced re-run, its replay noise."""
    text, answer = bisect("bisect_op", bisect_launch("$([ {f} = 1 ] && echo --fault op=2)"), "dp,pp",
                          "dp=4,pp=1,f=0", "dp=2,pp=2,f=1", expect=1)
    if answer["culprit"]["degrees"] != ["f"]:
        fail(f"the culprit should be f: {answer['culprit']}")
    if not answer["root_cause_op"].startswith("layers.2.attention/aten::softmax#0"):
        fail(f"the root-cause op should be layer 2's softmax: {answer['root_cause_op']}")
    if NUMPROBE_REPLAY and not answer["verdict"].startswith("noise"):
        fail(f"the replay should say noise: {answer['verdict']}")
    if not any(r["traced"] for r in answer["runs"]) or not os.path.exists(answer["report"] or "/"):
        fail("the traced re-runs and the report are missing")
    print(f"OK op: {answer['root_cause_op'][:60]}..., verdict {answer['verdict'][:5]}", flush=True)


def case_bisect_bad_input():
    """Bad templates are refused before any run (exit 2); a base run that fails ends it (exit 3)
    with its command and log."""
    for launch, base, test, says in [
            ("train {dp}", "dp=1", "dp=2", "has no {out}"),
            ("train {dp} --out {out}", "dp=1,tp=1", "dp=2,tp=1", "name tp, which neither"),
            ("train {dp} {world} --out {out}", "dp=1", "dp=2", "{world} but --world"),
            ("train {dp} {sp} --out {out}", "dp=1", "dp=2", "{sp}, which --base")]:
        proc = subprocess.run([NUMPROBE_BISECT, "--launch", launch, "--base", base, "--test", test, "--out",
                               os.path.join(WORK, "bad")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 2 or says not in proc.stdout:
            fail(f"{launch!r}: exit {proc.returncode}, {proc.stdout!r}; expected 2 saying {says!r}")
    text, answer = bisect("bisect_fails", bisect_launch("--no-such-flag"), "dp,pp", "dp=4,pp=1", "dp=2,pp=2", expect=3)
    if "the base run failed" not in text or "command: " not in text or "dp4-pp1.log" not in text:
        fail("a failed base run should be reported with its command and log")
    print("OK bad input: exit 2 before any run, a failed base run exit 3 with its command and log", flush=True)


def case_bisect_interrupt():
    """Ctrl-C stops the run under way, torchrun and every rank (torchrun starts its workers with
    setsid, outside the run's process group), and prints what was found."""
    import signal
    import time
    out = os.path.join(WORK, "bisect_int")
    shutil.rmtree(out, ignore_errors=True)
    launch = bisect_launch("").replace("--steps 2", "--steps 100000")
    js = os.path.join(WORK, "bisect_int.json")
    proc = subprocess.Popen([NUMPROBE_BISECT, "--launch", launch, "--world", "dp,pp", "--base", "dp=4,pp=1",
                             "--test", "dp=2,pp=2", "--out", out, "--json", js],
                            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ranks = []
    for _ in range(300):  # the base run's 4 ranks started
        time.sleep(0.1)
        ranks = subprocess.run(["pgrep", "-f", f"{MOE_TRAIN} .*--out {out}/"], stdout=subprocess.PIPE,
                               text=True).stdout.split()
        if len(ranks) >= 4:
            break
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    print(text, flush=True)
    if len(ranks) < 4:
        fail(f"the base run's ranks never started: {ranks}")
    if proc.returncode != 130 or "INTERRUPTED" not in text or "RUNS  1 runs" not in text:
        fail(f"exit {proc.returncode}: Ctrl-C should stop the run and print what was found (exit 130)")
    left = subprocess.run(["pgrep", "-f", f"--out {out}/"], stdout=subprocess.PIPE, text=True).stdout.strip()
    if left:
        fail(f"the run's processes were left running: {left}")
    with open(js) as f:
        if json.load(f)["exit_code"] != 130:
            fail("the JSON should say the bisection was interrupted")
    print(f"OK Ctrl-C: torchrun and its {len(ranks)} ranks stopped, exit 130", flush=True)


def record_fields(run, rank, step, kind, name, mb=None):
    """The fields of a record in rank's log, or None."""
    prefix = f"step={step} kind={kind} name={name} " + ("" if mb is None else f"mb={mb} ")
    with open(os.path.join(run, f"rank{rank}", "diff.log")) as f:
        for line in f:
            if line.startswith(prefix):
                return dict(x.split("=", 1) for x in line.split() if "=" in x)
    return None


def case_expert_parallel():
    """Expert parallelism against layouts without it: no unexplained divergence (exit 0 or 4),
    the expert gradients' per-dispatch records set aside as covering several microbatches,
    expert weights recorded as their shards, two expert-parallel layouts with the same dispatches
    compared record for record, and --ep 1 changing nothing."""
    ddp = train("ep_ddp2", "ddp", 2)
    same = train("ep_ddp2_ep1", "ddp", 2, "--ep", "1")
    for rank in (0, 1):
        log = os.path.join(f"rank{rank}", "diff.log")
        if open(os.path.join(ddp, log), "rb").read() != open(os.path.join(same, log), "rb").read():
            fail("--ep 1 changed the ddp run's log")
    print("OK --ep 1 leaves the log byte for byte as it is", flush=True)
    single = train("ep_single", "single", 1)
    pairs = [
        ("ep_ddp4_ep4", ("ddp", 4, "--ep", "4"), "[8,32,64]@[2,0,0]", ["0", "2", "4", "6"]),
        ("ep_zero3_4_ep2", ("zero3", 4, "--ep", "2"), "[8,32,64]@[0,0,0]", ["0", "2"]),
        ("ep_ppddp8_tp2_sp_ep2", ("pp-ddp", 8, "--stages", "2", "--tp", "2", "--sp", "--ep", "2"),
         "[8,32,64]@[0,0,0]", ["0", "4"]),
    ]
    runs = {}
    for name, (setup, ranks, *flags), shard, covers in pairs:
        test = runs[name] = train(name, setup, ranks, *flags)
        r = diff(single, test)
        if r["result"] not in ("equal", "noise") or r["first_unexplained_divergence"] is not None:
            fail(f"{name}: the clean comparison names a bug: {r['first_unexplained_divergence']}")
        if r["covered_records"]["pairs"] == 0:
            fail(f"{name}: no expert gradient set aside as covering several microbatches: {r['covered_records']}")
        # ddp 4 --ep 4: rank 1 holds experts 2 and 3; zero3 4 --ep 2: rank 0 the rows of experts
        # 0 and 1 (its half of experts 0-3); pp-ddp: rank 0 experts 0-3.
        rank = 1 if name == "ep_ddp4_ep4" else 0
        param = record_fields(test, rank, 0, "param", "layers.0.moe.experts.w1")
        if param is None or param.get("shard") != shard:
            fail(f"{name}: rank {rank}'s param layers.0.moe.experts.w1 has shard={param and param.get('shard')}, "
                 f"expected {shard}")
        mb_grad = record_fields(test, rank, 0, "mb_grad", "layers.0.moe.experts.w1", mb=0)
        if mb_grad is None or mb_grad.get("covers") != "[" + ",".join(covers) + "]":
            fail(f"{name}: rank {rank}'s mb_grad layers.0.moe.experts.w1 mb 0 covers "
                 f"{mb_grad and mb_grad.get('covers')}, expected [{','.join(covers)}]")
        print(f"OK single vs {name}: {r['result']}, noise by rule {r['noise']['by_rule']}, "
              f"{r['covered_records']['pairs']} covered records set aside", flush=True)
    # Against the same data-parallel layout without --ep: step 0's per-microbatch records bitwise
    # equal (the forward, the activations' gradients, every mb_grad but the experts' set aside),
    # the grads too but the experts', which sum their tokens grouped by dispatch.
    r = diff(train("ep_ddp4", "ddp", 4), runs["ep_ddp4_ep4"], "--steps", "0")
    s = r["summary"]
    for kind in MICROBATCH_KINDS:
        if s[kind]["equal"] == 0 or any(n for cls, n in s[kind].items() if cls != "equal"):
            fail(f"ddp 4 vs ddp 4 --ep 4: {kind} records are not all bitwise equal: {s[kind]}")
    experts = 3 * 4  # w1, w2, w3 of 4 layers
    if (r["result"] != "noise" or s["grad"]["different"] > experts or
            r["noise"]["by_rule"].get("summation_order") != s["grad"]["different"]):
        fail(f"ddp 4 vs ddp 4 --ep 4: {r['result']}, grads {s['grad']}, noise by rule {r['noise']['by_rule']}")
    print(f"OK ddp 4 vs ddp 4 --ep 4: step 0 bitwise equal but {s['grad']['different']} expert grads "
          "(summation order)", flush=True)
    # The same dispatches in two layouts: the covered records compose and compare, bitwise.
    ddp_ep2 = train("ep_ddp4_ep2", "ddp", 4, "--ep", "2")
    r = diff(ddp_ep2, runs["ep_zero3_4_ep2"], "--steps", "0")
    if r["covered_records"]["pairs"] != 0 or r["summary"]["mb_grad"]["equal"] == 0 or any(
            n for cls, n in r["summary"]["mb_grad"].items() if cls != "equal"):
        fail(f"ddp 4 --ep 2 vs zero3 4 --ep 2: mb_grads not all compared and equal: {r['summary']['mb_grad']}, "
             f"{r['covered_records']}")
    print("OK ddp 4 --ep 2 vs zero3 4 --ep 2: every covered mb_grad compared, bitwise equal", flush=True)


def case_fault_expert_parallel():
    """The bugs of expert parallelism, each the headline against the single run, on more than one
    layer; a fault of a layout the run does not have changes nothing."""
    base = train("fep_single", "single", 1)
    ep4 = ("ddp", 4, "--ep", "4")
    cases = [
        ("ep_permute_1", ep4, "ep-permute=1", (0, "tap", "unexplained", "layers.1")),
        ("ep_permute_3", ("zero3", 4, "--ep", "2"), "ep-permute=3", (0, "tap", "unexplained", "layers.3")),
        ("ep_grad_scale_0", ep4, "ep-grad-scale=0", (0, "grad", "constant_factor", None)),
        ("ep_grad_scale_3", ("zero3", 4, "--ep", "2"), "ep-grad-scale=3", (0, "grad", "constant_factor", None)),
    ]
    for name, layout, fault, (step, kind, rule, record) in cases:
        r = diff(base, train("fep_" + name, *layout, "--fault", fault), expect=1)
        u = headline(r, step, kind, rule, record)
        # The re-run hint for ops warns that traces of an expert-parallel layout do not line up
        # with the single run's (docs/diff-logs.md, Op traces).
        if fault.startswith("ep-permute") and (r["op_trace"]["trace_hint"] is None or
                                               "expert-parallel layout are not aligned" not in r["text"]):
            fail(f"{fault}: the op trace hint does not say traces of this layout are not aligned: {r['text'][:2000]}")
        if fault.startswith("ep-grad-scale"):
            layer = fault.split("=")[1]
            if not u["name"].startswith(f"layers.{layer}.moe.experts."):
                fail(f"{fault} headlines {u['name']}, not an expert weight of layer {layer}")
            factor = "0.25" if layout == ep4 else "0.5"
            if factor not in u["cause"]["message"]:
                fail(f"{fault}: the cause does not name the factor {factor}: {u['cause']['message']}")
    for fault in ("ep-permute=1", "ep-grad-scale=0"):
        out = train("fep_single_" + fault.split("=")[0], "single", 1, "--fault", fault)
        diff(base, out, expect=0)
    print("OK faults of ep are accepted, and change nothing, without ep", flush=True)


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    globals()["case_" + sys.argv[1].replace("-", "_")]()
    print("PASS", flush=True)
