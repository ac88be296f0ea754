#!/usr/bin/env python3
"""Static instruction-issue bound of the CUDA statistics kernels, from their sm_90 SASS.

Reads `nvdisasm` listings (scripts/sass_report.sh makes them), finds each kernel's main
per-element region and prints, per dtype, the SASS instructions per element of it, their
breakdown by instruction class, and the element and byte rate that instruction issue alone
allows on an H200. No GPU is involved: this is a bound from the code, not a measurement.

The main region. The kernel's full-tile path (stats_cuda_kernels.cuh) is a loop over a
thread's kGroupsPerThread 16-byte groups and the elements of each group that nvcc unrolls
completely (#pragma unroll), so in SASS it is one basic block: the block that holds the
thread's kGroupsPerThread 128-bit global loads (LDG.E.128), with no branch until the fold of
the last element is done. That block is "one iteration" of the unrolled loop; it covers
kGroupsPerThread * (kGroupBytes / element size) elements, and instructions per element are
instructions in the block / elements it covers. Everything else (the partial-tile and strided
path, the block's reduction tree) is left out: it runs once per thread per tile, not per
element. A listing whose region does not hold exactly kGroupsPerThread 128-bit loads is an
error, not a zero.

Only the kSingleRun=true instantiations (a whole tensor, or a shard along dim 0: global index
= base + local index) are reported; the other instantiation's elements branch on run ends.

Usage: sass_report.py --source-root DIR --kernels FAMILY=LISTING... --baseline LISTING
                      [--clock-mhz 1980] [--check THRESHOLDS]
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections import Counter
from pathlib import Path

# H200 (SXM): 132 SMs, 4 warp schedulers per SM, each issuing one warp instruction (32 lanes)
# per cycle. The clock is an argument (default: the 1980 MHz maximum SM clock).
H200_SMS = 132
SCHEDULERS_PER_SM = 4
WARP_LANES = 32
H200_HBM_BYTES_PER_S = 4.8e12  # NVIDIA H200 datasheet: 4.8 TB/s HBM3e

# Instruction classes, in the table's column order. IMAD.WIDE / IMAD.HI are the pieces of
# 64-bit products (hash spec v1's multiplies by 64-bit primes); IMAD covers the other uses of
# the integer multiply-add unit (32-bit products, and the moves, shifts and adds nvcc places
# there to balance pipes).
CLASSES = ["imad_wide", "imad", "alu", "fp64", "fp32", "conv", "load", "other"]
CLASS_TITLES = {
    "imad_wide": "IMAD.WIDE/HI", "imad": "IMAD", "alu": "ALU", "fp64": "FP64",
    "fp32": "FP32", "conv": "CONV", "load": "LOAD", "other": "OTHER",
}
ALU_OPS = {
    "IADD3", "IADD", "IABS", "LOP3", "LOP", "PLOP3", "SHF", "SHL", "SHR", "LEA", "ISETP", "ISCADD",
    "SEL", "MOV", "PRMT", "IMNMX", "VIMNMX", "POPC", "FLO", "BREV", "BMSK", "SGXT", "P2R", "R2P",
    "VABSDIFF", "VABSDIFF4", "IDP", "IDP4A", "CS2R", "LEPC", "IMUL",
}
FP64_OPS = {"DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"}
FP32_OPS = {"FADD", "FMUL", "FFMA", "FSETP", "FMNMX", "FSEL", "FSET", "FCHK", "HADD2", "HMUL2",
            "HFMA2", "HSETP2", "HMNMX2", "FSWZADD"}
CONV_OPS = {"F2F", "I2F", "F2I", "I2I", "F2FP", "I2FP", "F2IP", "FRND", "MUFU"}
LOAD_OPS = {"LDG", "LDS", "LDC", "LD", "LDL", "ULDC", "LDSM", "LDGSTS", "LDGDEPBAR"}
# Instructions that end a basic block (the next instruction starts another one).
BRANCH_OPS = {"BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "CALL", "KILL", "BPT"}

INSTRUCTION = re.compile(
    r"^\s*/\*(?P<addr>[0-9a-f]+)\*/\s+(?P<pred>@!?U?P[T0-9]+\s+)?(?P<op>[A-Z][A-Z0-9_]*)(?P<mods>(\.[A-Z0-9_]+)*)(?P<rest>[^;]*);")
FUNCTION = re.compile(r"^\.text\.(?P<name>\S+):\s*$")
LABEL = re.compile(r"^(?P<label>\.L_\w+):\s*$")
TARGET = re.compile(r"`\((\.L_\w+)\)")  # an instruction's label operand: `(.L_x_12)


@dataclasses.dataclass
class Instruction:
    addr: int
    op: str  # the opcode without modifiers, e.g. IMAD
    mods: tuple[str, ...]  # e.g. ("WIDE", "U32")
    predicated: bool
    text: str

    def is_vector_global_load(self) -> bool:
        return self.op == "LDG" and "128" in self.mods


@dataclasses.dataclass
class Block:
    label: str | None
    instructions: list[Instruction] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Function:
    name: str  # mangled
    blocks: list[Block] = dataclasses.field(default_factory=list)

    def instruction_count(self) -> int:
        return sum(len(b.instructions) for b in self.blocks)


class ReportError(Exception):
    """The listing cannot be read as the report expects (wrong region, no kernels, ...)."""


def parse_listing(text: str) -> list[Function]:
    """nvdisasm output -> functions made of basic blocks. A block starts at a label that an
    instruction refers to (a branch target, or the reconvergence point a BSSY names) or after a
    branch-type instruction. Labels nothing refers to (nvdisasm also marks spill regions with
    them) do not split a block. NOPs (alignment padding) are dropped."""
    targets = set(TARGET.findall(text))
    functions: list[Function] = []
    current: Function | None = None
    block: Block | None = None
    for line in text.splitlines():
        if m := FUNCTION.match(line):
            current = Function(m["name"])
            functions.append(current)
            block = None
            continue
        if current is None:
            continue
        if m := LABEL.match(line):
            if m["label"] in targets:
                block = Block(m["label"])
                current.blocks.append(block)
            continue
        m = INSTRUCTION.match(line)
        if not m or m["op"] == "NOP":
            continue
        if block is None:
            block = Block(None)
            current.blocks.append(block)
        mods = tuple(x for x in m["mods"].split(".") if x)
        block.instructions.append(Instruction(int(m["addr"], 16), m["op"], mods, bool(m["pred"]),
                                              line.strip()))
        if m["op"] in BRANCH_OPS:
            block = None
    for f in functions:
        f.blocks = [b for b in f.blocks if b.instructions]
    return functions


def classify(ins: Instruction) -> str:
    if ins.op == "IMAD":
        return "imad_wide" if ("WIDE" in ins.mods or "HI" in ins.mods) else "imad"
    for cls, ops in (("alu", ALU_OPS), ("fp64", FP64_OPS), ("fp32", FP32_OPS), ("conv", CONV_OPS),
                     ("load", LOAD_OPS)):
        if ins.op in ops:
            return cls
    return "other"


def main_region(function: Function, groups_per_thread: int) -> Block:
    """The basic block holding the thread's 128-bit group loads: the unrolled full-tile loop."""
    holders = [b for b in function.blocks if any(i.is_vector_global_load() for i in b.instructions)]
    if len(holders) != 1:
        raise ReportError(f"{function.name}: {len(holders)} basic blocks hold 128-bit global loads "
                          f"(expected 1: the unrolled full-tile loop)")
    block = holders[0]
    loads = sum(i.is_vector_global_load() for i in block.instructions)
    if loads != groups_per_thread:
        raise ReportError(f"{function.name}: the main region holds {loads} 128-bit loads, expected "
                          f"{groups_per_thread} (kGroupsPerThread)")
    if len(block.instructions) >= function.instruction_count():
        raise ReportError(f"{function.name}: the main region is the whole function")
    return block


