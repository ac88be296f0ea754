#!/usr/bin/env python3
"""Renders diff_logs --html reports in headless Chromium and checks what the page drew.

Used by html_report_test.py (synthetic runs) and tests/examples (the demo's runs). The page
exposes what a canvas cannot: <body data-render="done" data-script-errors="N"
data-render-ms="T">, the heat map canvas's data-cells-drawn, the first-divergence panel's
data-name. Script errors are caught twice: the page writes them into the DOM, and Chromium's
console log (--enable-logging=stderr) must hold no "Uncaught" line.

Where things are drawn is measured in the browser: a copy of the page gets a script that, once
the page is drawn, writes the bounding rectangles of the first screen's elements (the RESULT
line, the "First unexplained divergence" panel, the cause's rule) into the DOM as JSON, laid
out at the window size Chromium was given (first_screen_problems).

    html_check.py REPORT.html [--expect-name NAME] [--cells N] [--rule RULE]   (a manual check)
"""
import argparse
import html as html_text
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77  # ctest's SKIP_RETURN_CODE


def find_chromium():
    """Debian's chromium (scripts/setup.sh installs it), or NUMPROBE_CHROMIUM."""
    for name in [os.environ.get("NUMPROBE_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class Browser:
    def __init__(self, chromium):
        self.chromium = chromium
        self.profile = tempfile.mkdtemp(prefix="numprobe-chromium-")
        self._windows = {}  # viewport -> window size (window_for_viewport)

    def close(self):
        shutil.rmtree(self.profile, ignore_errors=True)

    def _run(self, html, extra, budget_ms, timeout_s):
        cmd = [self.chromium, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--no-default-browser-check", "--user-data-dir=" + self.profile,
               "--enable-logging=stderr", "--v=0", f"--virtual-time-budget={budget_ms}", *extra,
               "file://" + os.path.abspath(html)]
        if os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="replace", timeout=timeout_s)

    def dump_dom(self, html, budget_ms=20000, timeout_s=240):
        """The DOM after the page's scripts ran, and Chromium's log."""
        proc = self._run(html, ["--dump-dom"], budget_ms, timeout_s)
        return proc.stdout, proc.stderr

    def window_for_viewport(self, width, height):
        """The --window-size whose page viewport is width x height: a headless window's
        viewport is shorter than the window by browser chrome (an info bar about flags, ...),
        so it is measured once on a blank page."""
        if (width, height) not in self._windows:
            probe = os.path.join(self.profile, "viewport.html")
            with open(probe, "w") as f:
                f.write("<!DOCTYPE html><body><p id='v'></p><script>document.getElementById('v')"
                        ".textContent = innerWidth + 'x' + innerHeight;</script></body>")
            proc = self._run(probe, ["--dump-dom", f"--window-size={width},{height}"], 5000, 120)
            m = re.search(r"<p id=\"v\">(\d+)x(\d+)</p>", proc.stdout)
            if not m:
                raise RuntimeError("could not measure the headless viewport: " + proc.stderr[-500:])
            self._windows[(width, height)] = (2 * width - int(m.group(1)), 2 * height - int(m.group(2)))
        return self._windows[(width, height)]

    def screenshot(self, html, png, width, height, budget_ms=20000, timeout_s=240):
        proc = self._run(html, [f"--window-size={width},{height}", "--screenshot=" + os.path.abspath(png)],
                         budget_ms, timeout_s)
        return proc.stderr


def attr(dom, element_id, name):
    """The attribute `name` of the element with id `element_id` (or of <body>), or None."""
    tag = re.search(r"<body[^>]*>" if element_id == "body" else
                    r"<[a-z0-9]+[^>]*\bid=\"" + re.escape(element_id) + r"\"[^>]*>", dom)
    if not tag:
        return None
    m = re.search(r"\b" + re.escape(name) + r"=\"([^\"]*)\"", tag.group(0))
    return m.group(1) if m else None


def render_problems(dom, log):
    """What says the page did not draw cleanly: empty when it did."""
    problems = []
    if attr(dom, "body", "data-render") != "done":
        problems.append(f"the page did not finish drawing (data-render={attr(dom, 'body', 'data-render')})")
    errors = attr(dom, "body", "data-script-errors")
    if errors != "0":
        box = re.search(r"id=\"script-errors\"[^>]*>([^<]*)<", dom)
        problems.append(f"{errors} script error(s): {box.group(1).strip() if box else '?'}")
    uncaught = [line for line in log.splitlines() if "Uncaught" in line]
    if uncaught:
        problems.append("console: " + " | ".join(uncaught[:5]))
    return problems


# The first screen's elements (report.js, drawHeader and drawHeadline).
FIRST_SCREEN = {
    "result": "#result",
    "panel": "#headline",
    "title": "#headline > h2",
    "record": "#fd-headline",
    "cause": "#headline-cause",
    "rule": "#headline-cause .rule",
    "evidence": "#headline-cause .evidence",
    "noise": "#noise-summary",
}
HEADLINE_TITLE = "First unexplained divergence"

# Runs after the page's own script has drawn (window load follows its DOMContentLoaded work).
LAYOUT_PROBE = """<script>
window.addEventListener('load', function () {
  setTimeout(function () {
    var wanted = %s, out = {viewport: [window.innerWidth, window.innerHeight],
                            scroll: [window.scrollX, window.scrollY], elements: {}};
    Object.keys(wanted).forEach(function (key) {
      var e = document.querySelector(wanted[key]);
      if (!e) return;
      var r = e.getBoundingClientRect();
      out.elements[key] = {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY,
                           left: r.left + window.scrollX, right: r.right + window.scrollX,
                           text: e.textContent.replace(/\\s+/g, ' ').trim().slice(0, 300)};
    });
    var pre = document.createElement('pre');
    pre.id = 'numprobe-layout';
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }, 0);
});
</script>
"""


def with_script(html, script, suffix):
    """A copy of the page with `script` (an HTML fragment) at the end of its body."""
    with open(html, encoding="utf-8") as f:
        page = f.read()
    at = page.rfind("</body>")
    if at < 0:
        raise ValueError(f"{html}: no </body>")
    copy = html[:-len(".html")] + suffix + ".html" if html.endswith(".html") else html + suffix + ".html"
    with open(copy, "w", encoding="utf-8") as f:
        f.write(page[:at] + script + page[at:])
    return copy


def measure(browser, html, width=1280, height=800, extra_html=""):
    """(layout, dom, log): the first screen's rectangles as the browser laid them out in a
    width x height viewport (document coordinates, in CSS pixels), or None when none were
    written."""
    copy = with_script(html, extra_html + LAYOUT_PROBE % json.dumps(FIRST_SCREEN), ".layout")
    window = browser.window_for_viewport(width, height)
    try:
        proc = browser._run(copy, ["--dump-dom", f"--window-size={window[0]},{window[1]}"], 20000, 240)
    finally:
        os.remove(copy)
    m = re.search(r'<pre id="numprobe-layout">([^<]*)</pre>', proc.stdout)
    layout = json.loads(html_text.unescape(m.group(1))) if m else None
    return layout, proc.stdout, proc.stderr


def first_screen_problems(layout, rule=None, title=HEADLINE_TITLE, width=1280, height=800,
                          required=("result", "panel", "title", "record", "cause", "rule", "noise")):
    """What of the first screen is missing or lies (even in part) outside width x height."""
    if layout is None:
        return ["the layout probe wrote nothing (the page did not load?)"]
    problems = []
    if layout["viewport"] != [width, height]:
        problems.append(f"viewport {layout['viewport']}, expected {[width, height]}")
    if layout["scroll"] != [0, 0]:
        problems.append(f"the page opened scrolled to {layout['scroll']}")
    boxes = layout["elements"]
    for key in required:
        box = boxes.get(key)
        if box is None:
            problems.append(f"{FIRST_SCREEN[key]} is not on the page")
            continue
        if box["bottom"] <= box["top"] or box["right"] <= box["left"]:
            problems.append(f"{FIRST_SCREEN[key]} has no size: {box}")
        if box["top"] < 0 or box["left"] < 0 or box["bottom"] > height or box["right"] > width:
            problems.append(f"{FIRST_SCREEN[key]} lies outside the first {width}x{height} screen: "
                            f"top {box['top']:.0f}, bottom {box['bottom']:.0f}, right {box['right']:.0f}")
    if "title" in boxes and boxes["title"]["text"] != title:
        problems.append(f"the panel is titled {boxes['title']['text']!r}, expected {title!r}")
    if "result" in boxes and not boxes["result"]["text"].startswith("RESULT: "):
        problems.append(f"the result line reads {boxes['result']['text']!r}")
    if rule is not None and "rule" in boxes and boxes["rule"]["text"] != f"[{rule}]":
        problems.append(f"the cause's rule reads {boxes['rule']['text']!r}, expected [{rule}]")
    if "noise" in boxes and re.search(r"[{}]", boxes["noise"]["text"]):
        problems.append(f"the noise summary prints a raw structure: {boxes['noise']['text']!r}")
    return problems


def png_pixels(path):
    """(width, height, set of distinct RGB pixels) of an 8-bit RGB/RGBA PNG: stdlib only."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError(f"{path}: PNG depth {depth} colour type {colour} not handled")
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours = set()
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if filt == 2:  # Up, the common case: no dependency along the line
            line = bytearray((x + p) & 255 for x, p in zip(line, prev))
            filt = 0
        for i in (range(stride) if filt else ()):  # undo the PNG filter of this line
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return width, height, colours


def screenshot_problems(png, width, height, min_colours=24):
    if not os.path.exists(png):
        return [f"no screenshot written to {png}"]
    w, h, colours = png_pixels(png)
    problems = []
    if (w, h) != (width, height):
        problems.append(f"screenshot is {w}x{h}, expected {width}x{height}")
    if len(colours) < min_colours:
        problems.append(f"screenshot looks blank: {len(colours)} distinct colours")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--expect-name", help="the first-divergence panel must name this tensor")
    ap.add_argument("--cells", type=int, help="the heat map must have drawn this many cells")
    ap.add_argument("--rule", help="the first screen (1280x800) must show the headline with this cause")
    args = ap.parse_args()
    chromium = find_chromium()
    if not chromium:
        print("SKIP: chromium not found (scripts/setup.sh installs it)")
        return SKIP
    browser = Browser(chromium)
    try:
        dom, log = browser.dump_dom(args.report)
        layout = measure(browser, args.report)[0] if args.rule else None
    finally:
        browser.close()
    problems = render_problems(dom, log)
    if args.rule:
        problems += first_screen_problems(layout, args.rule)
    if args.expect_name and attr(dom, "fd-headline", "data-name") != args.expect_name:
        problems.append(f"first divergence names {attr(dom, 'fd-headline', 'data-name')}, expected {args.expect_name}")
    if args.cells is not None and attr(dom, "heatmap-canvas", "data-cells-drawn") != str(args.cells):
        problems.append(f"heat map drew {attr(dom, 'heatmap-canvas', 'data-cells-drawn')} cells, expected {args.cells}")
    for p in problems:
        print("FAIL: " + p)
    print(f"render {attr(dom, 'body', 'data-render-ms')} ms ({attr(dom, 'body', 'data-timings-ms')})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
