#include "probe/log_io.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "small_file_system.h"
#include "test_util.h"

namespace lf = probe::log_format;
using namespace test_util;

namespace {

// The records these tests write: the loss of a step.
probe::Record loss(std::int64_t step, double v) { return scalar(step, "loss", v); }

std::string header_line(int format) {
  lf::Header h;
  h.format_version = format;
  return lf::format_header(h) + "\n";
}

// Runs f in a child process and returns what f returned, or nullopt when the child did not
// finish within `timeout` (it is killed then): a writer that hangs fails the test instead of
// hanging it.
std::optional<std::string> in_child(const std::function<std::string()>& f,
                                    std::chrono::seconds timeout = std::chrono::seconds(10)) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      out = f();
    } catch (const std::exception& e) {
      out = std::string("unexpected exception: ") + e.what();
    }
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  bool finished = false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!finished) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
    else finished = true;  // the child closed the pipe: it is exiting
  }
  ::close(fds[0]);
  if (!finished) ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  if (!finished) return std::nullopt;
  return out;
}

}  // namespace

TEST(LogIo, WrittenStepsReadBackInOrder) {
  auto path = fresh_dir("roundtrip") / "rank0" / "diff.log";
  lf::Header header;
  header.setup = "unit test";
  {
    probe::LogWriter writer(path, header);
    for (int step = 0; step < 3; ++step)
      writer.write_step(step, {lf::format_record(loss(step, step * 0.5))});
  }
  probe::LogReader reader(path);
  EXPECT_EQ(reader.header().setup, "unit test");
  EXPECT_EQ(reader.header().format_version, lf::kVersion);
  for (int step = 0; step < 3; ++step) {
    auto r = reader.next();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->step, step);
    EXPECT_EQ(r->value, step * 0.5);
  }
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.truncated());
  EXPECT_FALSE(reader.unterminated());
}

TEST(LogIo, AStepThatRanCompiledCodeSaysSoAtItsEnd) {
  auto path = fresh_dir("compiled") / "diff.log";
  {
    probe::LogWriter writer(path, lf::Header{});
    const std::string record = lf::format_record(loss(0, 1.0)) + "\n";
    writer.write_step(0, record, 1);
    writer.write_step(1, lf::format_record(loss(1, 1.0)) + "\n", 1, /*compiled=*/true);
  }
  EXPECT_NE(read_all(path).find("\n#end step=1 records=1 compiled=1\n"), std::string::npos)
      << read_all(path);
  probe::LogReader reader(path);
  while (reader.next()) {
  }
  EXPECT_FALSE(reader.step_compiled(0));
  EXPECT_TRUE(reader.step_compiled(1));
}

TEST(LogIo, EachStepEndsWithItsEndMarkerAndAnEmptyStepWritesNothing) {
  auto path = fresh_dir("markers") / "diff.log";
  lf::Header header;
  header.format_version = 1;  // the writer writes its own version, whatever it is told
  {
    probe::LogWriter writer(path, header);
    writer.write_step(0, {lf::format_record(loss(0, 1.0)), lf::format_record(loss(0, 2.0))});
    writer.write_step(1, {});
    writer.write_step(2, {lf::format_record(loss(2, 3.0))});
  }
  EXPECT_EQ(read_all(path), header_line(lf::kVersion) + lf::format_record(loss(0, 1.0)) + "\n" +
                                lf::format_record(loss(0, 2.0)) + "\n#end step=0 records=2\n" +
                                lf::format_record(loss(2, 3.0)) + "\n#end step=2 records=1\n");
}

TEST(LogIo, UnwritableDirectoryIsAnErrorNamingThePath) {
  auto blocker = fresh_dir("blocked") / "blocker";
  std::ofstream(blocker.string()) << "a file where a directory should be";
  try {
    probe::LogWriter writer(blocker / "rank0" / "diff.log", lf::Header{});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(blocker.string()), std::string::npos) << e.what();
  }
  std::filesystem::remove(blocker);
}

