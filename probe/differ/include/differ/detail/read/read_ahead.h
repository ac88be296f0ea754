// A rank's log parsed ahead on a worker thread: the step merge takes the records in file order
// from a bounded queue while the worker parses the next ones, so the ranks of a run are parsed
// in parallel with each other and with the merge. What reading yields (records, bad lines,
// the end) reaches the merge as events, in the order the file holds them, each with its line
// number: the merge handles them exactly as if it had read the file itself.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probe/log_io.h"
#include "probe/record.h"

namespace probe::differ {

// One thing reading a log yielded.
struct ReadEvent {
  enum class Type : std::uint8_t {
    record,       // `record`, read at `line`
    parse_error,  // a bad line: log_format::ParseError's message ("path:LINE: ...")
    read_error,   // the file could not be read on (std::runtime_error's message)
    end,          // the end of the log: the reader may be asked about truncation now
  };
  Type type = Type::end;
  Record record;
  std::int64_t line = 0;
  std::string message;
};

// Reads `reader`'s next event into `event` (the worker's step; also the whole of reading when
// no worker runs). The record is parsed into event.record's buffers.
void read_event(LogReader& reader, ReadEvent& event);

class ReadAhead {
 public:
  // Starts the worker on `reader`, which must outlive this object. Until next() has returned
  // the end event, only the worker uses the reader; afterwards only the caller does.
  explicit ReadAhead(LogReader& reader);
  ~ReadAhead();  // stops the worker (it may be blocked on a full queue) and joins it
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The next event; blocks while the worker has none ready. After the end event, returns it
  // again on every call. Events stay where they are (the step merge points at their records)
  // until release_consumed(); the caller may swap buffers into their records.
  ReadEvent& next();
  // Hands the batches whose events next() has gone past back to the worker, to read into.
  void release_consumed();

 private:
  // Events travel in batches: one lock per batch, not per record. A batch's events are kept
  // when it is reused, so their records' buffers are too.
  struct Batch {
    std::vector<ReadEvent> events;
    std::size_t size = 0;  // events[0, size) hold what was read
  };
  static constexpr std::size_t kBatchEvents = 512;
  // Batches queued ahead of the merge: bounds the memory a fast reader can fill.
  static constexpr std::size_t kQueuedBatches = 4;

  void work();
  bool fill(Batch& batch);  // false once the end (or a read error) is in the batch

  LogReader& reader_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<Batch> queue_;
  std::vector<Batch> spare_;  // consumed batches, handed back to the worker for reuse
  bool stop_ = false;

  Batch current_;                // the batch the caller is taking events from (caller only)
  std::vector<Batch> consumed_;  // gone past, not yet released (caller only)
  std::size_t pos_ = 0;
  std::thread worker_;
};

}  // namespace probe::differ
