"""Independent check of hash spec v1: recompute, with Python's xxhash package, the hash of every
tensor a probe log recorded, from the raw bytes the test dumped beside it.

usage: recompute_hashes.py DIFF_LOG DUMP_DIR
DUMP_DIR holds <name>.bin (the tensor's elements in logical row-major order) and <name>.meta
("element_size global_shape offset local_shape", shapes as comma lists).
Exits 0 when every record's hash matches, 1 otherwise, printing each comparison.
"""
import itertools
import os
import sys

import xxhash


def spec_hash(raw, size, global_shape, offset, local_shape):
    strides = [1] * len(global_shape)
    for d in range(len(global_shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * global_shape[d + 1]
    total = 0
    for i, idx in enumerate(itertools.product(*[range(n) for n in local_shape])):
        g = sum((o + j) * s for o, j, s in zip(offset, idx, strides))
        total += xxhash.xxh3_64_intdigest(raw[i * size:(i + 1) * size], seed=g)
    return total % 2**64


def dims(text):
    return [int(x) for x in text.split(",") if x]


def main(log_path, dump_dir):
    checked = failed = 0
    with open(log_path) as log:
        for line in log:
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if fields.get("kind") != "tap":
                continue
            name = fields["name"]
            with open(os.path.join(dump_dir, name + ".meta")) as m:
                size, global_shape, offset, local_shape = m.read().split()
            with open(os.path.join(dump_dir, name + ".bin"), "rb") as b:
                raw = b.read()
            expected = spec_hash(raw, int(size), dims(global_shape), dims(offset), dims(local_shape))
            ok = f"{expected:016x}" == fields["hash"]
            print(f"{'ok ' if ok else 'BAD'} {name}: log {fields['hash']} python {expected:016x}")
            checked += 1
            failed += not ok
    if checked == 0:
        print("no tap records found")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