TEST(LogIo, KilledWriterLeavesEveryCompletedStepReadable) {
  auto path = fresh_dir("killed") / "diff.log";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    probe::LogWriter writer(path, lf::Header{});
    writer.write_step(0, {lf::format_record(loss(0, 1.0))});
    writer.write_step(1, {lf::format_record(loss(1, 2.0))});
    ::raise(SIGKILL);  // no destructor, no exit handlers
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  probe::LogReader reader(path);
  int steps = 0;
  while (auto r = reader.next()) EXPECT_EQ(r->step, steps++);
  EXPECT_EQ(steps, 2);
  EXPECT_FALSE(reader.truncated());
}

TEST(LogIo, WriteErrorThrowsNamingTheFileInsteadOfHanging) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto dir = fresh_dir("full");
  std::filesystem::create_directories(dir);
  const auto path = dir / "diff.log";
  std::filesystem::create_symlink("/dev/full", path);  // every write: ENOSPC
  auto result = in_child([&] {
    try {
      probe::LogWriter writer(path, lf::Header{});  // writes the header
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  ASSERT_TRUE(result) << "LogWriter hung on a write error";
  EXPECT_EQ(*result,
            "numprobe: cannot write log file '" + path.string() + "': " + std::strerror(ENOSPC));
  std::filesystem::remove_all(dir);
}

TEST(LogIo, StepPastTheFileSizeLimitThrowsThenEveryLaterStepThrows) {
  auto path = fresh_dir("fsize") / "diff.log";
  auto result = in_child([&] {
    // Not ignoring SIGXFSZ: a write() past the limit would kill this process, so the writer
    // must not issue one.
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return std::string("setrlimit failed");
    probe::LogWriter writer(path, lf::Header{});
    writer.write_step(0, {lf::format_record(loss(0, 1.0))});
    std::string out;
    for (std::int64_t step : {1, 2}) {
      try {
        writer.write_step(step, std::vector<std::string>(200, lf::format_record(loss(step, 2.0))));
        out += "no error\n";
      } catch (const probe::LogWriteError& e) {
        out += std::string(e.what()) + (e.stop_line_written ? " [stop line]\n" : "\n");
      }
    }
    return out;
  });
  ASSERT_TRUE(result) << "LogWriter hung on a write error";
  const std::string error =
      "numprobe: cannot write log file '" + path.string() +
      "': the step would exceed the file size limit (RLIMIT_FSIZE, 4096 bytes)";
  EXPECT_EQ(*result, error + " [stop line]\n" + error + " [stop line]\n");
  // Step 0 is whole, and the stop line says why step 1 is missing.
  probe::LogReader reader(path);
  std::vector<std::int64_t> steps;
  while (auto r = reader.next()) steps.push_back(r->step);
  EXPECT_EQ(steps, std::vector<std::int64_t>{0});
  EXPECT_TRUE(reader.truncated());
  EXPECT_FALSE(reader.unterminated());
  ASSERT_TRUE(reader.stopped());
  EXPECT_EQ(reader.stopped()->step, 1);
  EXPECT_EQ(reader.stopped()->reason,
            "the step would exceed the file size limit (RLIMIT_FSIZE, 4096 bytes)");
  EXPECT_EQ(reader.stopped()->line, 4);
}

// A full file system (a tmpfs of 8 KiB where one can be mounted, else a file-size limit): the
// step that does not fit leaves nothing behind, not even part of a line, and the log's last line
// says which step is missing and why. The stop line fits in the failed step's place (or the
// room reserved for it) though the disk is full.
TEST(LogIo, AFullDiskCutsTheFailedStepBackAndRecordsWhy) {
  for (auto kind : test_support::SmallFileSystem::kinds()) {
    const std::string what = test_support::SmallFileSystem::name(kind);
    test_support::SmallFileSystem fs("log_io", kind, 8 * 1024);
    ASSERT_TRUE(fs.ready()) << what;
    const auto path = fs.dir() / "rank0" / "diff.log";
    std::int64_t failed = -1;
    std::string message;
    bool stop_line_written = false;
    {
      probe::LogWriter writer(path, lf::Header{});
      for (std::int64_t step = 0; step < 20 && failed < 0; ++step) {
        try {
          writer.write_step(
              step, std::vector<std::string>(13, lf::format_record(loss(step, 0.1 * step))));
        } catch (const probe::LogWriteError& e) {
          failed = step;
          message = e.what();
          stop_line_written = e.stop_line_written;
        }
      }
      ASSERT_GT(failed, 0) << what << ": the file system never filled";
      EXPECT_THROW(writer.write_step(failed + 1, {lf::format_record(loss(failed + 1, 1.0))}),
                   probe::LogWriteError);
    }
    EXPECT_NE(message.find(path.string()), std::string::npos) << what << ": " << message;
    EXPECT_NE(message.find(fs.expected_reason()), std::string::npos) << what << ": " << message;
    EXPECT_TRUE(stop_line_written) << what;
    const std::string text = read_all(path);
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n') << what << ": a half line is left";
    const std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
    EXPECT_EQ(last.rfind("#stopped step=" + std::to_string(failed) + " reason=", 0), 0u)
        << what << ": " << last;
    probe::LogReader reader(path);
    std::int64_t records = 0, last_step = -1;
    while (auto r = reader.next()) {
      ++records;
      last_step = r->step;
    }
    EXPECT_EQ(records, 13 * failed) << what;
    EXPECT_EQ(last_step, failed - 1) << what;
    EXPECT_TRUE(reader.truncated()) << what;
    EXPECT_FALSE(reader.unterminated()) << what;
    ASSERT_TRUE(reader.stopped()) << what;
    EXPECT_EQ(reader.stopped()->step, failed) << what;
    EXPECT_NE(reader.stopped()->reason.find(fs.expected_reason()), std::string::npos) << what;
  }
}

// When not even the stop line fits (the limit falls exactly at a step's end), the log still
// ends at its last complete step, without a partial line; the caller learns the reason is not
// in it.
TEST(LogIo, NoRoomForTheStopLineLeavesTheLogAtItsLastCompleteStep) {
  auto dir = fresh_dir("exact_limit");
  const std::vector<std::string> lines{lf::format_record(loss(0, 1.0))};
  {
    probe::LogWriter measure(dir / "measure.log", lf::Header{});
    measure.write_step(0, lines);
  }
  const auto exact = static_cast<rlim_t>(std::filesystem::file_size(dir / "measure.log"));
  const auto path = dir / "diff.log";
  auto result = in_child([&] {
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = exact;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return std::string("setrlimit failed");
    probe::LogWriter writer(path, lf::Header{});
    writer.write_step(0, lines);
    try {
      writer.write_step(1, {lf::format_record(loss(1, 2.0))});
    } catch (const probe::LogWriteError& e) {
      return std::string(e.stop_line_written ? "stop line" : "no stop line");
    }
    return std::string("no error");
  });
  ASSERT_TRUE(result);
  EXPECT_EQ(*result, "no stop line");
  EXPECT_EQ(read_all(path), read_all(dir / "measure.log"));
  std::filesystem::remove_all(dir);
}

TEST(LogIo, TruncatedLastLineIsReportedAndSkipped) {
  for (int format : {1, 2}) {
    SCOPED_TRACE(format);
    auto path = fresh_dir("truncated") / "diff.log";
    write_file(path, header_line(format) + lf::format_record(loss(0, 1.0)) + "\n" +
                         (format == 2 ? "#end step=0 records=1\n" : "") + "step=1 kind=scalar na");
    probe::LogReader reader(path);
    EXPECT_TRUE(reader.next());
    EXPECT_FALSE(reader.next());
    EXPECT_TRUE(reader.truncated());
    EXPECT_EQ(reader.truncated_fragment(), "step=1 kind=scalar na");
    EXPECT_FALSE(reader.unterminated());  // no complete line after the last step end
  }
}

TEST(LogIo, StepCutAtALineBoundaryIsReportedTruncated) {
  auto path = fresh_dir("boundary") / "diff.log";
  const std::string first_of_step_1 = lf::format_record(loss(1, 2.0));
  write_file(path, header_line(2) + lf::format_record(loss(0, 1.0)) + "\n" +
                       "#end step=0 records=1\n" + first_of_step_1 + "\n" +
                       lf::format_record(loss(1, 3.0)) + "\n");
  probe::LogReader reader(path);
  for (std::int64_t step : {0, 1, 1}) {
    auto r = reader.next();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->step, step);
  }
  EXPECT_FALSE(reader.next());
  EXPECT_TRUE(reader.truncated());
  EXPECT_EQ(reader.truncated_fragment(), first_of_step_1);
  ASSERT_TRUE(reader.unterminated());
  EXPECT_EQ(reader.unterminated()->step, 1);
  EXPECT_EQ(reader.unterminated()->line, 4);

  // Cut inside the end marker itself: the step is not trusted either.
  write_file(path, header_line(2) + lf::format_record(loss(0, 1.0)) + "\n#end step=0 rec");
  probe::LogReader cut(path);
  EXPECT_TRUE(cut.next());
  EXPECT_FALSE(cut.next());
  EXPECT_TRUE(cut.truncated());
  EXPECT_EQ(cut.truncated_fragment(), "#end step=0 rec");
  ASSERT_TRUE(cut.unterminated());
  EXPECT_EQ(cut.unterminated()->step, 0);
}

TEST(LogIo, FormatOneLogWithoutEndMarkersReadsAsBefore) {
  auto path = fresh_dir("format1") / "diff.log";
  write_file(path, header_line(1) + lf::format_record(loss(0, 1.0)) + "\n" +
                       lf::format_record(loss(1, 2.0)) + "\n#end step=1 records=1\n");
  probe::LogReader reader(path);
  EXPECT_EQ(reader.header().format_version, 1);
  EXPECT_TRUE(reader.next());
  EXPECT_TRUE(reader.next());
  try {
    reader.next();  // step ends are not part of format 1
    FAIL() << "expected a parse error";
  } catch (const lf::ParseError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":4: unexpected token '#end'");
  }
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.truncated());
}

