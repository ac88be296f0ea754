#include "probe/log_io.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace lf = probe::log_format;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("numprobe_log_io_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

probe::Record scalar(std::int64_t step, double v) {
  probe::Record r;
  r.step = step;
  r.kind = probe::Kind::scalar;
  r.name = "loss";
  r.state = probe::Record::State::scalar;
  r.value = v;
  return r;
}

}  // namespace

TEST(LogIo, WrittenStepsReadBackInOrder) {
  auto path = fresh_dir("roundtrip") / "rank0" / "diff.log";
  lf::Header header;
  header.setup = "unit test";
  {
    probe::LogWriter writer(path, header);
    for (int step = 0; step < 3; ++step)
      writer.write_step({lf::format_record(scalar(step, step * 0.5))});
  }
  probe::LogReader reader(path);
  EXPECT_EQ(reader.header().setup, "unit test");
  for (int step = 0; step < 3; ++step) {
    auto r = reader.next();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->step, step);
    EXPECT_EQ(r->value, step * 0.5);
  }
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.truncated());
}

TEST(LogIo, UnwritableDirectoryIsAnErrorNamingThePath) {
  auto blocker = fresh_dir("blocked");
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
    writer.write_step({lf::format_record(scalar(0, 1.0))});
    writer.write_step({lf::format_record(scalar(1, 2.0))});
    ::raise(SIGKILL);  // no destructor, no exit handlers
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  probe::LogReader reader(path);
  int steps = 0;
  while (auto r = reader.next()) EXPECT_EQ(r->step, steps++);
  EXPECT_EQ(steps, 2);
}

TEST(LogIo, TruncatedLastLineIsReportedAndSkipped) {
  auto path = fresh_dir("truncated") / "diff.log";
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << lf::format_header(lf::Header{}) << "\n"
                      << lf::format_record(scalar(0, 1.0)) << "\n"
                      << "step=1 kind=scalar na";
  probe::LogReader reader(path);
  EXPECT_TRUE(reader.next());
  EXPECT_FALSE(reader.next());
  EXPECT_TRUE(reader.truncated());
}

TEST(LogIo, GarbageLineErrorNamesFileAndLineAndReadingContinues) {
  auto path = fresh_dir("garbage") / "diff.log";
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << lf::format_header(lf::Header{}) << "\n"
                      << "this is not a record\n"
                      << lf::format_record(scalar(0, 1.0)) << "\n";
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
}

TEST(LogIo, MissingHeaderIsAnError) {
  auto path = fresh_dir("noheader") / "diff.log";
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << lf::format_record(scalar(0, 1.0)) << "\n";
  EXPECT_THROW(probe::LogReader reader(path), lf::ParseError);
  EXPECT_THROW(probe::LogReader reader(path.parent_path() / "absent.log"), std::runtime_error);
}
