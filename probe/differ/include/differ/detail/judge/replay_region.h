// The replay region of an op finding (docs/diff-logs.md, "Replay verdict"): each run's ops
// between the last values both runs hold bitwise and the input of the next op both execute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "differ/result.h"

namespace probe::differ {

// `start`: the pair the region grows from (an aligned root cause, or the op whose input one
// run's own ops made). The region runs up to the first op pair after it, in its microbatch and
// phase, whose inputs differ (its input `end_input` is what each run hands on); from that
// input each run's producers are followed back while their outputs differ from the other run's
// (ops of one run only, aligned ops with differing outputs). Where no such pair was traced (or
// it does not descend from `start`), the region is `start` alone. `starts_here`: `start` starts
// the region even where its inputs differ (an op asked for by name: its replay says so). Dump
// paths stay relative to the rank's directory (Run::rank_dir).
ReplayRegion replay_region(std::int64_t step, const std::vector<Pair>& pairs, std::size_t start,
                           bool starts_here = false);

}  // namespace probe::differ
