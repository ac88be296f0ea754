#!/usr/bin/env bash
# The layers, enforced: every torch-free public header (the core's probe/*.h, the differ's
# differ/**/*.h) compiles on its own, twice in a row, with only numprobe's include directories
# and the system's on the include path, so the core and the differ cannot start needing
# LibTorch unnoticed. The LibTorch layer's headers are named below; a header not named there
# is torch-free by default. Those named must exist and must fail to compile here, which also
# proves that no LibTorch is on this include path.
# Usage: public_headers_test.sh CXX SOURCE_DIR
set -uo pipefail
cxx="$1" src="$(cd "$2" && pwd)"
torch_headers=(probe/probe.h probe/tensor_stats.h probe/optimizer_state.h probe/detail/probe_hooks.h)

includes=(-I"$src/probe/include" -I"$src/probe/differ/include")
compile() {  # compile HEADER: the header alone, included twice (include guards)
  printf '#include <%s>\n#include <%s>\n' "$1" "$1" |
    "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror "${includes[@]}" -x c++ - 2>&1
}
is_torch_header() {
  local h
  for h in "${torch_headers[@]}"; do [ "$h" = "$1" ] && return 0; done
  return 1
}

failures=0 checked=0
while IFS= read -r header; do
  is_torch_header "$header" && continue
  checked=$((checked + 1))
  if ! out="$(compile "$header")"; then
    echo "FAIL: $header does not compile on its own without LibTorch:"
    echo "$out" | head -20
    failures=$((failures + 1))
  fi
done < <(cd "$src/probe/include" && find probe -name "*.h" | sort
         cd "$src/probe/differ/include" && find differ -name '*.h' | sort)

for header in "${torch_headers[@]}"; do
  if [ ! -f "$src/probe/include/$header" ]; then
    echo "FAIL: $header is listed as a LibTorch header but does not exist"
    failures=$((failures + 1))
  elif compile "$header" >/dev/null; then
    echo "FAIL: $header compiles without LibTorch: LibTorch is on the include path, or the header is torch-free (then drop it from the list)"
    failures=$((failures + 1))
  fi
done

echo "$checked torch-free headers compiled alone; ${#torch_headers[@]} LibTorch headers refused; $failures failures"
[ "$checked" -gt 0 ] && [ "$failures" -eq 0 ]
