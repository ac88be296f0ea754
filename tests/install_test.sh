#!/usr/bin/env bash
# Installs numprobe from the build tree into a scratch prefix, then configures, builds and runs
# the out-of-tree quickstart trainer against the installed package (find_package(numprobe)).
set -euo pipefail
build_dir="$1" source_dir="$2" torch_prefix="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir/examples/quickstart" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/numprobe_quickstart" "$work/run" 2 | tee "$work/out.txt"
log="$work/run/rank0/diff.log"
head -1 "$log" | grep -q '^#numprobe format=10 hash_spec=1 rank=0 world_size=1' || { echo "bad header"; exit 1; }
grep -q 'kind=grad name=fc1.weight hash=' "$log" || { echo "no grad record for fc1.weight"; exit 1; }
grep -q 'kind=scalar name=loss value=' "$log" || { echo "no loss record"; exit 1; }
grep -qE '^#end step=[0-9]+ records=[0-9]+$' "$log" || { echo "no step end line"; exit 1; }
echo "installed package works: $(grep -c . "$log") lines in $log"
