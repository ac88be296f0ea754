"""examples/python/quickstart.py against the C++ quickstart: with SGD the logs' records are the
same bytes; with AdamW (Python's lerp_ against LibTorch's mul_/add_) the comparison headlines
the optimizer."""
import os
import sys

import pytest

import numprobe
from conftest import ROOT, run

CPP_QUICKSTART = os.environ.get("NUMPROBE_CPP_QUICKSTART", str(ROOT / "build/examples/numprobe_quickstart"))
PY_QUICKSTART = ROOT / "examples/python/quickstart.py"


def quickstarts(tmp_path, optimizer, steps=3, env=None):
    cpp, py = tmp_path / f"cpp-{optimizer}", tmp_path / f"py-{optimizer}"
    run([CPP_QUICKSTART, cpp, steps, optimizer], env=env or {})
    run([sys.executable, PY_QUICKSTART, py, steps, optimizer], env=env or {})
    return cpp, py


def records(run_dir):
    lines = (run_dir / "rank0" / "diff.log").read_text().splitlines()
    assert lines[0].startswith("#numprobe ")
    return lines[1:]  # the header names the setup, which differs


def test_sgd_logs_are_the_cpp_quickstarts_byte_for_byte(tmp_path):
    cpp, py = quickstarts(tmp_path, "sgd")
    cpp_records, py_records = records(cpp), records(py)
    kinds = {line.split()[1] for line in cpp_records if line.startswith("step=")}
    assert {"kind=param", "kind=rng", "kind=input", "kind=output", "kind=tap", "kind=output_grad",
            "kind=mb_grad", "kind=grad", "kind=scalar", "kind=optim"} <= kinds
    # 3 steps: 4 params, 2 microbatches x (rng, input, output, tap, output_grad, 4 mb_grads), 4 grads,
    # loss, and each parameter's learning rate (SGD without momentum keeps no state)
    assert len(cpp_records) == 96
    assert sum(".lr " in line for line in cpp_records) == 12
    assert py_records == cpp_records
    assert numprobe.diff(cpp, py)["exit_code"] == 0


def test_adamw_differs_by_design_and_is_headlined_as_the_optimizer(tmp_path):
    cpp, py = quickstarts(tmp_path, "adamw")
    result = numprobe.diff(cpp, py)
    assert result["exit_code"] == 1
    headline = result["first_unexplained_divergence"]
    assert headline["kind"] == "optim" and headline["step"] == 1
    assert headline["cause"]["rule"] == "optimizer"
    assert "[optimizer]" in result["text"]


def test_op_trace_records_python_ops_by_module(tmp_path):
    trace = {"PROBE_TRACE": "steps=0;scopes=^fc;mb=0"}
    py = tmp_path / "py"
    run([sys.executable, PY_QUICKSTART, py, 2, "sgd"], env=trace)
    ops = [line for line in records(py) if " kind=op " in line]
    names = {line.split(" name=")[1].split()[0] for line in ops}
    assert "fc1/aten::linear#0" in names and "fc2/aten::linear#0" in names
    assert "fc1/aten::linear#0/aten::mm#0" in names  # its backward, named after the forward op
    assert {line.split(" phase=")[1].split()[0] for line in ops} == {"forward", "backward"}
    again = tmp_path / "again"
    run([sys.executable, PY_QUICKSTART, again, 2, "sgd"], env=trace)
    assert numprobe.diff(py, again)["exit_code"] == 0
