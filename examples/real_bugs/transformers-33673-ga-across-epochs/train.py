"""transformers PR #33673: with gradient accumulation over several epochs, the accumulation window
was counted across epochs, so a window straddled two of them (README.md). The stock Trainer of the
release first on PYTHONPATH, a tiny llama, numprobe attached by its callback; flags: hf_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from hf_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="llama")
