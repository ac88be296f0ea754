#!/usr/bin/env python3
"""diff_logs --html rendered in headless Chromium, on runs gen_synthetic_runs writes.

    html_report_test.py CASE    (CASE: pages, 1000x1000)

Environment (set by ctest): DIFF_LOGS, GEN_SYNTHETIC_RUNS, WORK (a scratch directory).
pages: a summation-order, a none-gradient and an unreduced-gradient comparison render without
script errors, with every pair drawn as a heat map cell, coloured by its verdict (as many bug
and noise cells as the --json counts), and the first divergence named; at 1280x800 the RESULT
line, the "First unexplained divergence" panel and its cause's rule lie on the first screen,
as the browser lays them out; a page whose script throws, and one whose headline is pushed
below the first screen, are caught. 1000x1000: 1,000 series x 1,000 steps stay under 20 MB and draw within
RENDER_LIMIT_MS (docs/perf.md records the measurement). Exit 77 (skipped) without Chromium.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import html_check  # noqa: E402

DIFF_LOGS = os.environ["DIFF_LOGS"]
GEN = os.environ["GEN_SYNTHETIC_RUNS"]
WORK = os.environ["WORK"]
MAX_BYTES = 20 * 1000 * 1000
RENDER_LIMIT_MS = 60000  # measured: docs/perf.md; generous for a loaded 2-core machine


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def gen(name, *flags):
    out = os.path.join(WORK, name)
    if not os.path.isdir(out):
        subprocess.run([GEN, out, *flags], check=True, stdout=subprocess.DEVNULL)
    return out


def diff_html(a, b, name):
    """diff_logs A B --json --html; returns (report path, the --json result)."""
    html = os.path.join(WORK, name + ".html")
    js = os.path.join(WORK, name + ".json")
    cmd = [DIFF_LOGS, a, b, "--no-color", "--json", js, "--html", html]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if proc.returncode == 2:
        fail("diff_logs failed: " + proc.stdout[-2000:])
    with open(js) as f:
        return html, json.load(f)


def verdict_problems(dom, result):
    """The heat map's cells by verdict against the --json's noise summary (no step is binned)."""
    problems = []
    for what, expected in (("bug", result["noise"]["bug_pairs"]), ("noise", result["noise"]["pairs"])):
        got = html_check.attr(dom, "heatmap-canvas", f"data-cells-{what}")
        if got != str(expected):
            problems.append(f"heat map coloured {got} cells as {what}, the --json counts {expected}")
    return problems


def check_first_screen(browser, html, rule):
    """The RESULT line, the headline panel and its cause's rule within 1280x800."""
    layout, dom, log = html_check.measure(browser, html)
    problems = html_check.render_problems(dom, log) + html_check.first_screen_problems(layout, rule)
    if problems:
        fail(f"{html} at 1280x800: " + "; ".join(problems))
    boxes = layout["elements"]
    print(f"OK first screen of {os.path.basename(html)}: result {boxes['result']['top']:.0f}-"
          f"{boxes['result']['bottom']:.0f} px, panel {boxes['panel']['top']:.0f}-{boxes['panel']['bottom']:.0f} px, "
          f"{boxes['rule']['text']} at {boxes['rule']['top']:.0f} px", flush=True)
    return layout


def check_page(browser, html, result, expect_name, screenshot=None):
    dom, log = browser.dump_dom(html)
    problems = html_check.render_problems(dom, log)
    drawn = html_check.attr(dom, "heatmap-canvas", "data-cells-drawn")
    # One cell per compared pair (no step is binned at these sizes).
    if drawn != str(result["records_compared"]):
        problems.append(f"heat map drew {drawn} cells, expected {result['records_compared']} (one per pair)")
    problems += verdict_problems(dom, result)
    name = html_check.attr(dom, "fd-headline", "data-name")
    if name != expect_name:
        problems.append(f"first-divergence panel names {name}, expected {expect_name}")
    if html_check.attr(dom, "curves", "data-curves") in (None, "0"):
        problems.append("no curves drawn")
    for table in ("top-table", "series-table", "only-table"):
        if html_check.attr(dom, table, "data-rows") is None:
            problems.append(f"table {table} missing")
    if screenshot:
        browser.screenshot(html, screenshot, 1280, 1600)
        problems += html_check.screenshot_problems(screenshot, 1280, 1600)
    if problems:
        fail(f"{html}: " + "; ".join(problems))
    print(f"OK {os.path.basename(html)}: {drawn} cells, first divergence {name}, "
          f"render {html_check.attr(dom, 'body', 'data-render-ms')} ms", flush=True)
    return dom


