#!/usr/bin/env bash
# The corpus of real numerical bugs (examples/real_bugs/, docs/real-bugs.md), from a fresh machine:
# the project's set-up (scripts/setup.sh: venv, build/, the Python package), then the framework
# releases the bugs run, pinned (scripts/releases/<name>.txt), each installed once into a folder
# of its own under $NUMPROBE_RELEASES (~/.cache/numprobe/releases), never into the venv. Then each
# bug's runs are trained, compared with diff_logs, and one table is printed (scripts/real_bugs.py).
#
#   scripts/real_bugs.sh [NAME...] [--quick] [--out DIR] [--markdown FILE]
#
# Exit status: 0 when every bug is headlined at its expected record and every fixed release
# compares clean; 1 otherwise; 2 on a bug folder that does not say what it must.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
configure_and_build
install_python_package
mapfile -t releases < <("$VENV/bin/python" "$NUMPROBE_ROOT/scripts/real_bugs.py" --releases "$@")
ensure_releases "${releases[@]}"
exec "$VENV/bin/python" "$NUMPROBE_ROOT/scripts/real_bugs.py" "$@"