TEST(LogIo, StepEndDisagreeingWithItsRecordsIsAnErrorNamingFileAndLine) {
  auto path = fresh_dir("badend") / "diff.log";
  write_file(path, header_line(2) + lf::format_record(loss(3, 1.0)) + "\n" +
                       lf::format_record(loss(3, 2.0)) + "\n" +
                       "#end step=3 records=5\n" +  // line 4: count
                       lf::format_record(loss(4, 1.0)) + "\n" +
                       "#end step=5 records=1\n" +  // line 6: step
                       lf::format_record(loss(6, 1.0)) + "\n" + lf::format_record(loss(7, 1.0)) +
                       "\n" + "#end step=6 records=2\n" +  // line 9: two steps
                       "#end step=8 records=x\n" +         // line 10: garbled
                       lf::format_record(loss(9, 1.0)) + "\n" + "#end step=9 records=1\n");
  probe::LogReader reader(path);
  auto error_after = [&](int records) {
    for (int i = 0; i < records; ++i) EXPECT_TRUE(reader.next());
    try {
      reader.next();
    } catch (const lf::ParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string p = path.string();
  EXPECT_EQ(error_after(2), p + ":4: step end says 5 records of step 3, read 2");
  EXPECT_EQ(error_after(1), p + ":6: step end says step 5, the records before it are of step 4");
  EXPECT_EQ(error_after(2), p + ":9: step end of step 6 follows records of step 7 too");
  EXPECT_EQ(error_after(0), p + ":10: field 'records' is not an integer: 'x'");
  auto last = reader.next();  // reading continues, each step checked on its own
  ASSERT_TRUE(last);
  EXPECT_EQ(last->step, 9);
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.truncated());
}

// Step 0 as a garbage line, then one record, then a step end claiming `end_records` records.
static void write_step_with_garbage_line(const std::filesystem::path& path, int end_records) {
  write_file(path, header_line(2) + "this is not a record\n" + lf::format_record(loss(0, 1.0)) +
                       "\n#end step=0 records=" + std::to_string(end_records) + "\n");
}

TEST(LogIo, GarbageLineErrorNamesFileAndLineAndReadingContinues) {
  auto path = fresh_dir("garbage") / "diff.log";
  // A garbled line is no record: the step end counts the one record, and agrees.
  write_step_with_garbage_line(path, 1);
  probe::LogReader reader(path);
  try {
    reader.next();
    FAIL() << "expected a parse error";
  } catch (const lf::ParseError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":2: unexpected token 'this'");
  }
  auto r = reader.next();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->value, 1.0);
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.truncated());
}

