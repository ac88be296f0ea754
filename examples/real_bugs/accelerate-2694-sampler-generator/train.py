"""Accelerate PR #2694: a shuffling DataLoader's sampler drew its order from each process's own
random numbers, so the ranks' shards overlapped (README.md). A loop as Accelerate's documentation
writes one, with the accelerate release first on PYTHONPATH, numprobe attached by attach();
flags: accelerate_shuffle_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from accelerate_shuffle_tiny import main  # noqa: E402

if __name__ == "__main__":
    main()
