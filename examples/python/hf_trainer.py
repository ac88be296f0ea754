#!/usr/bin/env python3
"""The Hugging Face Trainer as it ships, on a tiny Llama built from a config, with numprobe
attached by one callback:

    PROBE_DIR=out/single python examples/python/hf_trainer.py --ga 2 --batch 2
    PROBE_DIR=out/ddp    torchrun --standalone --nproc-per-node 2 examples/python/hf_trainer.py --ga 1 --batch 2
    PROBE_DIR=out/ga     python examples/python/hf_trainer.py --ga 4 --batch 1
    diff_logs out/single out/ddp

The line is ``callbacks=[NumprobeCallback()]``. Data: synthetic token sequences of random lengths
(the rest padding, label -100), no download. The Trainer's own conventions stay as they are: under
DDP each rank's loss is multiplied by the number of processes and DDP averages; each microbatch's
loss is divided by the tokens of the whole accumulation window.

Planted faults (``--fault``), each a bug a release of transformers or a user's setup shipped:
  ga-mean          the loss of each microbatch its own token mean divided by the accumulation steps
                   (transformers before 4.46, PR #34191)
  untied-head      the language-model head not tied to the embedding (tie_word_embeddings=False: a
                   parameter of its own, with its own initialization)
  decay-norms      weight decay applied to the norm weights too (a name filter that missed them)
  scheduler-early  the learning-rate scheduler stepped once before the first update
  rank-unscaled    rank 1's loss not multiplied by the number of processes as the others'
"""
import argparse
import os
import tempfile

import torch

FAULTS = ["none", "ga-mean", "untied-head", "decay-norms", "scheduler-early", "rank-unscaled"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ga", type=int, default=2, help="gradient_accumulation_steps")
    p.add_argument("--batch", type=int, default=2, help="per_device_train_batch_size")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optim", default="adamw_torch", help="TrainingArguments.optim")
    p.add_argument("--compile", choices=["none", "aot_eager", "inductor"], default="none")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--average-tokens", choices=["default", "on", "off"], default="default",
                   help="TrainingArguments.average_tokens_across_devices (the release's default: off in "
                        "4.48, on from 4.54: transformers PR #39395)")
    p.add_argument("--probe", type=int, default=1, help="0: train without numprobe")
    p.add_argument("--losses", default="", help="write the loss of each step (repr) to this file")
    return p.parse_args(argv)


def tiny_llama(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=args.fault != "untied-head")
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(config)


def dataset(args, world):
    g = torch.Generator().manual_seed(1000 + args.seed)
    size = args.steps * args.ga * args.batch * world
    rows = []
    for _ in range(size):
        length = int(torch.randint(args.seq // 3, args.seq + 1, (), generator=g))
        ids = torch.randint(1, 96, (args.seq,), generator=g)
        mask = (torch.arange(args.seq) < length).long()
        ids = ids * mask  # padding: token 0
        labels = ids.masked_fill(mask == 0, -100)
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def average_tokens(args):
    """The setting only where one is asked for: releases older than the setting do not know it."""
    if args.average_tokens == "default":
        return {}
    return {"average_tokens_across_devices": args.average_tokens == "on"}


def trainer_class(args):
    from transformers import Trainer

    class PlantedTrainer(Trainer):
        """The Trainer with one of the faults above, or as it is."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if args.fault == "ga-mean":
                num_items_in_batch = None  # each microbatch its own mean (training_step divides by GA)
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if args.fault == "rank-unscaled" and self.args.process_index == 1:
                if return_outputs:
                    return result[0] / self.accelerator.num_processes, result[1]
                return result / self.accelerator.num_processes
            return result

        def get_decay_parameter_names(self, model):
            if args.fault == "decay-norms":
                return [n for n, _ in model.named_parameters()]
            return super().get_decay_parameter_names(model)

    return PlantedTrainer


def main(argv=None):
    args = parse_args(argv)
    from transformers import TrainerCallback, TrainingArguments
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model = tiny_llama(args)
    callbacks = []
    if args.probe:
        from numprobe.integrations.transformers import NumprobeCallback
        callbacks.append(NumprobeCallback())  # the one line

    class StepLosses(TrainerCallback):
        def __init__(self):
            self.losses = []

        def on_log(self, a, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])

        def on_train_begin(self, a, state, control, lr_scheduler=None, **kwargs):
            if args.fault == "scheduler-early" and lr_scheduler is not None:
                lr_scheduler.step()

    recorder = StepLosses()
    callbacks.append(recorder)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, use_cpu=True, report_to=[], seed=args.seed, max_steps=args.steps,
            per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.ga,
            learning_rate=args.lr, weight_decay=0.1, lr_scheduler_type="linear", optim=args.optim,
            logging_steps=1, save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
            ddp_backend="gloo" if world > 1 else None,
            torch_compile=args.compile != "none",
            torch_compile_backend=args.compile if args.compile != "none" else None,
            **average_tokens(args))
        trainer = trainer_class(args)(model=model, args=training, train_dataset=dataset(args, world),
                                      callbacks=callbacks)
        if args.fault == "ga-mean":
            trainer.loss_is_scaled_for_ga = False
        trainer.train()
    if args.losses and int(os.environ.get("RANK", "0")) == 0:
        with open(args.losses, "w") as f:
            f.write("\n".join(repr(x) for x in recorder.losses) + "\n")
    if world > 1:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
