"""PEFT PR #3315: the LoRA-FA optimizer (create_lorafa_optimizer) projected every lora_B gradient
with one scaling, lora_alpha / r of its arguments, ignoring the per-layer rank_pattern and
alpha_pattern of the LoraConfig (README.md). A tiny Llama with LoRA on its attention, v_proj's
alpha set by alpha_pattern, the LoRA-FA optimizer handed to the stock Trainer, the peft release
first on PYTHONPATH, numprobe attached by its callback; flags: peft_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from peft_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="llama", lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], alpha_pattern={"v_proj": 32}),
         optimizer="lorafa", optimizer_args=dict(r=4, lora_alpha=8))
