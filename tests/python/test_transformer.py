"""examples/python/transformer.py under torchrun, compared with diff_logs through numprobe.diff.

Clean setups must agree with the single-process run up to summation order (exit 0 or 4); each
planted fault must be headlined where it was planted (exit 1). The single run is made once.

    .venv/bin/python -m pytest tests/python/test_transformer.py
"""
import os
import subprocess
import sys

import pytest

import numprobe  # the package under test: its absence is a failure, not a skip

from conftest import ROOT

TRAINER = str(ROOT / "examples" / "python" / "transformer.py")
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
STEPS = "2"


def train(out, nproc, *flags, steps=STEPS, env=None):
    """Runs the trainer on nproc ranks with tiny default sizes (and `env` added to the
    environment); returns its run directory."""
    cmd = [TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), TRAINER,
           "--steps", steps, "--out", str(out), *flags]
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    assert done.returncode == 0, f"$ {' '.join(cmd)}\nexited {done.returncode}:\n{done.stdout[-4000:]}"
    return out


def compare(base, test):
    result = numprobe.diff(base, test)
    report = f"$ diff_logs {base} {test}\n" + "\n".join(result["text"].splitlines()[:60])
    return result, report


def headline(result):
    pair = result["first_unexplained_divergence"]
    assert pair is not None, "no unexplained divergence in the result"
    return pair


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("transformer")


@pytest.fixture(scope="module")
def single(runs):
    return train(runs / "single", 1, "--setup", "single")


@pytest.mark.parametrize("name, nproc, flags", [
    ("fsdp", 2, ["--setup", "fsdp"]),
    ("tp", 2, ["--setup", "tp"]),
    ("tp-sp", 2, ["--setup", "tp", "--sp"]),
    ("fsdp-tp", 4, ["--setup", "fsdp-tp", "--tp", "2"]),
    # Each block compiled in place (fullgraph), as torchtitan compiles: the row-parallel taps are
    # graph operators, FSDP2's unsharded gradients are still hooked.
    ("fsdp-inductor", 2, ["--setup", "fsdp", "--compile", "inductor"]),
    ("tp-aot-eager", 2, ["--setup", "tp", "--compile", "aot_eager"]),
    # What a user writes first: watch and forward only, no tap of the row-parallel sums.
    ("tp-sp-no-taps", 2, ["--setup", "tp", "--sp", "--taps", "none"]),
])
def test_clean_setup_agrees_with_single(single, runs, name, nproc, flags):
    result, report = compare(single, train(runs / name, nproc, *flags))
    assert result["exit_code"] in (0, 4), report
    # Every microbatch's gradient recorded on both sides and paired (FSDP2: taken from the
    # unsharded parameter, before the reduce-scatter), none on one side only.
    mb_grads = result["summary"]["mb_grad"]
    paired = mb_grads["equal"] + mb_grads["within_tol"] + mb_grads["different"]
    assert paired > 0 and mb_grads["only_base"] == mb_grads["only_test"] == 0, report


def test_adamw_under_sequence_parallel_agrees_with_single(runs):
    """The norm weights' grads stay Partial under sequence parallel: AdamW's state updated from
    them differs by that reduction's rounding, which is noise, not the optimizer."""
    adamw = ["--optimizer", "adamw", "--lr", "0.01"]
    base = train(runs / "single-adamw", 1, "--setup", "single", *adamw)
    result, report = compare(base, train(runs / "tp-sp-adamw", 2, "--setup", "tp", "--sp", *adamw))
    assert result["exit_code"] in (0, 4), report
    assert result["partial_records"], report  # the partial grads were there to be set aside


@pytest.mark.parametrize("name, nproc, flags", [
    ("tp", 2, ["--setup", "tp"]),
    ("fsdp-tp", 4, ["--setup", "fsdp-tp", "--tp", "2"]),
])
def test_unreduced_sequence_parallel_norm_grad_is_headlined(single, runs, name, nproc, flags):
    test = train(runs / f"{name}-norm-unreduced", nproc, *flags, "--sp", "--fault", "tp-norm-unreduced")
    result, report = compare(single, test)
    assert result["exit_code"] == 1, report
    pair = headline(result)
    assert pair["step"] == 0, report
    assert pair["kind"] in ("grad", "mb_grad") and pair["name"].endswith("norm.weight"), report
    line = next(l for l in result["text"].splitlines() if l.startswith("FIRST UNEXPLAINED DIVERGENCE"))
    assert f"{pair['name']}  [{pair['class']}]" in line, report
    # Each rank's own summand taken for the reduced gradient: the TP replicas disagree.
    assert pair["cause"]["rule"] == "replica_mismatch", report


def test_aot_eager_blocks_log_what_eager_blocks_log(single, runs):
    """aot_eager runs the traced graph with eager kernels: the same bits, taps included."""
    result, report = compare(single, train(runs / "single-aot-eager", 1, "--setup", "single", "--compile", "aot_eager"))
    assert result["exit_code"] == 0, report


def test_wrong_shard_offset_is_headlined(single, runs):
    test = train(runs / "shard-offset", 2, "--setup", "tp", "--fault", "shard-offset")
    result, report = compare(single, test)
    assert result["exit_code"] == 1, report
    pair = headline(result)
    assert (pair["step"], pair["kind"], pair["name"]) == (0, "param", "layers.0.attention.wq.weight"), report
    assert pair["explanation"]["category"] == "bug", report


def test_op_trace_under_tensor_parallel_records_the_local_ops(runs):
    """PROBE_TRACE with DTensors: DTensor ops are passed through (no data of their own) and the
    ops they run on the local shards are recorded; the sharding propagation's fake tensors are
    not. The trace must never stop training."""
    out = train(runs / "tp2-traced", 2, "--setup", "tp", steps="1",
                env={"PROBE_TRACE": r"steps=0;scopes=^layers\.0(\.|$);mb=0"})
    with open(out / "rank0" / "diff.log") as f:
        ops = [line for line in f if " kind=op " in line]
    names = [line.split(" name=")[1].split()[0] for line in ops]
    assert any("aten::mm" in n or "aten::addmm" in n or "aten::linear" in n for n in names), names[:20]
    assert any(" phase=backward" in line for line in ops)
    assert not any("unsupported=" in line for line in ops), [line[:160] for line in ops if "unsupported=" in line][:3]
