"""PEFT PR #2825: LoRA on a scaled token embedding (Gemma3's embed_scale) left the adapter's
output unscaled (README.md). A tiny Gemma3 with LoRA on its embedding and attention, the stock
Trainer, the peft release first on PYTHONPATH, numprobe attached by its callback; flags:
peft_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from peft_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="gemma3", lora=dict(r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj", "v_proj"]))
