"""A tiny causal language model trained by the Hugging Face ``Trainer`` of whichever transformers
release comes first on ``PYTHONPATH``, as that release ships it (no subclass, no patched method),
with numprobe attached in one line: ``callbacks=[NumprobeCallback()]``.

Each bug folder's ``train.py`` calls ``main()`` with the model its bug lives in; the layout (one
process or ``torchrun``, batch, accumulation, epochs) comes from the command line, which
``bug.json`` gives for each run. Data: synthetic token sequences of random lengths (the rest
padding, label -100), so that microbatches hold different numbers of tokens, as real ones do;
nothing is downloaded. The Trainer's logged loss of each step is written to ``--losses``: the curve
a person would compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --ga 2 --batch 2 --losses out/a/losses.json
"""
import argparse
import inspect
import json
import os
import tempfile

import torch

VOCAB = 96


def parse_args(argv, model):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["llama", "gpt2", "qwen2"], default=model)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (max_steps); 0: --epochs")
    p.add_argument("--epochs", type=float, default=1.0, help="num_train_epochs where --steps is 0")
    p.add_argument("--rows", type=int, default=0, help="samples (0: what --steps needs)")
    p.add_argument("--batch", type=int, default=2, help="per_device_train_batch_size")
    p.add_argument("--ga", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--lengths", choices=["random", "equal"], default="random",
                   help="sequence lengths: random (padded) or every one --seq tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--scheduler", default="constant", help="lr_scheduler_type")
    p.add_argument("--warmup", type=int, default=0, help="warmup_steps")
    p.add_argument("--optim", default="sgd", help="TrainingArguments.optim (SGD: Adam hides a gradient's scale)")
    p.add_argument("--average-tokens", choices=["default", "on", "off"], default="default",
                   help="average_tokens_across_devices where the release has it")
    p.add_argument("--losses", default="", help="write the Trainer's logged loss of each step here")
    return p.parse_args(argv)


def tiny_model(args):
    import transformers as tf
    torch.manual_seed(args.seed)
    if args.model == "gpt2":
        config = tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(config)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if args.model == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    return tf.LlamaForCausalLM(tf.LlamaConfig(**common))


def dataset(args, world):
    """Rows of random lengths from a generator of their own: the model's RNG is not touched."""
    g = torch.Generator().manual_seed(1000 + args.seed)
    size = args.rows or max(args.steps, 1) * args.ga * args.batch * world
    rows = []
    for _ in range(size):
        length = int(torch.randint(args.seq // 4, args.seq + 1, (), generator=g))
        length = args.seq if args.lengths == "equal" else length
        ids = torch.randint(1, VOCAB, (args.seq,), generator=g)
        mask = (torch.arange(args.seq) < length).long()
        ids = ids * mask  # padding: token 0
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return rows


def training_arguments(args, out, world):
    """The release's TrainingArguments; a setting the release does not have is not passed."""
    from transformers import TrainingArguments
    settings = dict(
        output_dir=out, use_cpu=True, report_to=[], seed=args.seed, data_seed=args.seed,
        per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.ga,
        learning_rate=args.lr, weight_decay=args.weight_decay, lr_scheduler_type=args.scheduler,
        warmup_steps=args.warmup, optim=args.optim, logging_steps=1, save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, ddp_backend="gloo" if world > 1 else None)
    if args.steps:
        settings["max_steps"] = args.steps
    else:
        settings["num_train_epochs"] = args.epochs
    if args.average_tokens != "default":
        settings["average_tokens_across_devices"] = args.average_tokens == "on"
    known = inspect.signature(TrainingArguments.__init__).parameters
    missing = [k for k in settings if k not in known]
    if "average_tokens_across_devices" in missing:
        raise SystemExit("this transformers release has no average_tokens_across_devices")
    return TrainingArguments(**{k: v for k, v in settings.items() if k in known})


def step_losses():
    """A Trainer callback that keeps the loss the Trainer logs at each step (its ``losses``): the
    curve a person would compare. Made here, not at import, so that its base class is that of the
    transformers release first on PYTHONPATH."""
    from transformers import TrainerCallback

    class StepLosses(TrainerCallback):
        def __init__(self):
            self.losses = []

        def on_log(self, a, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

    return StepLosses()


def main(argv=None, model="llama"):
    args = parse_args(argv, model)
    from transformers import Trainer, default_data_collator
    from numprobe.integrations.transformers import NumprobeCallback
    world = int(os.environ.get("WORLD_SIZE", "1"))

    losses = step_losses()
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(model=tiny_model(args), args=training_arguments(args, out, world),
                          train_dataset=dataset(args, world), data_collator=default_data_collator,
                          callbacks=[NumprobeCallback(), losses])  # the one line
        trainer.train()
    if args.losses and int(os.environ.get("RANK", "0")) == 0:
        with open(args.losses, "w") as f:
            json.dump(losses.losses, f)
