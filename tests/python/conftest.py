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


def diff_logs(base, test):
    """(exit code, the JSON report) of diff_logs BASE TEST: the build's, else the installed one."""
    import json
    import shutil
    exe = shutil.which("diff_logs", path=str(ROOT / "build" / "bin")) or shutil.which("diff_logs")
    done = subprocess.run([exe, str(base), str(test), "--json", "-"], capture_output=True, text=True)
    assert done.returncode in (0, 1, 4), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def headline(report):
    """The first unexplained divergence as "kind name [mb N]", or None."""
    p = report.get("first_unexplained_divergence")
    return None if p is None else f"{p['kind']} {p['name']}" + (f" mb {p['mb']}" if p.get("mb") is not None else "")


@pytest.fixture
def root():
    return ROOT


def train(script, out, *flags, ranks=1, probe=1, env=None):
    """Trains an example into run directory ``out`` on ``ranks`` processes; its step losses.
    ``env``: more of the environment (a release put first on PYTHONPATH)."""
    losses = out.parent / f"{out.name}.losses"
    cmd = [sys.executable, script] if ranks == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", script]
    run(cmd + ["--probe", str(probe), "--losses", losses, *map(str, flags)],
        env={"PROBE_DIR": str(out), **(env or {})})
    return losses.read_text()
