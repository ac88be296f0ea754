"""PEFT PR #3171: LoraConfig(ensure_weight_tying=True) tied the output head to the trained copy
of the token embedding even where the model's config says its weights are not tied
(tie_word_embeddings=False) (README.md). A tiny untied Llama with LoRA on its attention and the
embedding trained in full (modules_to_save), the stock Trainer, the peft release first on
PYTHONPATH, numprobe attached by its callback; flags: peft_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from peft_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="llama", tie_word_embeddings=False,
         lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["embed_tokens", "lm_head"],
                   ensure_weight_tying=True))
