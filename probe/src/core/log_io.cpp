#include "probe/log_io.h"

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace probe {
namespace {

// A file sink that tells waiters how many flushes it has completed, so write_step() can
// return once its lines reached the OS while the writing itself runs on spdlog's thread.
class CountingFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CountingFileSink(const std::filesystem::path& path) {
    file_.open(path.string(), /*truncate=*/true);
  }

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

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.write(line);
  }
  void flush_() override {
    file_.flush();
    {
      std::lock_guard lock(flush_mutex_);  // a sleeping waiter cannot miss the notify
      flushed_.fetch_add(1, std::memory_order_release);
    }
    flushed_cv_.notify_all();
  }

 private:
  spdlog::details::file_helper file_;
  std::mutex flush_mutex_;
  std::condition_variable flushed_cv_;
  std::atomic<std::uint64_t> flushed_{0};  // polled without the lock, waited on with it
};

}  // namespace

struct LogWriter::Impl {
  std::filesystem::path path;
  std::shared_ptr<spdlog::details::thread_pool> pool;
  std::shared_ptr<CountingFileSink> sink;
  std::shared_ptr<spdlog::async_logger> logger;
  std::uint64_t flushes_requested = 0;
};

LogWriter::LogWriter(const std::filesystem::path& path, const log_format::Header& header)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    throw std::runtime_error("numprobe: cannot create log directory '" +
                             path.parent_path().string() + "': " + ec.message());
  try {
    impl_->sink = std::make_shared<CountingFileSink>(path);
  } catch (const spdlog::spdlog_ex& e) {
    throw std::runtime_error("numprobe: cannot write log file '" + path.string() +
                             "': " + e.what());
  }
  impl_->sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      "%v", spdlog::pattern_time_type::local, "\n"));
  impl_->pool = std::make_shared<spdlog::details::thread_pool>(/*q_max_items=*/8192,
                                                               /*threads_n=*/1);
  impl_->logger = std::make_shared<spdlog::async_logger>(
      "numprobe:" + path.string(), impl_->sink, impl_->pool,
      spdlog::async_overflow_policy::block);
  impl_->logger->set_level(spdlog::level::info);
  write_step({log_format::format_header(header)});
}

LogWriter::~LogWriter() {
  // The logger's worker drains the queue before the pool joins.
  impl_->logger->flush();
  impl_->logger.reset();
  impl_->pool.reset();
}

void LogWriter::write_step(const std::vector<std::string>& lines) {
  // A step that recorded nothing (PROBE_EVERY skips it) has nothing to flush: every earlier
  // step is on disk already, so it costs no round trip to the writer thread.
  if (lines.empty()) return;
  // One message per step, not per line: each message wakes spdlog's worker thread, and with
  // hundreds of records a step those wake-ups cost more than the records (docs/perf.md).
  std::size_t size = lines.size();
  for (const auto& line : lines) size += line.size();
  std::string step;
  step.reserve(size);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) step += '\n';
    step += lines[i];
  }
  impl_->logger->log(spdlog::level::info, spdlog::string_view_t(step.data(), step.size()));
  impl_->logger->flush();
  impl_->sink->wait_for_flush(++impl_->flushes_requested);
}

const std::filesystem::path& LogWriter::path() const { return impl_->path; }

LogReader::LogReader(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error("numprobe: '" + path.string() + "' is a directory, not a log file");
  in_.open(path, std::ios::binary);
  if (!in_)
    throw std::runtime_error("numprobe: cannot open log file '" + path.string() + "'");
  std::string line;
  if (!std::getline(in_, line))
    throw log_format::ParseError(path.string() + ":1: empty file (no numprobe header)");
  line_number_ = 1;
  try {
    header_ = log_format::parse_header(line);
  } catch (const log_format::ParseError& e) {
    throw log_format::ParseError(path.string() + ":1: " + e.what());
  }
}

std::optional<Record> LogReader::next() {
  std::string& line = line_;  // reused: no allocation per line
  while (std::getline(in_, line)) {
    ++line_number_;
    if (in_.eof()) {  // no newline after this line: the writer died mid-line
      truncated_ = true;
      return std::nullopt;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    try {
      return log_format::parse_record(line);
    } catch (const log_format::ParseError& e) {
      throw log_format::ParseError(path_.string() + ":" + std::to_string(line_number_) + ": " +
                                   e.what());
    }
  }
  return std::nullopt;
}

}  // namespace probe
