#include "probe/log_io.h"

#include <fcntl.h>
#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

namespace probe {
namespace {

std::string write_error(const std::filesystem::path& path, const std::string& reason) {
  return "numprobe: cannot write log file '" + path.string() + "': " + reason;
}

// Room kept past the last complete step for the stop line (fallocate, where the file system
// has it): on a full disk the failed step's partial bytes may be fewer than the line needs.
constexpr off_t kStopLineReserve = 512;

// The soft file-size limit (RLIMIT_FSIZE), or nullopt when there is none: a write() past it
// would raise SIGXFSZ, whose default action kills the process, so the sink never issues one.
std::optional<off_t> file_size_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::nullopt;
  return static_cast<off_t>(limit.rlim_cur);
}

// After a failed std::ifstream::open: the path and why (libstdc++ opens with open(2), which
// leaves the reason in errno; "Too many open files" is the one a run of thousands of ranks meets).
std::string open_error(const std::filesystem::path& path, const char* verb = "open") {
  const int err = errno;
  return std::string("numprobe: cannot ") + verb + " log file '" + path.string() +
         "': " + (err ? std::strerror(err) : "unknown reason");
}

// A file sink that tells waiters how many flushes it has completed, so write_step() can
// return once its lines reached the OS while the writing itself runs on spdlog's thread.
// It never throws: spdlog's worker would catch and print the error, the flush counter would
// not move and the training thread would wait forever. The first error is kept instead, for
// the waiter to throw.
class CountingFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CountingFileSink(const std::filesystem::path& path) : path_(path) {
    // O_APPEND: every write() starts at the current end, so no write overwrites another.
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(write_error(path, std::strerror(errno)));
  }
  ~CountingFileSink() override { ::close(fd_); }

  // Polls (yielding, so a writer sharing this core still runs) for up to kPollFor before it
  // sleeps: a flush takes tens of microseconds, and sleeping through it and being woken cost
  // more than that; polling took a probe that records nothing from +2% to +0.7% of a 12 ms
  // training step (docs/perf.md).
  void wait_for_flush(std::uint64_t count) {
    constexpr auto kPollFor = std::chrono::milliseconds(1);
    const auto poll_until = std::chrono::steady_clock::now() + kPollFor;
    while (flushed_.load(std::memory_order_acquire) < count &&
           std::chrono::steady_clock::now() < poll_until)
      std::this_thread::yield();
    std::unique_lock lock(flush_mutex_);
    flushed_cv_.wait(lock, [&] { return flushed_.load(std::memory_order_acquire) >= count; });
  }

  // The first write error ("numprobe: cannot write log file ..."), or empty.
  std::string error() {
    std::lock_guard lock(flush_mutex_);
    return error_;
  }

  // After a failed write, with the writer thread idle: cuts the file back to its last complete
  // step (no partial step or half line stays) and puts the stop line there if it fits: the bytes
  // the failed write left and the reserve are the file's already, so an overwrite usually does.
  // Returns whether the stop line was written. `step`: the step that failed, none for the header.
  bool stop(std::optional<std::int64_t> step, const std::string& reason) {
    std::lock_guard lock(mutex_);  // base_sink's: no write runs meanwhile
    std::string line;
    if (step) line = log_format::format_stopped({*step, reason}) + "\n";
    const auto size = static_cast<off_t>(line.size());
    bool written = false;
    // pwrite() at an offset needs the descriptor without O_APPEND.
    const int flags = ::fcntl(fd_, F_GETFL);
    if (!line.empty() && flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_APPEND) == 0 &&
        (!max_size_ || committed_ + size <= *max_size_)) {
      const ssize_t n = ::pwrite(fd_, line.data(), line.size(), committed_);
      written = n == static_cast<ssize_t>(line.size());
    }
    written = ::ftruncate(fd_, committed_ + (written ? size : 0)) == 0 && written;
    return written;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (failed_) return;  // a step after a failed one would follow a partial step
    try {
      spdlog::memory_buf_t buf;
      formatter_->format(msg, buf);
      const auto size = static_cast<off_t>(buf.size());
      if (max_size_ && committed_ + size > *max_size_) {
        fail("the step would exceed the file size limit (RLIMIT_FSIZE, " +
             std::to_string(*max_size_) + " bytes)");
        return;
      }
      // One write() per message (one step): a short write only on a full disk or a signal.
      const char* data = buf.data();
      std::size_t left = buf.size();
      while (left > 0) {
        const ssize_t n = ::write(fd_, data, left);
        if (n < 0) {
          if (errno == EINTR) continue;
          fail(std::strerror(errno));
          return;
        }
        data += n;
        left -= static_cast<std::size_t>(n);
      }
      committed_ += size;
    } catch (const std::exception& e) {  // formatting (out of memory)
      fail(e.what());
    }
  }
  // write() handed the bytes to the OS already: nothing to flush, but the waiter must always
  // hear that its message was handled. Then, while training goes on, room for the stop line.
  void flush_() override {
    {
      std::lock_guard lock(flush_mutex_);  // a sleeping waiter cannot miss the notify
      flushed_.fetch_add(1, std::memory_order_release);
    }
    flushed_cv_.notify_all();
    if (!failed_ && committed_ != reserved_at_) {
      (void)::fallocate(fd_, FALLOC_FL_KEEP_SIZE, committed_, kStopLineReserve);  // best effort
      reserved_at_ = committed_;
    }
  }

 private:
  void fail(const std::string& reason) {
    failed_ = true;
    std::lock_guard lock(flush_mutex_);
    error_ = write_error(path_, reason);
    reason_ = reason;
  }

 public:
  std::string reason() {
    std::lock_guard lock(flush_mutex_);
    return reason_;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::optional<off_t> max_size_ = file_size_limit();
  // Only touched by the writing thread, or by stop() once it is idle:
  bool failed_ = false;
  off_t committed_ = 0;     // the file's size after the last complete write
  off_t reserved_at_ = -1;  // where the stop line's room was last reserved
  std::mutex flush_mutex_;
  std::condition_variable flushed_cv_;
  std::atomic<std::uint64_t> flushed_{0};  // polled without the lock, waited on with it
  std::string error_;                      // guarded by flush_mutex_
  std::string reason_;                     // guarded by flush_mutex_: error_ without the path
};

}  // namespace

