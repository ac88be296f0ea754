"""numprobe on trainers as they ship, attached by the one line a user writes: the Hugging Face
Trainer (`callbacks=[NumprobeCallback()]`, examples/python/hf_trainer.py) and Lightning
(examples/python/lightning_train.py). Layouts that must agree compare clean (exit 0 or 4); the
bugs these trainers shipped are headlined at their records; the probe changes no loss."""
import re

import pytest

from conftest import ROOT, diff_logs, headline, train

HF = ROOT / "examples" / "python" / "hf_trainer.py"
LIGHTNING = ROOT / "examples" / "python" / "lightning_train.py"


@pytest.fixture(scope="module")
def hf_single(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "single"
    losses = train(HF, out, "--ga", 2, "--batch", 2)
    return out, losses


def test_hf_callback_changes_no_loss(tmp_path, hf_single):
    assert train(HF, tmp_path / "plain", "--ga", 2, "--batch", 2, probe=0) == hf_single[1]


def test_hf_records_are_named_by_the_models_fields(hf_single):
    text = (hf_single[0] / "rank0" / "diff.log").read_text()
    for record in ("kind=input name=input_ids mb=0", "kind=input name=labels mb=0",
                   "kind=output name=loss mb=0", "kind=output name=logits mb=0",
                   "kind=output_grad name=loss mb=0", "kind=input name=numprobe.sample mb=0",
                   "kind=optim name=model.norm.weight.weight_decay value=0"):
        assert record in text, record
    # A tied head is one parameter: its embedding's.
    assert "name=lm_head.weight" not in text


HF_LAYOUTS = [
    ("ddp2", ["--ga", 1, "--batch", 2], 2),
    ("ga4x1", ["--ga", 4, "--batch", 1], 1),
    ("compiled", ["--ga", 2, "--batch", 2, "--compile", "aot_eager"], 1),
]


@pytest.mark.parametrize("name,flags,ranks", HF_LAYOUTS, ids=[l[0] for l in HF_LAYOUTS])
def test_hf_layouts_compare_clean(tmp_path, hf_single, name, flags, ranks):
    train(HF, tmp_path / name, *flags, ranks=ranks)
    code, report = diff_logs(hf_single[0], tmp_path / name)
    assert code in (0, 4), f"{name}: exit {code}, headline {headline(report)}"


HF_FAULTS = [
    # Before 4.46 the model was not passed the window's token count: the argument is missing.
    ("ga-mean", ["--ga", 2, "--batch", 2], 1, r"^(input num_items_in_batch mb 0|output loss mb 0)$"),
    ("untied-head", ["--ga", 1, "--batch", 2], 2, r"lm_head\.weight"),
    ("decay-norms", ["--ga", 1, "--batch", 2], 2, r"^optim \S*norm\.weight\.weight_decay$"),
    ("scheduler-early", ["--ga", 1, "--batch", 2], 2, r"^optim \S+\.lr$"),
    ("rank-unscaled", ["--ga", 1, "--batch", 2], 2, r"^(output_grad loss mb \d+|mb_grad \S+ mb \d+|grad \S+)$"),
]


@pytest.mark.parametrize("fault,flags,ranks,expected", HF_FAULTS, ids=[f[0] for f in HF_FAULTS])
def test_hf_faults_are_headlined_at_their_records(tmp_path, hf_single, fault, flags, ranks, expected):
    train(HF, tmp_path / fault, *flags, "--fault", fault, ranks=ranks)
    code, report = diff_logs(hf_single[0], tmp_path / fault)
    assert code == 1, f"{fault}: exit {code}"
    assert re.search(expected, headline(report) or ""), f"{fault}: headline {headline(report)}"
    if fault == "untied-head":  # told as untied, not as a name the runs do not share
        likely = report["likely_causes"][0]
        assert likely["rule"] == "untied", likely
        assert "lists lm_head.weight as another name of param model.embed_tokens.weight" in likely["message"], likely


@pytest.fixture(scope="module")
def lightning_single(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning") / "single"
    losses = train(LIGHTNING, out, "--ga", 2, "--batch", 2)
    return out, losses


def test_lightning_callback_changes_no_loss(tmp_path, lightning_single):
    assert train(LIGHTNING, tmp_path / "plain", "--ga", 2, "--batch", 2, probe=0) == lightning_single[1]


LIGHTNING_LAYOUTS = [
    ("ddp2", ["--ga", 1, "--batch", 2], 2),
    ("ga4x1", ["--ga", 4, "--batch", 1], 1),
]


@pytest.mark.parametrize("name,flags,ranks", LIGHTNING_LAYOUTS, ids=[l[0] for l in LIGHTNING_LAYOUTS])
def test_lightning_layouts_compare_clean(tmp_path, lightning_single, name, flags, ranks):
    train(LIGHTNING, tmp_path / name, *flags, ranks=ranks)
    code, report = diff_logs(lightning_single[0], tmp_path / name)
    assert code in (0, 4), f"{name}: exit {code}, headline {headline(report)}"


def test_lightning_fault_is_headlined_at_its_record(tmp_path, lightning_single):
    train(LIGHTNING, tmp_path / "decay", "--ga", 1, "--batch", 2, "--fault", "decay-norms", ranks=2)
    code, report = diff_logs(lightning_single[0], tmp_path / "decay")
    assert code == 1
    assert re.search(r"^optim \S*norm\.weight\.weight_decay$", headline(report) or ""), headline(report)


ACCELERATE = ROOT / "examples" / "python" / "accelerate_train.py"


def test_accelerate_attach_changes_no_loss_and_compares_clean_across_layouts(tmp_path):
    single = train(ACCELERATE, tmp_path / "single", "--ga", 2, "--batch", 2)
    assert train(ACCELERATE, tmp_path / "plain", "--ga", 2, "--batch", 2, probe=0) == single
    train(ACCELERATE, tmp_path / "ddp", "--ga", 1, "--batch", 2, ranks=2)
    code, report = diff_logs(tmp_path / "single", tmp_path / "ddp")
    assert code in (0, 4), headline(report)
    train(ACCELERATE, tmp_path / "decay", "--ga", 1, "--batch", 2, "--fault", "decay-norms", ranks=2)
    code, report = diff_logs(tmp_path / "single", tmp_path / "decay")
    assert code == 1
    assert re.search(r"^optim \S*norm\.weight\.weight_decay$", headline(report) or ""), headline(report)


def test_lightning_mean_losses_over_microbatches_grouped_otherwise_differ(tmp_path):
    # Each microbatch's token mean over sequences of random lengths: accumulation 2 x 2 and 4 x 1
    # weigh the step's tokens otherwise, a real difference of the training, told at the step.
    train(LIGHTNING, tmp_path / "a", "--ga", 2, "--batch", 2, "--padded")
    train(LIGHTNING, tmp_path / "b", "--ga", 4, "--batch", 1, "--padded")
    code, report = diff_logs(tmp_path / "a", tmp_path / "b")
    assert code == 1
    assert re.search(r"^grad \S+$", headline(report) or ""), headline(report)
    assert "REGROUPED MICROBATCHES" in report["first_unexplained_divergence"]["cause"]["message"]
