"""A tiny causal language model with a PEFT LoRA adapter, trained by the Hugging Face ``Trainer``,
with the ``peft`` and ``transformers`` releases that come first on ``PYTHONPATH``, as they ship
(no subclass, no patched method), numprobe attached in one line: ``callbacks=[NumprobeCallback()]``.

Each bug folder's ``train.py`` calls ``main()`` with the base model, the ``LoraConfig`` settings
and the optimizer its bug lives in (``sgd``: the Trainer's own; ``loraplus``: PEFT's
``create_loraplus_optimizer`` over ``torch.optim.SGD``; ``lorafa``: PEFT's
``create_lorafa_optimizer``; PEFT's own optimizers handed to the Trainer by
``optimizers=(optimizer, None)``, as PEFT's documentation does); the layout (batch, accumulation)
comes from the command line, which ``bug.json`` gives for each run. Data and training arguments
are those of ``hf_tiny.py``: synthetic token sequences of random lengths, SGD, a constant learning
rate; nothing is downloaded. The Trainer's logged loss of each step is written to ``--losses``.

    PROBE_DIR=out/a python examples/real_bugs/<bug>/train.py --ga 2 --batch 2 --losses out/a/losses.json
"""
import argparse
import json
import os
import tempfile

import torch

from hf_tiny import VOCAB, dataset, step_losses, training_arguments


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (max_steps)")
    p.add_argument("--batch", type=int, default=2, help="per_device_train_batch_size")
    p.add_argument("--ga", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--losses", default="", help="write the Trainer's logged loss of each step here")
    args = p.parse_args(argv)
    # The settings of hf_tiny.py's data and TrainingArguments this module does not vary.
    args.rows, args.epochs, args.lengths, args.weight_decay = 0, 1.0, "random", 0.0
    args.scheduler, args.warmup, args.optim, args.average_tokens = "constant", 0, "sgd", "default"
    return args


def base_model(name, seed, tie_word_embeddings=True):
    """A config-built model of 2 layers, width 32: ``llama`` or ``gemma3`` (Gemma3ForCausalLM,
    whose token embedding multiplies its output by sqrt(width), Gemma3TextScaledWordEmbedding)."""
    import transformers as tf
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  tie_word_embeddings=tie_word_embeddings)
    if name == "gemma3":
        config = tf.Gemma3TextConfig(head_dim=8, query_pre_attn_scalar=8, sliding_window=8, **common)
        config._attn_implementation = "eager"
        return tf.Gemma3ForCausalLM(config)
    return tf.LlamaForCausalLM(tf.LlamaConfig(**common))


def main(argv=None, model="llama", lora=None, optimizer="sgd", optimizer_args=None, tie_word_embeddings=True):
    args = parse_args(argv)
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, default_data_collator
    from numprobe.integrations.transformers import NumprobeCallback
    world = int(os.environ.get("WORLD_SIZE", "1"))

    net = base_model(model, args.seed, tie_word_embeddings)
    torch.manual_seed(args.seed + 1)  # the adapter's initialization
    net = get_peft_model(net, LoraConfig(task_type="CAUSAL_LM", **(lora or {})))
    optimizers = (None, None)
    if optimizer == "loraplus":
        from peft.optimizers import create_loraplus_optimizer
        optimizers = (create_loraplus_optimizer(net, torch.optim.SGD, lr=args.lr, **(optimizer_args or {})), None)
    elif optimizer == "lorafa":
        from peft.optimizers import create_lorafa_optimizer
        optimizers = (create_lorafa_optimizer(net, lr=args.lr, **(optimizer_args or {})), None)
    losses = step_losses()
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(model=net, args=training_arguments(args, out, world),
                          train_dataset=dataset(args, world), data_collator=default_data_collator,
                          optimizers=optimizers,
                          callbacks=[NumprobeCallback(), losses])  # the one line
        trainer.train()
    if args.losses and int(os.environ.get("RANK", "0")) == 0:
        with open(args.losses, "w") as f:
            json.dump(losses.losses, f)