# --- what the project's sources say (one definition: read, not copied) ---------------------

@dataclasses.dataclass
class TileShape:
    groups_per_thread: int
    group_bytes: int
    element_types: list[str]  # ElementType enumerators in declaration order
    element_bytes: dict[str, int]


def read_tile_shape(source_root: Path) -> TileShape:
    tile_h = (source_root / "probe/src/cuda/stats_tile.h").read_text()
    element_h = (source_root / "probe/src/core/stats_element.h").read_text()

    def constant(name: str) -> int:
        m = re.search(rf"inline\s+constexpr\s+int\s+{name}\s*=\s*(\d+);", tile_h)
        if not m:
            raise ReportError(f"stats_tile.h: no {name}")
        return int(m[1])

    m = re.search(r"enum class ElementType[^{]*\{([^}]*)\}", element_h)
    if not m:
        raise ReportError("stats_element.h: no enum class ElementType")
    types = [t.strip() for t in m[1].replace("\n", " ").split(",") if t.strip()]
    # Whitespace-tolerant: the formatter decides where the braces' lines break.
    default = re.search(r"struct\s+BitsOf\s*\{\s*using\s+type\s*=\s*std::uint(\d+)_t;\s*\};", tile_h)
    if not default:
        raise ReportError("stats_tile.h: no default BitsOf")
    sizes = {t: int(default[1]) // 8 for t in types}
    for name, bits in re.findall(r"struct\s+BitsOf<ElementType::(\w+)>\s*\{\s*using\s+type\s*=\s*"
                                 r"std::uint(\d+)_t;\s*\};", tile_h):
        sizes[name] = int(bits) // 8
    return TileShape(constant("kGroupsPerThread"), constant("kGroupBytes"), types, sizes)


# Mangled template arguments: ElementType as a number (…ElementTypeE3…), kSingleRun as Lb1.
KERNEL_NAME = re.compile(r"tile_stats_kernel.*?ElementTypeE(?P<type>\d+)ELb(?P<single>[01])E")
BASELINE_NAME = re.compile(r"hash_only_tile.*?ElementTypeE(?P<type>\d+)E")


@dataclasses.dataclass
class Region:
    family: str
    dtype: str
    element_bytes: int
    instructions: int  # per iteration of the unrolled loop
    elements: int  # per iteration
    classes: Counter

    local: int = 0  # LDL/STL: register spills

    @property
    def per_element(self) -> float:
        return self.instructions / self.elements


def regions_of(listing: str, family: str, shape: TileShape, pattern: re.Pattern,
               need_single_run: bool) -> list[Region]:
    out = []
    for f in parse_listing(listing):
        m = pattern.search(f.name)
        if not m or (need_single_run and m["single"] != "1"):
            continue
        index = int(m["type"])
        if index >= len(shape.element_types):
            raise ReportError(f"{f.name}: ElementType {index} is not in stats_element.h")
        dtype = shape.element_types[index]
        size = shape.element_bytes[dtype]
        block = main_region(f, shape.groups_per_thread)
        elements = shape.groups_per_thread * (shape.group_bytes // size)
        out.append(Region(family, dtype, size, len(block.instructions), elements,
                          Counter(classify(i) for i in block.instructions),
                          sum(i.op in ("LDL", "STL") for i in block.instructions)))
    return out


# --- the table ------------------------------------------------------------------------------

def issue_bound_elements_per_s(per_element: float, clock_hz: float) -> float:
    return H200_SMS * SCHEDULERS_PER_SM * WARP_LANES * clock_hz / per_element


def table(kernels: list[Region], baseline: dict[int, Region], shape: TileShape,
          clock_hz: float) -> str:
    """Rows in the enumeration's order, dtypes whose regions are identical merged into one."""
    order = {t: i for i, t in enumerate(shape.element_types)}
    rows: dict[tuple, list[Region]] = {}
    for r in sorted(kernels, key=lambda r: order[r.dtype]):
        key = (r.family, r.element_bytes, r.instructions, r.elements,
               tuple(r.classes[c] for c in CLASSES))
        rows.setdefault(key, []).append(r)
    head = ["family", "dtypes", "B", "instr/iter", "elem/iter", "instr/elem", "hash-only",
            "x hash"] + [CLASS_TITLES[c] for c in CLASSES] + ["Gelem/s", "TB/s", "% HBM"]
    lines = [head]
    for (family, size, instructions, elements, _), regions in rows.items():
        r = regions[0]
        base = baseline.get(size)
        if base is None:
            raise ReportError(f"no hash-only baseline for {size}-byte elements")
        rate = issue_bound_elements_per_s(r.per_element, clock_hz)
        lines.append([family, ",".join(x.dtype for x in regions), str(size), str(instructions),
                      str(elements), f"{r.per_element:.2f}", f"{base.per_element:.2f}",
                      f"{r.per_element / base.per_element:.2f}"]
                     + [f"{r.classes[c] / elements:.2f}" for c in CLASSES]
                     + [f"{rate / 1e9:.0f}", f"{rate * size / 1e12:.2f}",
                        f"{100 * rate * size / H200_HBM_BYTES_PER_S:.0f}"])
    for size in sorted(baseline):
        b = baseline[size]
        rate = issue_bound_elements_per_s(b.per_element, clock_hz)
        lines.append(["hash-only", b.dtype, str(size), str(b.instructions), str(b.elements),
                      f"{b.per_element:.2f}", f"{b.per_element:.2f}", "1.00"]
                     + [f"{b.classes[c] / b.elements:.2f}" for c in CLASSES]
                     + [f"{rate / 1e9:.0f}", f"{rate * size / 1e12:.2f}",
                        f"{100 * rate * size / H200_HBM_BYTES_PER_S:.0f}"])
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    rendered = []
    for n, row in enumerate(lines):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        rendered.append("| " + " | ".join(cells) + " |")
        if n == 0:
            rendered.append("|" + "|".join("-" * (w + 1) + (":" if i >= 2 else "-")
                                           for i, w in enumerate(widths)) + "|")
    spills = [f"{r.dtype} {r.local}" for r in sorted(kernels, key=lambda r: order[r.dtype]) if r.local]
    if spills:
        rendered.append("register spills in the main region (local loads+stores per iteration): "
                        + ", ".join(spills))
    return "\n".join(rendered)


def check(kernels: list[Region], baseline: dict[int, Region], thresholds_path: Path) -> list[str]:
    """Problems: a dtype over its checked-in threshold, missing, or cheaper than the hash alone
    (which would mean the region is not the element loop)."""
    problems = []
    by_dtype = {r.dtype: r for r in kernels}
    for line in thresholds_path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        dtype, limit = line.split()
        r = by_dtype.get(dtype)
        if r is None:
            problems.append(f"{dtype}: no tile_stats_kernel<{dtype}, true> found in the listings")
        elif r.per_element > float(limit):
            problems.append(f"{dtype}: {r.per_element:.2f} SASS instructions per element, over the "
                            f"threshold {limit} ({thresholds_path.name})")
    for r in kernels:
        base = baseline.get(r.element_bytes)
        if base and r.per_element < base.per_element:
            problems.append(f"{r.dtype}: {r.per_element:.2f} instructions per element, fewer than the "
                            f"hash alone ({base.per_element:.2f}): the region found is not the element loop")
    return problems


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source-root", type=Path, required=True)
    ap.add_argument("--kernels", nargs="+", required=True, metavar="FAMILY=LISTING",
                    help="nvdisasm listing of stats_cuda_<FAMILY>.cu's object")
    ap.add_argument("--baseline", type=Path, required=True, help="nvdisasm listing of the hash-only kernels")
    ap.add_argument("--clock-mhz", type=float, default=1980.0)
    ap.add_argument("--check", type=Path, help="thresholds file: fail when a dtype exceeds its figure")
    args = ap.parse_args(argv)
    try:
        shape = read_tile_shape(args.source_root)
        kernels = []
        for spec in args.kernels:
            family, _, path = spec.partition("=")
            kernels += regions_of(Path(path).read_text(), family, shape, KERNEL_NAME, True)
        if not kernels:
            raise ReportError("no tile_stats_kernel<T, true> in the listings")
        baseline = {r.element_bytes: r for r in
                    regions_of(args.baseline.read_text(), "hash-only", shape, BASELINE_NAME, False)}
        print(table(kernels, baseline, shape, args.clock_mhz * 1e6))
        if args.check:
            problems = check(kernels, baseline, args.check)
            for p in problems:
                print(f"sass_report: {p}", file=sys.stderr)
            if problems:
                return 1
    except ReportError as e:
        print(f"sass_report: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
