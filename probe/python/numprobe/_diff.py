"""numprobe.diff(): diff_logs from Python, its result as the --json document says it."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

EXIT_MEANINGS = {0: "equal", 1: "differences", 2: "bad input", 4: "noise"}


def diff_logs_path():
    """The diff_logs this package installed (beside the Python that runs it), else PATH's."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, "diff_logs")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("diff_logs")
    if found is None:
        raise FileNotFoundError("numprobe: diff_logs is not installed beside this Python nor on PATH "
                                "(pip install --no-build-isolation . installs it)")
    return found


def diff(base, test, **options):
    """Compares two runs (run directories or log files) and returns diff_logs' --json document
    as a dict, with ``exit_code`` (0 equal, 4 differences all explained as noise, 1 differences,
    2 bad input) and ``text``, the report diff_logs prints.

    Options are diff_logs' flags with '_' for '-': ``rtol=1e-6``, ``steps="0:3"``,
    ``kinds="-op"``, ``map=["a=b", "c=d"]``, ``html="report.html"``, ``strict=True``. Raises
    ValueError when diff_logs refuses the input (exit 2), with what it said."""
    with tempfile.TemporaryDirectory(prefix="numprobe-diff-") as tmp:
        json_path = os.path.join(tmp, "result.json")
        args = [diff_logs_path(), str(base), str(test), "--json", json_path, "--no-color"]
        args += _flags(options)
        done = subprocess.run(args, capture_output=True, text=True)
        result = _read_json(json_path)
    if result is None:
        message = (done.stderr or done.stdout).strip()
        if done.returncode == 2:
            raise ValueError(f"numprobe.diff({str(base)!r}, {str(test)!r}): {message}")
        raise RuntimeError(f"numprobe.diff: diff_logs exited {done.returncode} without a result: {message}")
    result["exit_code"] = done.returncode
    result["text"] = done.stdout
    return result


def _flags(options):
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            for v in value:  # repeatable flags (--map): once per value
                args.extend([flag, str(v)])
        else:
            args.extend([flag, str(value)])
    return args


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
