"""A tiny Llama trained on preference data by a trainer of whichever ``trl`` release comes first on
``PYTHONPATH`` (with the transformers release beside it), as that release ships it (no subclass,
no patched method), with numprobe attached in one line: ``callbacks=[NumprobeCallback()]``, the
Hugging Face Trainer's callback, which TRL's trainers take as theirs.

``--trainer`` picks the trainer: ``dpo`` (``DPOTrainer``, with a reference model) or ``cpo``
(``CPOTrainer``, none). The policy, and the reference model, are a ``LlamaForCausalLM`` built from
a config with the same seed: the reference starts as a copy of the policy, as a DPO run starts from
one checkpoint loaded twice. The tokenizer is a word-level ``PreTrainedTokenizerFast`` built in
place. Data: a synthetic preference dataset (``prompt``, ``chosen``, ``rejected``) of random words,
every prompt ``--prompt-words`` long and every completion ``--completion-words`` (after a space,
where a trainer joins prompt and completion as text), so that the collator pads nothing whatever the
grouping and nothing is truncated; nothing is downloaded. The Trainer's logged loss of
each step is written to ``--losses``: the curve a person would compare.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --ga 2 --batch 1 --losses out/a/losses.json
"""
import argparse
import inspect
import json
import os
import tempfile

import torch

from hf_tiny import step_losses

WORDS = 90  # the vocabulary: <pad>, <s>, </s>, <unk> and w0 ... w89


def parse_args(argv, trainer):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainer", choices=["dpo", "cpo"], default=trainer)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (max_steps)")
    p.add_argument("--batch", type=int, default=1, help="per_device_train_batch_size")
    p.add_argument("--ga", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--prompt-words", type=int, default=6)
    p.add_argument("--completion-words", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--max-grad-norm", type=float, default=1.0,
                   help="max_grad_norm: the Trainer's default clips the gradient to norm 1 (0: no clipping)")
    p.add_argument("--losses", default="", help="write the Trainer's logged loss of each step here")
    return p.parse_args(argv)


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(WORDS)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def tiny_llama(args, vocab_size):
    import transformers as tf
    torch.manual_seed(args.seed)
    config = tf.LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return tf.LlamaForCausalLM(config)


def preferences(args, world):
    """Rows of random words from a generator of their own: the model's RNG is not touched."""
    from datasets import Dataset
    g = torch.Generator().manual_seed(1000 + args.seed)

    def words(n):
        return " ".join(f"w{int(i)}" for i in torch.randint(0, WORDS, (n,), generator=g))

    size = args.steps * args.ga * args.batch * world
    rows = [{"prompt": words(args.prompt_words), "chosen": " " + words(args.completion_words),
             "rejected": " " + words(args.completion_words)} for _ in range(size)]
    return Dataset.from_list(rows)


def config(cls, args, out, world):
    """The release's config (a TrainingArguments); a setting the release does not have is not passed."""
    settings = dict(
        output_dir=out, use_cpu=True, report_to=[], seed=args.seed, data_seed=args.seed,
        per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.ga, max_steps=args.steps,
        learning_rate=args.lr, max_grad_norm=args.max_grad_norm, lr_scheduler_type="constant", optim="sgd",
        logging_steps=1, save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, ddp_backend="gloo" if world > 1 else None,
        beta=args.beta, max_length=32, max_prompt_length=16, max_completion_length=16)  # nothing truncated
    known = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in settings.items() if k in known})


def main(argv=None, trainer="dpo"):
    args = parse_args(argv, trainer)
    import trl
    from numprobe.integrations.transformers import NumprobeCallback
    world = int(os.environ.get("WORLD_SIZE", "1"))

    losses = step_losses()
    tok = tokenizer()
    if args.prompt_words > 15 or args.completion_words > 15:
        raise SystemExit("--prompt-words and --completion-words: 15 at most (nothing is truncated)")
    common = dict(model=tiny_llama(args, len(tok)), train_dataset=preferences(args, world),
                  processing_class=tok, callbacks=[NumprobeCallback(), losses])  # the one line
    with tempfile.TemporaryDirectory() as out:
        if args.trainer == "dpo":
            run = trl.DPOTrainer(ref_model=tiny_llama(args, len(tok)), args=config(trl.DPOConfig, args, out, world),
                                 **common)
        else:
            run = trl.CPOTrainer(args=config(trl.CPOConfig, args, out, world), **common)
        run.train()
    if args.losses and int(os.environ.get("RANK", "0")) == 0:
        with open(args.losses, "w") as f:
            json.dump(losses.losses, f)
