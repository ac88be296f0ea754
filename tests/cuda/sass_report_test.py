#!/usr/bin/env python3
"""Tests of scripts/sass_report.py's listing parser on saved SASS (no nvcc, no GPU).

data/hash_only_float64.sass is nvdisasm's listing of scripts/sass_hash_baseline.cu's float64
kernel (nvcc 13.0, sm_90), cut down by hand to a known size: the entry block (11 instructions,
ending in the full-tile test's @P0 BRA), the full-tile region (54 instructions: 8 LDG.E.128,
2 ULDC, 5 IMAD.WIDE, ending in BRA), and the blocks after it (CS2R; the store; EXIT; the
trailing self-branch and NOP padding).
"""
import sys
import tempfile
import unittest
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import sass_report as sr  # noqa: E402

FIXTURE = (Path(__file__).parent / "data/hash_only_float64.sass").read_text()
REGION_INSTRUCTIONS = 54
FLOAT64_ELEMENTS = 16  # 8 groups x 16 bytes / 8 bytes

# Kernel names as nvcc 13.0 mangles the real kernels (stats_cuda_kernels.cuh): ElementType 3
# (bfloat16), kSingleRun true and false.
KERNEL_SINGLE_RUN = ("_ZN5probe6detail58_GLOBAL__N__00716186_19_stats_cuda_float_cu_b7e9bd28_1675417tile_stats_"
                     "kernelILNS_7kernels11ElementTypeE3ELb1EEEvPKNS3_9cuda_tile6BitsOfIXT_EE4typeENS5_9RunLayoutENS5_"
                     "12MemoryLayoutEPNS3_12StatsPartialEPl")
KERNEL_RUNS = KERNEL_SINGLE_RUN.replace("ELb1E", "ELb0E")


def region(text=FIXTURE):
    return sr.regions_of(text, "hash-only", sr.read_tile_shape(ROOT), sr.BASELINE_NAME, False)


class ListingParser(unittest.TestCase):
    def test_blocks_split_at_labels_and_branches_and_drop_padding(self):
        (f,) = sr.parse_listing(FIXTURE)
        self.assertIn("hash_only_tile", f.name)
        # .L_x_12 (before EXIT) is a target of nothing in the cut-down listing: no block starts there.
        self.assertEqual([len(b.instructions) for b in f.blocks], [11, REGION_INSTRUCTIONS, 1, 10, 1])
        self.assertEqual([b.label for b in f.blocks], [None, None, ".L_x_0", ".L_x_1", ".L_x_2"])

    def test_main_region_is_the_block_of_the_eight_vector_loads(self):
        (f,) = sr.parse_listing(FIXTURE)
        block = sr.main_region(f, 8)
        self.assertEqual(len(block.instructions), REGION_INSTRUCTIONS)
        self.assertEqual(block.instructions[0].addr, 0x00B0)  # right after the entry's @P0 BRA
        self.assertEqual(block.instructions[-1].op, "BRA")  # the jump to the store
        self.assertEqual(sum(i.is_vector_global_load() for i in block.instructions), 8)

    def test_instructions_per_element_and_classes(self):
        (r,) = region()
        self.assertEqual((r.dtype, r.element_bytes, r.elements), ("float64", 8, FLOAT64_ELEMENTS))
        self.assertEqual(r.instructions, REGION_INSTRUCTIONS)
        self.assertAlmostEqual(r.per_element, REGION_INSTRUCTIONS / FLOAT64_ELEMENTS)
        self.assertEqual(r.classes["load"], 10)
        self.assertEqual(r.classes["imad_wide"], 5)
        self.assertEqual(sum(r.classes.values()), REGION_INSTRUCTIONS)

    def test_a_missing_vector_load_is_an_error_not_a_smaller_count(self):
        broken = FIXTURE.replace("LDG.E.128.CONSTANT R12, desc[UR4][R6.64+0x5000]", "LDG.E.64 R12, desc[UR4][R6.64]")
        with self.assertRaisesRegex(sr.ReportError, "holds 7 128-bit loads, expected 8"):
            region(broken)

    def with_label_before_the_seventh_load(self, referenced):
        lines = FIXTURE.splitlines()
        at = next(n for n, line in enumerate(lines) if "+0x6000]" in line)
        lines.insert(at, ".L_x_99:")
        if referenced:  # a branch to it in the entry block, before its @P0 BRA
            entry_branch = next(n for n, line in enumerate(lines) if "@P0 BRA" in line)
            lines.insert(entry_branch, "        /*0095*/               @P1 BRA `(.L_x_99) ;")
        return "\n".join(lines)

    def test_loads_split_over_two_blocks_is_an_error(self):
        with self.assertRaisesRegex(sr.ReportError, "2 basic blocks hold 128-bit global loads"):
            region(self.with_label_before_the_seventh_load(referenced=True))

    def test_a_label_nothing_branches_to_does_not_split_the_region(self):
        # nvdisasm puts such labels around register spills (STL/LDL "SpillRefill").
        (r,) = region(self.with_label_before_the_seventh_load(referenced=False))
        self.assertEqual(r.instructions, REGION_INSTRUCTIONS)

    def test_no_vector_loads_is_an_error(self):
        with self.assertRaisesRegex(sr.ReportError, "0 basic blocks"):
            region(FIXTURE.replace("LDG.E.128.CONSTANT", "LDG.E.64.CONSTANT"))

    def test_a_region_that_is_the_whole_function_is_an_error(self):
        lines = FIXTURE.splitlines()
        start = next(n for n, line in enumerate(lines) if line.startswith(".text."))
        body = [line for line in lines[start + 1:] if "/*" in line and "BRA" not in line
                and "EXIT" not in line and not line.startswith(".L_")]
        with self.assertRaisesRegex(sr.ReportError, "whole function"):
            region("\n".join(lines[:start + 1] + body))

    def test_classes(self):
        def cls(text):
            (f,) = sr.parse_listing(f".text.k:\n        /*0000*/ {text} ;\n")
            return sr.classify(f.blocks[0].instructions[0])
        self.assertEqual(cls("IMAD.WIDE.U32 R4, R0, 0x1000, RZ"), "imad_wide")
        self.assertEqual(cls("IMAD.HI.U32 R4, R0, 0x1000, RZ"), "imad_wide")
        self.assertEqual(cls("IMAD.MOV.U32 R4, RZ, RZ, 0x1000"), "imad")
        self.assertEqual(cls("@!P1 IMAD R3, R16, 0x1e98df25, RZ"), "imad")
        self.assertEqual(cls("LOP3.LUT R21, R20, 0xff00, RZ, 0xc0, !PT"), "alu")
        self.assertEqual(cls("DADD R4, R4, R6"), "fp64")
        self.assertEqual(cls("DSETP.GEU.AND P0, PT, R4, R6, PT"), "fp64")
        self.assertEqual(cls("F2F.F64.F32 R4, R2"), "conv")
        self.assertEqual(cls("I2F.F64.S64 R4, R2"), "conv")
        self.assertEqual(cls("LDS.64 R4, [R2]"), "load")
        self.assertEqual(cls("SHFL.DOWN PT, R4, R2, 0x10, 0x1f"), "other")


