// diff_logs' library: merge each run's ranks into one logical view, align two runs by
// (step, kind, name, microbatch), classify each pair, find the first divergence and its likely
// cause, and keep streaming statistics. Torch-free: depends on numprobe::core only.
// docs/diff-logs.md describes the rules. Internals live in differ/detail/.
#pragma once

#include "differ/options.h"
#include "differ/report.h"
#include "differ/result.h"
#include "differ/run.h"

namespace probe::differ {

// Compares two runs step by step. Throws InputError for incompatible runs (format or hash
// spec versions) and, without --lenient, for bad lines.
// A kind one run recorded and the other never did (a NumericsLogger log has no rng, a run with
// other PROBE_KINDS) is no divergence: unless options.kinds_mask chooses the kinds, the runs are
// opened again and compared without those kinds (Result::kinds_left_out); options.on_restart
// is called before that second pass.
Result diff_runs(Run& base, Run& test, const DiffOptions& options);

}  // namespace probe::differ
