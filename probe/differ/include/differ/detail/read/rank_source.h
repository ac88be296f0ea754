// One rank's log as the run reads it: its reader, the record read ahead, and where the
// records of the step being merged are kept (run.cpp reads, merge.cpp groups).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "differ/detail/read/read_ahead.h"
#include "differ/run.h"
#include "probe/log_io.h"
#include "probe/record.h"

namespace probe::differ {

struct Run::RankSource {
  int rank = 0;
  std::unique_ptr<LogReader> reader;      // numprobe logs
  std::unique_ptr<ReadAhead> read_ahead;  // parses `reader` on a worker (after it: joined first)
  ReadEvent event;                        // what reading without a worker yielded last
  // Without a worker: the records of the step being grouped, moved out of `event` (a deque:
  // they stay where they are while it grows), their buffers reused by the next steps.
  std::deque<Record> step_records;
  std::size_t step_records_used = 0;
  std::vector<Record> python;  // NumericsLogger logs (loaded whole, sorted)
  std::size_t python_pos = 0;
  // The record read ahead, where it was read (an event of the worker's, `step_records`, the
  // Python records): it stays there until its step is merged; null at the end.
  Record* ahead = nullptr;
  std::int64_t ahead_line = 0;             // its line in the log
  std::vector<std::uint32_t> step_groups;  // the group of each record of the rank's last step
  std::int64_t last_step = -1;
  bool reported_early_end = false;
  bool pooled = false;  // the log is closed between steps (more ranks than files to hold open)
  void release() {
    if (pooled && reader) reader->release();
  }
  // Without a worker: `r` (the event's record) moved into step_records, where it stays.
  Record* keep_for_step(Record& r);
  // Its records of the step just merged are no longer looked at: their places are read into
  // (run.cpp).
  void release_step_records();
};

}  // namespace probe::differ
