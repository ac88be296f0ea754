#!/usr/bin/env python3
"""The differ's pipeline, enforced: its sources sit in one folder per stage (read, merge, pair,
judge, report), a stage's files include only the internal headers of the stages before it (or
its own), few files stay flat, and docs/diff-logs.md's map of the sources names every file in
the tree and no other.

    python3 tests/layers/differ_pipeline_test.py [SOURCE_DIR]
"""
import pathlib
import re
import sys

STAGES = ["read", "merge", "pair", "judge", "report"]
# Flat internal headers: below every stage, or the drivers above them all.
BOTTOM = {"figures.h"}
TOP = {"align.h"}
MAX_FLAT_SOURCES = 8
INCLUDE = re.compile(r'^\s*#\s*include\s*"differ/detail/([^"]+)"', re.M)


def level(rel):
    """A detail header's level ("read/run.h" -> 1); flat headers: 0 bottom, len+1 top."""
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] in STAGES:
        return STAGES.index(parts[0]) + 1
    if rel in BOTTOM:
        return 0
    if rel in TOP:
        return len(STAGES) + 1
    return None


def file_level(differ, path):
    rel = path.relative_to(differ)
    parts = rel.parts
    if parts[0] == "src":
        inner = parts[1:]
    else:  # include/differ/...
        inner = parts[2:]
        if inner[0] != "detail":
            return None  # the public headers: the library's surface, every stage's
        inner = inner[1:]
    if len(inner) == 2 and inner[0] in STAGES:
        return STAGES.index(inner[0]) + 1
    if len(inner) == 1:
        return 0 if inner[0] in BOTTOM else len(STAGES) + 1  # flat sources: drivers or the public types
    return -1


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    differ = root / "probe" / "differ"
    failures = []
    files = sorted(p for p in (differ / "src").rglob("*") if p.suffix in (".cpp", ".h")) + \
        sorted((differ / "include" / "differ").rglob("*.h"))
    for path in files:
        mine = file_level(differ, path)
        if mine == -1:
            failures.append(f"{path.relative_to(root)}: not in a stage folder ({', '.join(STAGES)})")
            continue
        if mine is None:
            mine = len(STAGES) + 1
        for included in INCLUDE.findall(path.read_text()):
            theirs = level(included)
            if theirs is None:
                failures.append(f"{path.relative_to(root)}: includes differ/detail/{included}, in no stage")
            elif theirs > mine and not (mine == len(STAGES) + 1):
                failures.append(f"{path.relative_to(root)}: includes differ/detail/{included}, a later stage's")
    for stage in STAGES:
        if not any((differ / "src" / stage).glob("*.cpp")):
            failures.append(f"probe/differ/src/{stage}/ holds no source")
    flat = sorted(p.name for p in (differ / "src").glob("*.cpp"))
    if len(flat) > MAX_FLAT_SOURCES:
        failures.append(f"{len(flat)} sources flat in probe/differ/src (at most {MAX_FLAT_SOURCES}): {flat}")

    # The map in the docs: "`src/<stage>/<file>.cpp`" names, each file once, every file.
    doc = (root / "docs" / "diff-logs.md").read_text()
    named = set(re.findall(r"`src/((?:[a-z_]+/)?[a-z_]+\.cpp)`", doc))
    tree = {str(p.relative_to(differ / "src")) for p in (differ / "src").rglob("*.cpp")}
    for missing in sorted(tree - named):
        failures.append(f"docs/diff-logs.md: the map of the sources does not name src/{missing}")
    for gone in sorted(named - tree):
        failures.append(f"docs/diff-logs.md: the map names src/{gone}, which is not in the tree")

    for f in failures:
        print("FAIL:", f)
    print(f"differ pipeline: {len(files)} files checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
