#!/usr/bin/env bash
# CI's oldest-LibTorch check: numprobe supports LibTorch >= 2.4, so every translation unit that
# includes torch headers must still compile against 2.4's. It recompiles them (syntax and
# semantics, no object code: -fsyntax-only) with the main build's own flags
# (build/compile_commands.json), the torch include dirs swapped for torch 2.4.0's. The headers
# come from torch 2.4.0's PyPI wheel (downloaded once, ~800 MB, into $NUMPROBE_TORCH_MIN_DIR);
# they are the LibTorch 2.4 zip's. That wheel uses the pre-C++11 string ABI, hence
# -D_GLIBCXX_USE_CXX11_ABI=0; nothing is linked against it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
VERSION="${NUMPROBE_TORCH_MIN_VERSION:-2.4.0}"
DIR="${NUMPROBE_TORCH_MIN_DIR:-$HOME/.cache/numprobe/torch-$VERSION}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
log() { printf '\033[1m[torch %s check]\033[0m %s\n' "$VERSION" "$*" >&2; }

start=$(date +%s)
if [ ! -f "$DIR/include/torch/csrc/api/include/torch/version.h" ]; then
  log "fetching torch==$VERSION's headers into $DIR"
  mkdir -p "$DIR/wheel"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps "torch==$VERSION" \
    --python-version 3.11 --only-binary=:all: -d "$DIR/wheel"
  rm -rf "$DIR/unpacked"
  "$PY" -m zipfile -e "$(ls "$DIR"/wheel/torch-*.whl | head -1)" "$DIR/unpacked" >/dev/null
  rm -rf "$DIR/include" && mv "$DIR/unpacked/torch/include" "$DIR/include"
  rm -rf "$DIR/unpacked" "$DIR/wheel"
fi
grep -q "TORCH_VERSION_MINOR $(echo "$VERSION" | cut -d. -f2)\$" "$DIR/include/torch/csrc/api/include/torch/version.h" \
  || { log "$DIR has headers of another torch, not torch $VERSION's"; exit 1; }

"$PY" - "$BUILD/compile_commands.json" "$DIR/include" <<'PYEOF'
import concurrent.futures, json, os, shlex, subprocess, sys

commands, new_include = json.load(open(sys.argv[1])), sys.argv[2]
jobs = []
for c in commands:
    args = shlex.split(c["command"])
    torch_dirs = [a for a in args if a.endswith("/torch/include")]
    if not torch_dirs:
        continue  # a torch-free translation unit
    old_include = torch_dirs[0]
    argv, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT"):
            skip = True
        elif a not in ("-MD", "ccache"):
            argv.append(a.replace(old_include, new_include))
    jobs.append((c["file"], c["directory"], argv + ["-fsyntax-only", "-D_GLIBCXX_USE_CXX11_ABI=0"]))

def check(job):
    file, directory, argv = job
    return file, subprocess.run(argv, cwd=directory, capture_output=True, text=True)

failed = 0
with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for file, result in pool.map(check, jobs):
        print(("ok    " if result.returncode == 0 else "FAILED"), os.path.relpath(file), flush=True)
        if result.returncode != 0:
            failed += 1
            print(result.stderr[-4000:], flush=True)
print(f"{len(jobs) - failed} of {len(jobs)} torch translation units compile against the oldest supported LibTorch", flush=True)
sys.exit(1 if failed or not jobs else 0)
PYEOF
log "done in $(( $(date +%s) - start )) s"
