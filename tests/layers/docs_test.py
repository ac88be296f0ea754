#!/usr/bin/env python3
"""Checks on the project's markdown documentation (standard library only).

(a) docs/perf.md is under 400 lines: the current figures, with their history in
    docs/perf-history.md;
(b) no heading of docs/perf.md carries a date (YYYY-MM-DD) or the word "commit", so that links to
    its sections do not break when a figure is re-measured;
(c) every markdown link of the form (path.md#anchor) or (#anchor) in README.md, scripts/README.md
    and docs/*.md that points into a file of this repository resolves to a heading of that file
    (GitHub's anchors: lowercase, spaces to '-', punctuation other than '-' and '_' removed,
    repeated headings suffixed -1, -2, ...);
(d) docs/log-format.md's first line is "# numprobe log format, version N", N the format version
    the probe writes (log_format::kVersion in probe/include/probe/log_format.h);
(e) docs/diff-logs.md and docs/log-format.md open with a "## Contents" that links every one of
    their other level-2 and level-3 headings;
(f) README.md's "### Headers" table has one row per public header of probe/include/probe/ (not
    detail/), and says "yes" under LibTorch exactly for the headers tests/layers/
    public_headers_test.sh lists as needing LibTorch.

Usage: python3 tests/layers/docs_test.py [SOURCE_DIR]   (default: the repository holding this file)
Exit status 0 when every check passes, 1 otherwise, with one line per failure.
"""

import os
import re
import sys

PERF = os.path.join("docs", "perf.md")
PERF_MAX_LINES = 400
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*$")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# Inline links [text](target) and [text](target "title"); images share the form.
INLINE_LINK = re.compile(r"\]\(\s*<?([^()\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
# Reference definitions: [label]: target
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)


def lines_outside_fences(text):
    """(line number, line) for each line not inside a fenced code block."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and line.strip() == match.group(1):
            fence = None


def strip_inline_code(line):
    """The line with its code spans removed (links inside them are not links)."""
    return re.sub(r"(`+)(.+?)\1", "", line)


def headings(text):
    """(line number, level, heading text) of each ATX heading outside code blocks."""
    result = []
    for number, line in lines_outside_fences(text):
        match = ATX_HEADING.match(line)
        if match:
            result.append((number, len(match.group(1)), match.group(2) or ""))
    return result


def github_anchor(heading):
    """The anchor GitHub gives a heading (before duplicates are numbered)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)                  # emphasis markers
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                         # punctuation but - and _
    return text.replace(" ", "-")


def anchors_of(text):
    """Every anchor a file offers: its headings' (numbered as GitHub numbers repeats) and
    explicit <a name=...>/<a id=...> anchors."""
    seen = {}
    anchors = set()
    for _, _, heading in headings(text):
        base = github_anchor(heading)
        count = seen.get(base, 0)
        anchors.add(base if count == 0 else "%s-%d" % (base, count))
        seen[base] = count + 1
    for match in HTML_ANCHOR.finditer(text):
        anchors.add(match.group(1))
    return anchors


def links_with_anchors(text):
    """(line number, target) of each markdown link whose target is FILE.md#ANCHOR or #ANCHOR."""
    for number, line in lines_outside_fences(text):
        line = strip_inline_code(line)
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        definition = REFERENCE_DEF.match(line)
        if definition:
            targets.append(definition.group(1))
        for target in targets:
            if "#" not in target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue   # no anchor, or a URL (http:, mailto:, ...)
            path = target.split("#", 1)[0]
            if path == "" or path.lower().endswith(".md"):
                yield number, target


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def check_perf(root, failures):
    path = os.path.join(root, PERF)
    if not os.path.isfile(path):
        failures.append("%s: missing" % PERF)
        return
    text = read(path)
    count = len(text.splitlines())
    if count >= PERF_MAX_LINES:
        failures.append("%s: %d lines, must be under %d (move history to docs/perf-history.md)"
                        % (PERF, count, PERF_MAX_LINES))
    for number, _, heading in headings(text):
        if DATE.search(heading):
            failures.append("%s:%d: heading carries a date (put it in the text): %r"
                            % (PERF, number, heading))
        if re.search(r"commit", heading, re.IGNORECASE):
            failures.append("%s:%d: heading carries a commit (put it in the text): %r"
                            % (PERF, number, heading))


