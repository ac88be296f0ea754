"""The Trainer callback on an older transformers release, as it shipped: 4.48.3 with accelerate
1.3.0 (scripts/releases/transformers-4.48.3.txt, installed by scripts/test.sh beside the venv's
torch), put first on PYTHONPATH. The same one line attaches; layouts that agree compare clean;
and the release's own layout dependence is headlined where it enters the forward: with
``average_tokens_across_devices`` off (4.48's default), each rank normalizes its loss by its own
token count (transformers issue #34242), a number the forward is passed."""
import os
import pathlib
import re
import sys

import pytest

from conftest import ROOT, diff_logs, headline, run, train as train_example

HF = ROOT / "examples" / "python" / "hf_trainer.py"
RELEASE = pathlib.Path(os.environ.get("NUMPROBE_RELEASES", pathlib.Path.home() / ".cache" / "numprobe" / "releases"))
TRANSFORMERS_4_48 = RELEASE / "transformers-4.48.3"


def train(out, *flags, ranks=1, probe=1):
    if not (TRANSFORMERS_4_48 / "transformers").is_dir():
        pytest.fail(f"{TRANSFORMERS_4_48} holds no transformers: scripts/test.sh installs it "
                    "(scripts/releases/transformers-4.48.3.txt)")
    return train_example(HF, out, *flags, ranks=ranks, probe=probe,
                         env={"PYTHONPATH": str(TRANSFORMERS_4_48)})


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf448") / "single"
    return out, train(out, "--ga", 2, "--batch", 2)


def test_the_release_is_the_one_trained(single):
    header = (single[0] / "rank0" / "diff.log").read_text().splitlines()[0]
    assert header.startswith("#numprobe "), header
    probe = ("import transformers, accelerate; "
             "print(transformers.__version__, accelerate.__version__)")
    done = run([sys.executable, "-c", probe], env={"PYTHONPATH": str(TRANSFORMERS_4_48)})
    assert done.stdout.split() == ["4.48.3", "1.3.0"], done.stdout


def test_callback_changes_no_loss(tmp_path, single):
    assert train(tmp_path / "plain", "--ga", 2, "--batch", 2, probe=0) == single[1]


def test_records_are_named_by_the_arguments_and_the_token_count_is_one(single):
    text = (single[0] / "rank0" / "diff.log").read_text()
    for record in ("kind=input name=input_ids mb=0", "kind=output name=loss mb=0",
                   "kind=input name=numprobe.sample mb=0",
                   # 4.48 passes the window's token count as a Python int: recorded as a number.
                   "kind=input name=num_items_in_batch mb=0"):
        assert record in text, record


LAYOUTS = [
    ("ddp2_tokens_averaged", ["--ga", 1, "--batch", 2, "--average-tokens", "on"], 2),
    ("ga4x1", ["--ga", 4, "--batch", 1], 1),
]


@pytest.mark.parametrize("name,flags,ranks", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_layouts_compare_clean(tmp_path, single, name, flags, ranks):
    train(tmp_path / name, *flags, ranks=ranks)
    code, report = diff_logs(single[0], tmp_path / name)
    assert code in (0, 4), f"{name}: exit {code}, headline {headline(report)}"


def test_each_rank_normalizing_by_its_own_tokens_is_headlined_at_the_count(tmp_path, single):
    train(tmp_path / "ddp2", "--ga", 1, "--batch", 2, ranks=2)  # the release's default: off
    code, report = diff_logs(single[0], tmp_path / "ddp2")
    assert code == 1
    assert headline(report) == "input num_items_in_batch mb 0", headline(report)
    cause = report["first_unexplained_divergence"]["cause"]
    assert cause["rule"] == "data", cause
    assert re.search(r"\(base \d+, test \d+\) while every other input", cause["message"]), cause
