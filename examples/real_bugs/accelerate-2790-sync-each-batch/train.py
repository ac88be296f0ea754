"""Accelerate PR #2790: with sync_each_batch=True the optimizer stepped on every microbatch
(README.md). A loop as Accelerate's documentation writes one, with the accelerate release first
on PYTHONPATH, numprobe attached by attach(); flags: accelerate_tiny.py."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from accelerate_tiny import main  # noqa: E402

if __name__ == "__main__":
    main()
