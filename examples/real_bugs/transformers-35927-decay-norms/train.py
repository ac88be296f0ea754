"""transformers PR #35927: weight decay on the RMSNorm weights of models such as Qwen2
(README.md). The stock Trainer of the release first on PYTHONPATH, a tiny qwen2, numprobe attached
by its callback; flags: hf_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from hf_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(model="qwen2")
