// The replay verdict (docs/diff-logs.md, "Replay verdict"): both runs' regions replayed, their
// references compared, each run's output measured against its own.
#pragma once

#include "differ/replay_verdict.h"
#include "region_replay.h"

namespace probe::replay {

// Where the references may differ by float64 rounding: this many times the sum of the two
// runs' bounds in float64's unit roundoff (a margin for the estimated bounds).
inline constexpr double kReferenceMargin = 4;

// The verdict on two runs' regions whose inputs agree: noise, precision: base|test|both,
// different math, or not replayable. Fills v.verdict, v.reason, v.evidence and the figures.
// Exceptions (NotReplayable, an op that fails) become `not replayable` with the reason.
void judge(const RunRegion& base, const RunRegion& test, differ::ReplayVerdict& v);
// The same on replays already made.
void judge_replays(const RunReplay& base, const RunReplay& test, differ::ReplayVerdict& v);

}  // namespace probe::replay
