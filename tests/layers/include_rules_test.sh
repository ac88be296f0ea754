#!/usr/bin/env bash
# The include rules that keep the layers visible: no "../" includes (a target names its private
# headers from probe/src/, its public ones from include/), and no production source includes
# the CUDA kernel's CPU replay (cuda/stats_reference.h exists to be compared with, in tests), and
# no trainer (examples/) includes a detail/ header: those hold the Python binding's entry points,
# parser internals and the differ's stages, not what a trainer uses.
# Usage: include_rules_test.sh SOURCE_DIR
set -uo pipefail
src="$1"
cd "$src" || exit 1
sources=(probe examples tests)
failures=0

if hits="$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]\.\./' "${sources[@]}" \
             --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.inc')"; then
  echo "FAIL: includes that climb out of their directory (name the header from its target's include directory):"
  echo "$hits"
  failures=$((failures + 1))
fi
if hits="$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]*/)?stats_reference\.h' probe \
             --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.inc')"; then
  echo "FAIL: the library includes the CUDA kernel's test replay (stats_reference.h):"
  echo "$hits"
  failures=$((failures + 1))
fi
if hits="$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<](probe|differ)/detail/' examples \
             --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' --include='*.inc')"; then
  echo "FAIL: trainers include detail/ headers (use the public ones: README, \"Headers\"):"
  echo "$hits"
  failures=$((failures + 1))
fi
echo "include rules: $failures failures"
[ "$failures" -eq 0 ]
