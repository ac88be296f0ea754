#include "probe/log_io.h"

#include <fcntl.h>
#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

namespace probe {
namespace {

std::string write_error(const std::filesystem::path& path, const std::string& reason) {
  return "numprobe: cannot write log file '" + path.string() + "': " + reason;
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

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (failed_) return;  // a step after a failed one would follow a partial step
    try {
      spdlog::memory_buf_t buf;
      formatter_->format(msg, buf);
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
    } catch (const std::exception& e) {  // formatting (out of memory)
      fail(e.what());
    }
  }
  // write() handed the bytes to the OS already: nothing to flush, but the waiter must always
  // hear that its message was handled.
  void flush_() override {
    {
      std::lock_guard lock(flush_mutex_);  // a sleeping waiter cannot miss the notify
      flushed_.fetch_add(1, std::memory_order_release);
    }
    flushed_cv_.notify_all();
  }

 private:
  void fail(const std::string& reason) {
    failed_ = true;
    std::lock_guard lock(flush_mutex_);
    error_ = write_error(path_, reason);
  }

  std::filesystem::path path_;
  int fd_ = -1;
  bool failed_ = false;  // only touched by the writing thread
  std::mutex flush_mutex_;
  std::condition_variable flushed_cv_;
  std::atomic<std::uint64_t> flushed_{0};  // polled without the lock, waited on with it
  std::string error_;                      // guarded by flush_mutex_
};

}  // namespace

struct LogWriter::Impl {
  std::filesystem::path path;
  std::shared_ptr<spdlog::details::thread_pool> pool;
  std::shared_ptr<CountingFileSink> sink;
  std::shared_ptr<spdlog::async_logger> logger;
  std::uint64_t flushes_requested = 0;
  std::string error;  // the first write error, thrown again by every later write

  ~Impl() {
    // The logger's worker drains the queue before the pool joins.
    if (logger) logger->flush();
    logger.reset();
    pool.reset();
  }

  // Appends `text` and a newline; returns once it reached the OS, or throws.
  void write(const std::string& text) {
    if (!error.empty()) throw std::runtime_error(error);
    logger->log(spdlog::level::info, spdlog::string_view_t(text.data(), text.size()));
    logger->flush();
    sink->wait_for_flush(++flushes_requested);
    error = sink->error();
    if (!error.empty()) throw std::runtime_error(error);
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
  impl_->sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      "%v", spdlog::pattern_time_type::local, "\n"));
  impl_->pool = std::make_shared<spdlog::details::thread_pool>(/*q_max_items=*/8192,
                                                               /*threads_n=*/1);
  impl_->logger = std::make_shared<spdlog::async_logger>(
      "numprobe:" + path.string(), impl_->sink, impl_->pool,
      spdlog::async_overflow_policy::block);
  impl_->logger->set_level(spdlog::level::info);
  log_format::Header h = header;
  h.format_version = log_format::kVersion;  // the steps written below have step ends
  impl_->write(log_format::format_header(h));
}

LogWriter::~LogWriter() = default;

void LogWriter::write_step(std::int64_t step, const std::vector<std::string>& lines) {
  // A step that recorded nothing (PROBE_EVERY skips it) has nothing to flush: every earlier
  // step is on disk already, so it costs no round trip to the writer thread.
  if (lines.empty()) return;
  // One message per step, not per line: each message wakes spdlog's worker thread, and with
  // hundreds of records a step those wake-ups cost more than the records (docs/perf.md).
  // The step end comes last: a reader trusts a step only once it has read it.
  const std::string end = log_format::format_step_end(step, lines.size());
  std::size_t size = lines.size() + end.size();
  for (const auto& line : lines) size += line.size();
  std::string text;
  text.reserve(size);
  for (const auto& line : lines) {
    text += line;
    text += '\n';
  }
  text += end;
  impl_->write(text);
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
      if (open_lines_++ == 0) {  // once a step, not once a record
        open_first_line_ = line_number_;
        open_first_text_ = line;
      }
    }
    try {
      Record r = log_format::parse_record(line);
      if (step_ends_) {
        ++open_records_;  // a garbled line is no record: the step end counts records
        if (!open_step_) open_step_ = r.step;
        else if (r.step != *open_step_ && !open_other_step_) open_other_step_ = r.step;
      }
      return r;
    } catch (const log_format::ParseError& e) {
      throw log_format::ParseError(path_.string() + ":" + std::to_string(line_number_) + ": " +
                                   e.what());
    }
  }
  // Format 2: complete lines after the last step end are a step the writer did not finish.
  if (open_lines_ > 0) truncated_ = true;
  return std::nullopt;
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
