"""numprobe.integrations.pipelining: two pipeline stages (Schedule1F1B over Gloo, one a rank)
with the probe attached record what one process records with probe.forward and probe.backward,
each chunk under its global microbatch id; close() puts the schedule back
(tests/python/pipelining_run.py trains both)."""
import json
import os
import sys

from conftest import diff_logs, run

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "pipelining_run.py")
STEPS, MICROBATCHES = 2, 4  # pipelining_run.py's STEPS, ACCUMULATION x CHUNKS


def records(log, kind, name):
    """The microbatch ids of ``log``'s records of ``kind`` ``name``, step by step."""
    lines = [line for line in log.read_text().splitlines() if f" kind={kind} name={name} " in line]
    return [[int(line.split(" mb=")[1].split()[0]) for line in lines if line.startswith(f"step={s} ")]
            for s in range(STEPS)]


def test_two_pipeline_stages_record_what_one_process_records(tmp_path):
    run([sys.executable, RUN, "--layout", "single", "--out", tmp_path / "single", "--result", tmp_path / "single.json"])
    run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", RUN,
         "--layout", "pp", "--out", tmp_path / "pp", "--result", tmp_path / "pp.result"])
    code, report = diff_logs(tmp_path / "single", tmp_path / "pp")
    assert code == 0, report.get("first_divergence")
    # The first stage records the model's input, the last its output and loss, each stage its
    # parameters' gradient of every microbatch, in the schedule's order under the global ids.
    every = [list(range(MICROBATCHES))] * STEPS
    first, last = tmp_path / "pp" / "rank0" / "diff.log", tmp_path / "pp" / "rank1" / "diff.log"
    none = [[]] * STEPS
    assert records(first, "input", "model") == records(first, "rng", "cpu") == every
    assert records(first, "mb_grad", "first.0.weight") == every
    assert records(first, "output", "model") == records(first, "output", "loss") == none
    assert records(last, "input", "model") == records(last, "rng", "cpu") == none
    assert records(last, "mb_grad", "last.weight") == every
    assert records(last, "output", "model") == records(last, "output", "loss") == every
    # The loss function knows a microbatch's loss from the schedule's shape inference.
    ranks = [json.loads((tmp_path / "pp.result" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [mb for mb in ranks[1]["loss_calls"] if mb is not None] == list(range(MICROBATCHES)) * STEPS
    for rank in ranks:
        assert rank["hooks_left"] == 0 and rank["wrapped_left"] == []
