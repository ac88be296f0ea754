"""Lightning PR #17713: under DDP without a global seed, the sampler Lightning put around a
shuffling DataLoader's RandomSampler kept each process's own permutation, so the ranks' shards
overlapped (README.md). The Trainer of the pytorch_lightning release first on PYTHONPATH, numprobe
attached by its callback; flags: lightning_shuffle_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from lightning_shuffle_tiny import main  # noqa: E402

if __name__ == "__main__":
    main()
