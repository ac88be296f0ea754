"""PEFT PR #3503: the LoRA+ optimizer (create_loraplus_optimizer) never put an embedding's LoRA
parameters in its embedding group, so they trained at the other groups' learning rates
(README.md). A tiny Llama with LoRA on its embedding and attention, the LoRA+ optimizer over SGD
handed to the stock Trainer, the peft release first on PYTHONPATH, numprobe attached by its
callback; flags: peft_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from peft_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="llama", lora=dict(r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj", "v_proj"]),
         optimizer="loraplus", optimizer_args=dict(loraplus_lr_ratio=4.0, loraplus_lr_embedding=1e-3))
