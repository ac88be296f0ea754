"""Shared by the package's pytest suites: the package must be installed (scripts/test.sh
installs it), and the examples are run from the checkout."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("NUMPROBE_ROOT", pathlib.Path(__file__).resolve().parents[2]))

try:
    import numprobe  # noqa: F401
except ImportError as e:  # a clear failure, not a skip: the package is what is tested
    raise ImportError(f"numprobe is not installed in {sys.executable} ({e}); scripts/test.sh installs it "
                      "(pip install --no-build-isolation .)") from e


def run(args, **kwargs):
    """Runs a command, failing the test with its output when it fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.update(kwargs.pop("env", {}))
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def root():
    return ROOT
