#!/usr/bin/env bash
# Formats the tree's C++ and CUDA sources with the one pinned clang-format (.clang-format holds
# the style; formatters of other versions format differently, so the version is part of it).
#
#   scripts/format.sh           format every tracked or new source file in place
#   scripts/format.sh --check   change nothing; list the files that are not formatted, exit 1 if any
#
# clang-format comes from PyPI into the project's venv (scripts/setup.sh's, created if missing).
set -euo pipefail

CLANG_FORMAT_VERSION=23.1.3
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${NUMPROBE_VENV:-$ROOT/.venv}"

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/format.sh: unknown argument '$1'" >&2; exit 2 ;;
esac

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [ "$("$VENV/bin/clang-format" --version 2>/dev/null | awk '{print $NF}')" != "$CLANG_FORMAT_VERSION" ]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check "clang-format==$CLANG_FORMAT_VERSION"
fi

cd "$ROOT"
mapfile -t files < <(git ls-files --cached --others --exclude-standard \
  '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc')
if [ "$check" -eq 0 ]; then
  "$VENV/bin/clang-format" -i "${files[@]}"
  exit 0
fi
# --dry-run --Werror: one error per change it would make, each naming its file.
if ! out=$("$VENV/bin/clang-format" --dry-run --Werror "${files[@]}" 2>&1); then
  echo "not formatted (scripts/format.sh formats them):" >&2
  printf '%s\n' "$out" | grep -oE '^[^:]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u |
    sed 's/^/  /' >&2
  exit 1
fi
echo "scripts/format.sh: ${#files[@]} files formatted as .clang-format says"