def checked_files(root):
    files = ["README.md", os.path.join("scripts", "README.md")]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join("docs", name) for name in os.listdir(docs)
                        if name.endswith(".md"))
    return [f for f in files if os.path.isfile(os.path.join(root, f))]


def check_links(root, failures):
    anchor_cache = {}
    checked = 0
    for source in checked_files(root):
        text = read(os.path.join(root, source))
        for number, target in links_with_anchors(text):
            path, anchor = target.split("#", 1)
            if path:
                resolved = os.path.normpath(os.path.join(os.path.dirname(source), path))
            else:
                resolved = os.path.normpath(source)
            if resolved.startswith(".."):
                continue   # outside this repository
            checked += 1
            full = os.path.join(root, resolved)
            if not os.path.isfile(full):
                failures.append("%s:%d: link (%s) points to %s, which does not exist"
                                % (source, number, target, resolved))
                continue
            if resolved not in anchor_cache:
                anchor_cache[resolved] = anchors_of(read(full))
            if anchor not in anchor_cache[resolved]:
                failures.append("%s:%d: link (%s): %s has no heading with anchor #%s"
                                % (source, number, target, resolved, anchor))
    return checked


def check_log_format_version(root, failures):
    header = read(os.path.join(root, "probe", "include", "probe", "log_format.h"))
    version = re.search(r"inline constexpr int kVersion = (\d+);", header)
    first = read(os.path.join(root, "docs", "log-format.md")).splitlines()[0]
    if version is None:
        failures.append("probe/include/probe/log_format.h: no kVersion found")
    elif first != "# numprobe log format, version %s" % version.group(1):
        failures.append("docs/log-format.md:1: %r, the probe writes version %s"
                        % (first, version.group(1)))


def check_contents(root, failures):
    for doc in (os.path.join("docs", "diff-logs.md"), os.path.join("docs", "log-format.md")):
        text = read(os.path.join(root, doc))
        if not any(level == 2 and heading == "Contents" for _, level, heading in headings(text)):
            failures.append("%s: no '## Contents'" % doc)
            continue
        linked = {target[1:] for _, target in links_with_anchors(text) if target.startswith("#")}
        seen = {}
        for number, level, heading in headings(text):
            base = github_anchor(heading)
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchor = base if count == 0 else "%s-%d" % (base, count)
            if level in (2, 3) and heading != "Contents" and anchor not in linked:
                failures.append("%s:%d: heading %r is not in the Contents" % (doc, number, heading))


TORCH_HEADERS = re.compile(r"^torch_headers=\(([^)]*)\)", re.M)
HEADER_ROW = re.compile(r"^\| `(probe/[^`]+\.h)` \| (yes|no) \|", re.M)


def check_headers_table(root, failures):
    readme = read(os.path.join(root, "README.md"))
    section = readme.split("### Headers", 1)
    if len(section) < 2:
        failures.append("README.md: no '### Headers' section")
        return
    rows = dict(HEADER_ROW.findall(section[1].split("\n#", 1)[0]))
    include = os.path.join(root, "probe", "include")
    public = sorted("probe/" + name for name in os.listdir(os.path.join(include, "probe")) if name.endswith(".h"))
    match = TORCH_HEADERS.search(read(os.path.join(root, "tests", "layers", "public_headers_test.sh")))
    torch = set(match.group(1).split()) if match else set()
    for header in public:
        if header not in rows:
            failures.append(f"README.md Headers: no row for {header}")
        elif (rows[header] == "yes") != (header in torch):
            failures.append(f"README.md Headers: {header} says LibTorch {rows[header]}, "
                            f"tests/layers/public_headers_test.sh says {'yes' if header in torch else 'no'}")
    for header in sorted(set(rows) - set(public)):
        failures.append(f"README.md Headers: {header} is no public header")


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    failures = []
    check_perf(root, failures)
    checked = check_links(root, failures)
    check_log_format_version(root, failures)
    check_contents(root, failures)
    check_headers_table(root, failures)
    for failure in failures:
        print("FAIL: " + failure)
    print("docs: %s checked, %d anchored links checked, %d failures"
          % (PERF, checked, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
