// Op records aligned by what they compute (docs/diff-logs.md, "Aligning op traces"). An op
// record's name numbers its op within its scope (layers.0.attention/aten::narrow#2); where the
// two layouts run other ops there (a re-layout, a collective, the pieces of a split matmul) the
// same number names other ops. Within each microbatch, phase and scope (a backward op's: its
// forward op) the records of both runs are aligned in order, an op with an op of the same type
// whose inputs are the same tensors first, then with one of the same type and a shape in common
// (the ops after a difference, whose inputs already differ); each aligned test record takes the
// base record's key, the others keep keys no base record has.
#pragma once

#include <vector>

#include "differ/result.h"

namespace probe::differ {

// Aligns one step's op records of both runs (records in execution order), choosing the views of
// split op records (split_op.h) against their partners.
void match_ops(std::vector<Merged>& base, std::vector<Merged>& test);

}  // namespace probe::differ