def case_pages(browser):
    small = ["--steps", "6", "--params", "12", "--mbs", "4", "--mb-grads"]
    base = gen("zero3x4", "--layout", "zero3", "--world", "4", *small)
    sum_order = gen("pp2x4_sum_order", "--layout", "pp", "--world", "8", "--stages", "2", *small,
                    "--variant", "sum_order", "--at-step", "2", "--param", "5")
    none = gen("pp2x4_none", "--layout", "pp", "--world", "8", "--stages", "2", *small,
               "--variant", "none_grads", "--at-step", "1")
    unreduced = gen("pp2x4_unreduced", "--layout", "pp", "--world", "8", "--stages", "2", *small,
                    "--variant", "unreduced", "--at-step", "2", "--param", "5")
    html, result = diff_html(base, sum_order, "sum_order")
    dom = check_page(browser, html, result, "layers.5.w", os.path.join(WORK, "sum_order.png"))
    if result["noise"]["pairs"] == 0 or html_check.attr(dom, "no-unexplained", "class") is None:
        fail("the summation-order page does not say every difference is noise")
    check_colour_switch(browser, html)

    html, result = diff_html(base, none, "none_grads")
    dom = check_page(browser, html, result, "layers.0.w")
    if html_check.attr(dom, "fd-headline", "data-class") != "none_one_side":
        fail("the none-gradient page's first divergence is not none_one_side")
    check_first_screen(browser, html, "none_gradient")
    check_layout_check_fails(browser, html)

    html, result = diff_html(base, unreduced, "unreduced")
    check_page(browser, html, result, "layers.5.w")
    if result["first_unexplained_divergence"]["cause"]["rule"] != "unreduced_gradient":
        fail(f"the unreduced run's headline cause: {result['first_unexplained_divergence']['cause']}")
    check_first_screen(browser, html, "unreduced_gradient")

    # The check must fail when a script throws: break the page's own script once.
    with open(html) as f:
        page = f.read()
    marker = "(function () {\n  'use strict';"
    if marker not in page:
        fail("the page's script opening not found")
    broken = os.path.join(WORK, "broken.html")
    with open(broken, "w") as f:
        f.write(page.replace(marker, "throw new Error('deliberately broken');\n" + marker, 1))
    dom, log = browser.dump_dom(broken)
    problems = html_check.render_problems(dom, log)
    if not any("script error" in p for p in problems) or not any("Uncaught" in p for p in problems):
        fail(f"a throwing script was not caught by the DOM and console checks: {problems}")
    print("OK a throwing script fails the check: " + " | ".join(problems), flush=True)


def check_colour_switch(browser, html):
    """The heat map's "magnitude only" colouring draws, and says so in the DOM."""
    switch = """<script>
window.addEventListener('load', function () {
  var sel = document.getElementById('heatmap-colour');
  sel.value = 'magnitude';
  sel.dispatchEvent(new Event('change'));
});
</script>
"""
    layout, dom, log = html_check.measure(browser, html, extra_html=switch)
    problems = html_check.render_problems(dom, log)
    if html_check.attr(dom, "heatmap-canvas", "data-colour") != "magnitude":
        problems.append(f"heat map colour {html_check.attr(dom, 'heatmap-canvas', 'data-colour')} after the switch")
    if 'class="legend" data-colour="magnitude"' not in dom:
        problems.append("the legend does not show the magnitude scale after the switch")
    if problems:
        fail(f"{html}, magnitude only: " + "; ".join(problems))
    print(f"OK {os.path.basename(html)} switches to magnitude-only colours", flush=True)


def check_layout_check_fails(browser, html):
    """The first-screen check must fail when the headline is pushed below the fold."""
    push = "<style>#headline { margin-top: 900px; }</style>\n"
    layout, dom, log = html_check.measure(browser, html, extra_html=push)
    problems = html_check.first_screen_problems(layout, "none_gradient")
    if not any("outside the first 1280x800 screen" in p and "#headline" in p for p in problems):
        fail(f"a headline pushed below the first screen was not caught: {problems}")
    print("OK a headline below the first screen fails the check: " + problems[0], flush=True)


def case_1000x1000(browser):
    big = ["--layout", "single", "--steps", "1000", "--params", "1000", "--no-forward"]
    base = gen("big_base", *big)
    test = gen("big_rng", *big, "--variant", "rng", "--at-step", "3")  # nearly every cell differs
    html, result = diff_html(base, test, "big")
    size = os.path.getsize(html)
    if size > MAX_BYTES:
        fail(f"1000 x 1000 report is {size} bytes, over {MAX_BYTES}")
    dom = check_page(browser, html, result, "layers.0.w")
    ms = int(html_check.attr(dom, "body", "data-render-ms"))
    if ms > RENDER_LIMIT_MS:
        fail(f"1000 x 1000 report took {ms} ms to draw, over {RENDER_LIMIT_MS}")
    print(f"OK 1000 x 1000: {size} bytes, drawn in {ms} ms "
          f"({html_check.attr(dom, 'body', 'data-timings-ms')})", flush=True)
    for run in (base, test):  # 380 MB of logs: not worth keeping
        shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    chromium = html_check.find_chromium()
    if not chromium:
        print("SKIP: chromium not found (scripts/setup.sh installs Debian's chromium)", flush=True)
        sys.exit(html_check.SKIP)
    os.makedirs(WORK, exist_ok=True)
    probe = subprocess.run([DIFF_LOGS, WORK, WORK, "--html", os.path.join(WORK, "probe.html")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "built without the plotting libraries" in probe.stdout:
        print("SKIP: " + probe.stdout.strip(), flush=True)
        sys.exit(html_check.SKIP)
    browser = html_check.Browser(chromium)
    try:
        {"pages": case_pages, "1000x1000": case_1000x1000}[sys.argv[1]](browser)
    finally:
        browser.close()
    print("PASS", flush=True)
