#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test under ctest.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
