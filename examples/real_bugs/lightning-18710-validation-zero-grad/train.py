"""Lightning PR #18710: a validation run inside an accumulation window zeroed the gradients
accumulated so far (README.md). The Trainer of the pytorch_lightning release first on PYTHONPATH,
numprobe attached by its callback; flags: lightning_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from lightning_tiny import main  # noqa: E402

if __name__ == "__main__":
    main()
