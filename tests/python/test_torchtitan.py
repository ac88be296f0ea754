"""numprobe attached to torchtitan 0.3's Trainer (numprobe.integrations.torchtitan): its llama3
at debug sizes on CPU over Gloo, trained by torchtitan's own parallelize, optimizer, LR scheduler
and loss code (tests/python/torchtitan_run.py says what it changes to run here). Clean layouts
against one rank are noise (exit 4), with torchtitan's gradient clipping on; planted bugs are
headlined."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torchtitan", reason="torchtitan==0.3.0 (scripts/setup.sh installs it)")

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "torchtitan_run.py")
STEPS, MICROBATCHES = 3, 4


def train(out, nproc, *flags):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                           RUN, "--out", str(out), "--steps", str(STEPS), "--microbatches", str(MICROBATCHES), *flags],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out


def diff(base, test, tmp_path):
    out = tmp_path / f"{test.name}.json"
    done = subprocess.run(["diff_logs", str(base), str(test), "--json", str(out), "--no-color"],
                          capture_output=True, text=True)
    assert done.returncode in (0, 1, 4), done.stderr
    return done.returncode, json.loads(out.read_text()), done.stdout


# torchtitan's own default: FSDP2 computes in bfloat16 (installed on one rank too), its master
# weights and reductions float32.
BF16 = ["--mixed-precision-param", "bfloat16"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return train(tmp_path_factory.mktemp("tt") / "single", 1)


@pytest.fixture(scope="module")
def single_bf16(tmp_path_factory):
    return train(tmp_path_factory.mktemp("tt") / "single_bf16", 1, *BF16)


def one_rank(request, flags):
    """The single-rank run of the same precision as `flags`."""
    return request.getfixturevalue("single_bf16" if "bfloat16" in flags else "single")


CLEAN = {
    "fsdp2": (2, ["--dp", "2"]),
    "tp2_sp": (2, ["--tp", "2"]),
    # Compiled per block as torchtitan does (fullgraph). (Compile, AC and TP together fail in
    # torch 2.13 itself, with or without the probe: a DeviceMesh among the tensors saved for
    # backward.)
    "fsdp2_tp2_compiled": (4, ["--dp", "2", "--tp", "2", "--compile", "aot_eager"]),
    "tp2_sp_full_ac": (2, ["--tp", "2", "--ac", "full"]),
    "fsdp2_selective_ac": (2, ["--dp", "2", "--ac", "selective"]),
    "full_dtensor_fsdp2": (2, ["--dp", "2", "--backend", "full_dtensor"]),
    # torchtitan's pipeline schedules: a single-stage one, a looped zero-bubble one (four stages
    # on two ranks, the weight gradients in a pass of their own), and PP with FSDP2.
    "pp2_1f1b": (2, ["--pp", "2"]),
    "pp2_interleaved_zero_bubble": (2, ["--pp", "2", "--pp-schedule", "InterleavedZeroBubble"]),
    "pp2_fsdp2": (4, ["--pp", "2", "--dp", "2"]),
    "fsdp2_bf16": (2, ["--dp", "2", *BF16]),
}


@pytest.mark.parametrize("layout", sorted(CLEAN))
def test_a_clean_torchtitan_layout_against_one_rank_is_noise(request, tmp_path, layout):
    nproc, flags = CLEAN[layout]
    test = train(tmp_path / layout, nproc, *flags)
    code, result, text = diff(one_rank(request, flags), test, tmp_path)
    assert code == 4, text[:3000]
    assert result["paired_steps"] == STEPS
    # Every record pairs: none is one layout's only (a stage's records under a schedule's order).
    one_sided = {kind: n for kind, counts in result["summary"].items()
                 for side, n in counts.items() if side in ("only_base", "only_test", "none_one_side") and n}
    assert not one_sided, one_sided
    header = text.splitlines()[1]
    assert "torchtitan" in header and "rank" in header, header  # the layout and this rank's coordinates


BUGS = {
    # Clipping by the local norm: each rank's shards scaled by their own coefficient.
    "fsdp2_clip_local": (2, ["--dp", "2", "--fault", "clip_local"], "grad"),
    "tp2_clip_local": (2, ["--tp", "2", "--fault", "clip_local"], "grad"),
    "pp2_clip_local": (2, ["--pp", "2", "--fault", "clip_local"], "grad"),
    "fsdp2_clip_local_bf16": (2, ["--dp", "2", "--fault", "clip_local", *BF16], "grad"),
    # A schedule that skips the first stage's backward of the step's last microbatch: that
    # microbatch's gradients of the stage's parameters are missing.
    "pp2_skipped_backward": (2, ["--pp", "2", "--fault", "pp_skip_backward"], "mb_grad"),
    # One parameter's gradient x 1.01 on one rank.
    "tp2_grad_scale": (2, ["--tp", "2", "--fault", "grad_scale"], "grad layers.0.attention.wo.weight"),
    # A wrong plan entry: the vocabulary-parallel embedding's partial lookups used unreduced
    # (no tap: the model's output is the first record it reaches).
    "tp2_sp_wrong_plan": (2, ["--tp", "2", "--fault", "plan"], "output model"),
    "tp2_wrong_plan": (2, ["--tp", "2", "--sp", "0", "--fault", "plan"], "output model"),
    # The sequence-parallel norm's weight gradient never summed over the TP ranks.
    "fsdp2_tp2_sp_norm_grad": (4, ["--dp", "2", "--tp", "2", "--fault", "norm_grad"],
                               "mb_grad layers.0.ffn_norm.weight"),
}


@pytest.mark.parametrize("case", sorted(BUGS))
def test_a_planted_torchtitan_bug_is_headlined(request, tmp_path, case):
    nproc, flags, headline = BUGS[case]
    test = train(tmp_path / case, nproc, *flags)
    code, result, text = diff(one_rank(request, flags), test, tmp_path)
    assert code == 1, text[:3000]
    first = result["first_unexplained_divergence"]
    assert first is not None and f"{first['kind']} {first['name']}".startswith(headline), first
    assert first["step"] == 1


def test_every_microbatch_optimizer_state_and_learning_rate_are_recorded(single):
    lines = (single / "rank0" / "diff.log").read_text().splitlines()
    step1 = [line for line in lines if line.startswith("step=1 ")]
    assert sum(" kind=output name=model " in line for line in step1) == MICROBATCHES
    assert sum(" kind=output name=loss " in line for line in step1) == MICROBATCHES
    assert any(" kind=optim name=lm_head.weight.exp_avg_sq " in line for line in step1)
    assert any(" kind=optim name=lm_head.weight.lr " in line for line in step1)