class ProjectSources(unittest.TestCase):
    def test_tile_shape_is_read_from_the_sources(self):
        shape = sr.read_tile_shape(ROOT)
        self.assertEqual((shape.groups_per_thread, shape.group_bytes), (8, 16))
        self.assertEqual(shape.element_types[:4], ["float32", "float64", "float16", "bfloat16"])
        self.assertEqual(shape.element_bytes["float32"], 4)
        self.assertEqual(shape.element_bytes["bfloat16"], 2)
        self.assertEqual(shape.element_bytes["float8_e4m3fn"], 1)
        self.assertEqual(shape.element_bytes["boolean"], 1)
        self.assertEqual(shape.element_bytes["uint64"], 8)

    def test_kernel_names_give_dtype_and_run_layout(self):
        m = sr.KERNEL_NAME.search(KERNEL_SINGLE_RUN)
        self.assertEqual((m["type"], m["single"]), ("3", "1"))
        self.assertEqual(sr.KERNEL_NAME.search(KERNEL_RUNS)["single"], "0")
        self.assertIsNone(sr.KERNEL_NAME.search("_ZN5probe6detail12_GLOBAL__N_121merge_partials_kernelEPKNS_7kernels12StatsPartialElPl"))


class Check(unittest.TestCase):
    def setUp(self):
        (self.base,) = region()
        self.kernel = sr.Region("float", "float64", 8, 160, 16, Counter(alu=160))  # 10 per element
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def thresholds(self, text):
        p = Path(self.dir.name) / "t.txt"
        p.write_text(text)
        return p

    def test_within_threshold_passes(self):
        self.assertEqual(sr.check([self.kernel], {8: self.base}, self.thresholds("float64 10.5  # note\n")), [])

    def test_over_threshold_fails(self):
        (p,) = sr.check([self.kernel], {8: self.base}, self.thresholds("float64 9.9\n"))
        self.assertIn("over the threshold 9.9", p)

    def test_missing_dtype_fails(self):
        (p,) = sr.check([self.kernel], {8: self.base}, self.thresholds("float64 11\nbfloat16 30\n"))
        self.assertIn("bfloat16: no tile_stats_kernel", p)

    def test_cheaper_than_the_hash_alone_fails(self):
        cheap = sr.Region("float", "float64", 8, 16, 16, Counter(alu=16))
        (p,) = sr.check([cheap], {8: self.base}, self.thresholds("float64 11\n"))
        self.assertIn("not the element loop", p)

    def test_table_merges_dtypes_with_the_same_region(self):
        twin = sr.Region("float", "int64", 8, 160, 16, Counter(alu=160))
        out = sr.table([self.kernel, twin], {8: self.base}, sr.read_tile_shape(ROOT), 1980e6)
        self.assertIn("| float     | float64,int64 |", out)
        # 132 * 4 * 32 * 1.98e9 / 10 = 3345 Gelem/s = 26.76 TB/s of 8-byte elements
        self.assertIn("| 10.00 |", out)
        self.assertIn("3345 | 26.76 |", out)


if __name__ == "__main__":
    unittest.main()