TEST(LogIo, RecordGarbledIntoALineThatDoesNotParseLeavesTheStepEndShort) {
  auto path = fresh_dir("garbled") / "diff.log";
  // The writer wrote two records; one reads back as garbage: that record is lost.
  write_step_with_garbage_line(path, 2);
  probe::LogReader reader(path);
  EXPECT_THROW(reader.next(), lf::ParseError);
  EXPECT_TRUE(reader.next());
  try {
    reader.next();
    FAIL() << "expected the step end to disagree";
  } catch (const lf::ParseError& e) {
    EXPECT_EQ(std::string(e.what()),
              path.string() + ":4: step end says 2 records of step 0, read 1");
  }
}

TEST(LogIo, MissingHeaderIsAnError) {
  auto path = fresh_dir("noheader") / "diff.log";
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << lf::format_record(loss(0, 1.0)) << "\n";
  EXPECT_THROW(probe::LogReader reader(path), lf::ParseError);
  EXPECT_THROW(probe::LogReader reader(path.parent_path() / "absent.log"), std::runtime_error);
}

TEST(LogIo, OpenErrorSaysWhy) {
  const auto path = fresh_dir("openerror") / "rank3" / "diff.log";
  try {
    probe::LogReader reader(path);
    FAIL() << "opened a file that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "numprobe: cannot open log file '" + path.string() + "': No such file or directory");
  }
}

