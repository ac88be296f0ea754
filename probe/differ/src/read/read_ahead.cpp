// A rank's log parsed ahead on a worker thread (see detail/read_ahead.h).
#include "differ/detail/read/read_ahead.h"

#include <stdexcept>
#include <utility>

#include "probe/log_format.h"

namespace probe::differ {

ReadAhead::ReadAhead(LogReader& reader) : reader_(reader) {
  worker_ = std::thread([this] { work(); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  space_.notify_all();
  worker_.join();
}

void ReadAhead::work() {
  for (;;) {
    Batch batch;
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        batch = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    const bool more = fill(batch);
    {
      std::unique_lock lock(mutex_);
      space_.wait(lock, [&] { return stop_ || queue_.size() < kQueuedBatches; });
      if (stop_) return;
      queue_.push_back(std::move(batch));
    }
    ready_.notify_one();
    if (!more) return;
  }
}

void read_event(LogReader& reader, ReadEvent& event) {
  try {
    const bool more = reader.next(event.record);
    event.line = reader.line_number();
    event.type = more ? ReadEvent::Type::record : ReadEvent::Type::end;
  } catch (const log_format::ParseError& e) {
    event.type = ReadEvent::Type::parse_error;
    event.message = e.what();
  } catch (const std::exception& e) {  // a pooled log that cannot be reopened, a bad_alloc
    event.type = ReadEvent::Type::read_error;
    event.message = e.what();
  }
}

bool ReadAhead::fill(Batch& batch) {
  batch.size = 0;
  batch.events.reserve(kBatchEvents);
  while (batch.size < kBatchEvents) {
    if (batch.size == batch.events.size()) batch.events.emplace_back();
    ReadEvent& event = batch.events[batch.size++];
    read_event(reader_, event);
    if (event.type == ReadEvent::Type::end || event.type == ReadEvent::Type::read_error)
      return false;
  }
  return true;
}

ReadEvent& ReadAhead::next() {
  if (pos_ < current_.size) return current_.events[pos_++];
  if (current_.size > 0) {
    ReadEvent& last = current_.events[current_.size - 1];
    if (last.type != ReadEvent::Type::record && last.type != ReadEvent::Type::parse_error)
      return last;  // the end (or the read error) again
  }
  if (current_.size > 0) consumed_.push_back(std::move(current_));  // its events stay put
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty(); });
  current_ = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  space_.notify_one();
  pos_ = 0;
  return current_.events[pos_++];
}

void ReadAhead::release_consumed() {
  if (consumed_.empty()) return;
  std::lock_guard lock(mutex_);
  for (auto& b : consumed_) spare_.push_back(std::move(b));
  consumed_.clear();
}

}  // namespace probe::differ
