// Op records of a split scope (docs/diff-logs.md, "Split ops"): each rank's record of an op that
// ran on a piece of the computation (some heads, a sequence shard) merged into the wholes the
// pieces may tile, and, once paired with the other run's record, the view its shape asks for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "differ/detail/merge/merge.h"
#include "differ/result.h"

namespace probe::differ {

// Whether the group's records are op records of a split scope.
bool is_split_op_group(const Group& g);

// The group's records, one per rank of the split, into `m` (its SplitOp filled in; `record` holds
// the replicated output, or the whole cut along dim 0 until a view is chosen). The ranks differ by
// design: no replica issue; fewer records than ranks (or of other shapes) are a split_incomplete
// warning, and the record one rank's. Consumes the parts.
void merge_split_op(Group& g, MergeContext& ctx, Merged& m);

// Whether input `i` of two op records is the same tensor: a hash in common, whole or composed.
bool same_input(const Merged& a, const Merged& b, std::size_t i);
bool inputs_agree(const Merged& a, const Merged& b);
// The first input (argument order) that is not the same tensor; the shorter list's size where
// every input they both have is.
std::size_t first_differing_input(const Merged& a, const Merged& b);
// Whether the outputs may be the same tensor (a hash of one view in common) and whether they
// may be compared at all (a shape in common, or a partial sum of the other's shape).
bool outputs_agree(const Merged& a, const Merged& b);
bool shapes_compatible(const Merged& a, const Merged& b);

// Every hash an op record's output may have as a whole tensor (its own, and a split record's
// views), for finding which op made an input.
void output_hashes(const Merged& m, std::vector<std::uint64_t>& out);
// The same for its input `i`.
const std::vector<std::uint64_t>& input_hashes(const Merged& m, std::size_t i,
                                               std::vector<std::uint64_t>& scratch);

// For a pair of op records of which one or both are split: the view of each that the other asks
// for (record.stats set to it): the ranks' common output, the whole they tile along a dim of the
// other's shape, or, where the ranks' outputs have the other's shape and differ, a partial sum
// (Merged::partial set: set aside as other partial sums are). False where the pieces hold the
// other's elements in another arrangement (a dim flattening a split dim with a whole one): the
// records are no pair.
bool choose_views(Merged& base, Merged& test);

}  // namespace probe::differ
