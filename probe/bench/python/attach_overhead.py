#!/usr/bin/env python3
"""What numprobe.attach costs a training step: identical models trained side by side in one
process, in interleaved rounds (a busy moment of the machine falls on each alike), one with nothing
attached and one with numprobe.attach recording every kind, on two models:

  transformer  examples/python/transformer.py's model at a size where a step takes well over
               100 ms (--dim 256 --layers 4 --heads 8 --vocab 1024 --seq 64 --batch 2);
  llama        a LlamaForCausalLM from transformers built from a config (hidden 256, 4 layers,
               vocab 1024, sequences of 64, batch 2), called with input_ids, attention_mask and
               labels as the Trainer calls it.

Each step: 2 microbatches (forward, backward), optimizer.step(), zero_grad().

    python probe/bench/python/attach_overhead.py [--rounds 6] [--steps 4] [--models transformer llama]

Prints per model each variant's median and fastest step time and the ratio of attach to off."""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/python"))

import numprobe  # noqa: E402

BATCH, SEQ, VOCAB, MICROBATCHES = 2, 64, 1024, 2


def example_transformer():
    import transformer
    args = transformer.parse_args(["--dim", "256", "--layers", "4", "--heads", "8", "--vocab", str(VOCAB),
                                   "--seq", str(SEQ), "--batch", str(BATCH), "--taps", "none"])
    model = transformer.build_model(args, transformer.init_layout(args))

    def loss_of(model, ids):
        logits = model(ids)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    return model, loss_of


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=SEQ)
    model = LlamaForCausalLM(config)

    def loss_of(model, ids):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
    return model, loss_of


MODELS = {"transformer": example_transformer, "llama": llama}


def variant(build, attached, run_dir):
    torch.manual_seed(0)
    model, loss_of = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    attachment = numprobe.attach(model, optimizer, run_dir=run_dir, kinds="all") if attached else None
    return {"model": model, "loss_of": loss_of, "optimizer": optimizer, "attachment": attachment, "times": []}


def step(v, data, record):
    start = time.perf_counter()
    for ids in data:
        v["loss_of"](v["model"], ids).backward()
    v["optimizer"].step()
    v["optimizer"].zero_grad()
    if record:
        v["times"].append(time.perf_counter() - start)


def measure(name, rounds, steps, run_dir):
    build = MODELS[name]
    variants = {"off": variant(build, False, None), "attach": variant(build, True, os.path.join(run_dir, name))}
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(MICROBATCHES)]
    for v in variants.values():  # warm-up: allocator, first-call costs
        step(v, data, record=False)
    for _ in range(rounds):
        for v in variants.values():
            for _ in range(steps):
                step(v, data, record=True)
    off = variants["off"]["times"]
    on = variants["attach"]["times"]
    variants["attach"]["attachment"].close()
    print(f"{name}: off median {statistics.median(off) * 1e3:.1f} ms (min {min(off) * 1e3:.1f}), "
          f"attach median {statistics.median(on) * 1e3:.1f} ms (min {min(on) * 1e3:.1f}); "
          f"attach/off median {statistics.median(on) / statistics.median(off):.3f}, "
          f"min {min(on) / min(off):.3f}  ({len(off)} steps each)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["transformer", "llama"])
    a = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as run_dir:
        for name in a.models:
            measure(name, a.rounds, a.steps, run_dir)


if __name__ == "__main__":
    main()