struct LogWriter::Impl {
  std::filesystem::path path;
  std::shared_ptr<spdlog::details::thread_pool> pool;
  std::shared_ptr<CountingFileSink> sink;
  std::shared_ptr<spdlog::async_logger> logger;
  std::uint64_t flushes_requested = 0;
  std::string error;  // the first write error, thrown again by every later write
  bool stop_line_written = false;
  std::string step_text;  // a step's records and end line, as handed to the logger

  ~Impl() {
    // The logger's worker drains the queue before the pool joins.
    if (logger) logger->flush();
    logger.reset();
    pool.reset();
  }

  // Appends `text` (step `step`'s, or the header) and a newline; returns once it reached the
  // OS, or throws LogWriteError after cutting the file back to its last complete step.
  void write(const std::string& text, std::optional<std::int64_t> step) {
    if (!error.empty()) throw LogWriteError(error, stop_line_written);
    logger->log(spdlog::level::info, spdlog::string_view_t(text.data(), text.size()));
    logger->flush();
    sink->wait_for_flush(++flushes_requested);
    error = sink->error();
    if (error.empty()) return;
    stop_line_written = sink->stop(step, sink->reason());  // the writer thread is idle now
    throw LogWriteError(error, stop_line_written);
  }
};

LogWriter::LogWriter(const std::filesystem::path& path, const log_format::Header& header)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    throw std::runtime_error("numprobe: cannot create log directory '" +
                             path.parent_path().string() + "': " + ec.message());
  impl_->sink = std::make_shared<CountingFileSink>(path);
  impl_->sink->set_formatter(
      std::make_unique<spdlog::pattern_formatter>("%v", spdlog::pattern_time_type::local, "\n"));
  impl_->pool = std::make_shared<spdlog::details::thread_pool>(/*q_max_items=*/8192,
                                                               /*threads_n=*/1);
  impl_->logger = std::make_shared<spdlog::async_logger>(
      "numprobe:" + path.string(), impl_->sink, impl_->pool, spdlog::async_overflow_policy::block);
  impl_->logger->set_level(spdlog::level::info);
  log_format::Header h = header;
  h.format_version = log_format::kVersion;  // the steps written below have step ends
  impl_->write(log_format::format_header(h), std::nullopt);
}

LogWriter::~LogWriter() = default;

void LogWriter::write_step(std::int64_t step, const std::vector<std::string>& lines) {
  // A step that recorded nothing (PROBE_EVERY skips it) has nothing to flush: every earlier
  // step is on disk already, so it costs no round trip to the writer thread.
  if (lines.empty()) return;
  std::size_t size = lines.size();
  for (const auto& line : lines) size += line.size();
  std::string records;
  records.reserve(size);
  for (const auto& line : lines) {
    records += line;
    records += '\n';
  }
  write_step(step, records, lines.size());
}

void LogWriter::write_step(std::int64_t step, std::string_view records, std::size_t count,
                           bool compiled) {
  if (count == 0) return;
  // One message per step, not per line: each message wakes spdlog's worker thread, and with
  // hundreds of records a step those wake-ups cost more than the records (docs/perf.md).
  // The step end comes last: a reader trusts a step only once it has read it.
  std::string& text = impl_->step_text;  // its capacity is kept from step to step
  text.assign(records);
  text += log_format::format_step_end(step, count, compiled);
  impl_->write(text, step);
}

const std::filesystem::path& LogWriter::path() const { return impl_->path; }

