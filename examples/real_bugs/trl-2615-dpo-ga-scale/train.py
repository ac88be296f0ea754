"""TRL PR #2615: once transformers 4.48.1 divided a loss by the accumulation steps only for a model
that does not accept the loss keyword arguments, DPOTrainer's own loss went undivided (README.md).
The DPOTrainer of the trl release first on PYTHONPATH, a tiny llama policy and reference, numprobe
attached by its callback; flags: trl_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from trl_tiny import main  # noqa: E402

if __name__ == "__main__":
    main(trainer="dpo")
