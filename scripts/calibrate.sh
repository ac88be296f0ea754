#!/usr/bin/env bash
# The calibration of diff_logs' verdict (scripts/calibrate.py, docs/calibration.md): a clean
# matrix that must hold no false alarm and a bug matrix that measures each fault's detection
# limit. Installs and builds what is missing first (scripts/setup.sh), and installs the Python
# package the transformer's runs import (NUMPROBE_CALIBRATE_BUILD=0 leaves both to the caller).
#   scripts/calibrate.sh [--quick] [--out DIR] [calibrate.py flags]
set -euo pipefail
source "$(dirname "$0")/setup.sh"
if [ "${NUMPROBE_CALIBRATE_BUILD:-1}" = 1 ]; then
  configure_and_build
  install_python_package
fi
exec "$VENV/bin/python" "$NUMPROBE_ROOT/scripts/calibrate.py" --build "$BUILD_DIR" --torchrun "$VENV/bin/torchrun" "$@"