LogReader::LogReader(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error("numprobe: '" + path.string() + "' is a directory, not a log file");
  errno = 0;
  in_.open(path, std::ios::binary);
  if (!in_) throw std::runtime_error(open_error(path));
  std::string line;
  if (!std::getline(in_, line))
    throw log_format::ParseError(path.string() + ":1: empty file (no numprobe header)");
  line_number_ = 1;
  try {
    header_ = log_format::parse_header(line);
  } catch (const log_format::ParseError& e) {
    throw log_format::ParseError(path.string() + ":1: " + e.what());
  }
  step_ends_ = header_.format_version >= 2;
}

void LogReader::release() {
  if (!in_.is_open()) return;
  if (in_.fail() || in_.eof()) {  // the end was reached: nothing more to read
    at_end_ = true;
  } else {
    resume_at_ = in_.tellg();
  }
  in_.close();
}

void LogReader::reopen() {
  errno = 0;
  in_.open(path_, std::ios::binary);
  if (!in_) throw std::runtime_error(open_error(path_, "reopen"));
  if (!in_.seekg(resume_at_))
    throw std::runtime_error("numprobe: cannot seek in log file '" + path_.string() +
                             "' (changed while being read?)");
}

std::optional<Record> LogReader::next() {
  Record r;
  if (!next(r)) return std::nullopt;
  return r;
}

bool LogReader::next(Record& out) {
  std::string& line = line_;  // reused: no allocation per line
  if (!in_.is_open() && !at_end_) reopen();
  while (in_.is_open() && std::getline(in_, line)) {
    ++line_number_;
    if (in_.eof()) {  // no newline after this line: the writer died mid-line
      truncated_ = cut_mid_line_ = true;
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (step_ends_) {
      if (log_format::is_step_end(line)) {
        end_step(line);
        continue;
      }
      if (header_.format_version >= 3 && log_format::is_stopped(line)) {
        read_stop_line(line);
        continue;
      }
      if (open_lines_++ == 0) {  // once a step, not once a record
        open_first_line_ = line_number_;
        open_first_text_ = line;
      }
    }
    try {
      log_format::parse_record_into(line, out);
      if (step_ends_) {
        ++open_records_;  // a garbled line is no record: the step end counts records
        if (!open_step_) open_step_ = out.step;
        else if (out.step != *open_step_ && !open_other_step_) open_other_step_ = out.step;
      }
      return true;
    } catch (const log_format::ParseError& e) {
      throw log_format::ParseError(path_.string() + ":" + std::to_string(line_number_) + ": " +
                                   e.what());
    }
  }
  // Format 2: complete lines after the last step end are a step the writer did not finish.
  if (open_lines_ > 0) truncated_ = true;
  return false;
}

void LogReader::end_step(std::string_view line) {
  // Whatever it says, the step is over: the next one is checked on its own.
  const std::int64_t records = open_records_;
  const auto step = open_step_, other = open_other_step_;
  open_lines_ = 0;
  open_records_ = 0;
  open_step_.reset();
  open_other_step_.reset();
  auto error = [&](const std::string& message) {
    return log_format::ParseError(path_.string() + ":" + std::to_string(line_number_) + ": " +
                                  message);
  };
  log_format::StepEnd end;
  try {
    end = log_format::parse_step_end(line);
  } catch (const log_format::ParseError& e) {
    throw error(e.what());
  }
  const auto s = std::to_string(end.step);
  if (step && *step != end.step)
    throw error("step end says step " + s + ", the records before it are of step " +
                std::to_string(*step));
  if (other)
    throw error("step end of step " + s + " follows records of step " + std::to_string(*other) +
                " too");
  if (end.records != records)
    throw error("step end says " + std::to_string(end.records) + " records of step " + s +
                ", read " + std::to_string(records));
  if (end.compiled) {
    std::lock_guard lock(compiled_mutex_);
    compiled_steps_.insert(end.step);
  }
}

bool LogReader::step_compiled(std::int64_t step) const {
  std::lock_guard lock(compiled_mutex_);
  return compiled_steps_.count(step) > 0;
}

void LogReader::read_stop_line(std::string_view line) {
  try {
    const log_format::Stopped stop = log_format::parse_stopped(line);
    stopped_ = Stop{stop.step, stop.reason, line_number_};
  } catch (const log_format::ParseError& e) {
    throw log_format::ParseError(path_.string() + ":" + std::to_string(line_number_) + ": " +
                                 e.what());
  }
  truncated_ = true;  // steps from stop.step on are missing
}

std::string_view LogReader::truncated_fragment() const {
  if (!truncated_) return {};
  return cut_mid_line_ ? std::string_view(line_) : std::string_view(open_first_text_);
}

std::optional<LogReader::Unterminated> LogReader::unterminated() const {
  if (!truncated_ || open_lines_ == 0) return std::nullopt;
  return Unterminated{open_first_line_, open_step_};
}

}  // namespace probe