// A reader released after every record (what diff_logs does with ranks beyond its open-file
// budget) reads what one that holds its file reads, cut last lines and step ends included.
TEST(LogIo, ReleasedReaderReadsOnWhereItStopped) {
  for (const bool cut : {false, true}) {
    SCOPED_TRACE(cut);
    auto path = fresh_dir("release") / "diff.log";
    std::string text = header_line(2);
    for (int step = 0; step < 3; ++step) {
      auto aux = loss(step, step + 0.5);
      aux.name = "aux";
      text += lf::format_record(loss(step, step + 0.25)) + "\n" + lf::format_record(aux) +
              "\n#end step=" + std::to_string(step) + " records=2\n";
    }
    if (cut) text += "step=3 kind=scalar na";
    write_file(path, text);
    probe::LogReader held(path), released(path);
    released.release();
    EXPECT_FALSE(released.holds_file());
    for (;;) {
      auto a = held.next(), b = released.next();
      ASSERT_EQ(a.has_value(), b.has_value());
      released.release();
      if (!a) break;
      EXPECT_EQ(lf::format_record(*a), lf::format_record(*b));
      EXPECT_EQ(held.line_number(), released.line_number());
    }
    EXPECT_FALSE(released.next());  // released at the end: stays at the end
    EXPECT_EQ(held.truncated(), cut);
    EXPECT_EQ(released.truncated(), cut);
    EXPECT_EQ(released.truncated_fragment(), held.truncated_fragment());
  }
}

TEST(LogIo, ReleasedReaderWhoseFileWentAwaySaysWhy) {
  auto path = fresh_dir("releasegone") / "diff.log";
  write_file(path, header_line(2) + lf::format_record(loss(0, 1.0)) + "\n#end step=0 records=1\n");
  probe::LogReader reader(path);
  reader.release();
  std::filesystem::remove(path);
  try {
    reader.next();
    FAIL() << "read a file that is gone";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "numprobe: cannot reopen log file '" + path.string() +
                                         "': No such file or directory");
  }
}
