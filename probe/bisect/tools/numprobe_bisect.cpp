// numprobe_bisect: from two parallel setups to the degree change that brings an unexplained
// divergence in, and on to its root-cause op (docs/bisect.md). Exit status as diff_logs': 0 the
// setups agree bitwise, 4 noise only, 1 a culprit found, 2 bad input, 3 the base or test run
// failed; 130 interrupted.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <string>

#include "configs.h"
#include "runner.h"
#include "session.h"

namespace bisect = probe::bisect;
namespace fs = std::filesystem;

namespace {

struct Cli {
  std::string launch, world, base, test, out = "out/bisect", json;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "numprobe_bisect: from two parallel setups to the degree change that brings an unexplained "
      "divergence in, and its root-cause op"};
  Cli c;
  app.add_option("--launch", c.launch,
                 "the run's shell command: {NAME} a degree's value, {out} the run's directory, "
                 "{world} the product of --world's degrees")
      ->required();
  app.add_option("--world", c.world, "the degrees whose product is the world size (e.g. dp,tp,pp)");
  app.add_option("--base", c.base, "the base configuration: name=integer pairs (dp=4,tp=1,pp=1)")
      ->required();
  app.add_option("--test", c.test, "the test configuration, naming the same degrees")->required();
  app.add_option("--out", c.out, "where the runs, their logs and the report go")
      ->capture_default_str();
  app.add_option("--json", c.json, "also write the answer as JSON (schema numprobe.bisect/1)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // --help; bad usage is 2, as diff_logs'
  }
  try {
    bisect::Launch launch{c.launch, bisect::parse_world(c.world)};
    const bisect::Config base = bisect::parse_config(c.base, "--base"),
                         test = bisect::parse_config(c.test, "--test");
    bisect::check(launch, base, test);
    fs::create_directories(c.out);
    bisect::catch_interrupts();
    return bisect::Session({c.out, c.json}, launch, base, test).run();
  } catch (const bisect::BadInput& e) {
    std::cerr << "numprobe_bisect: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "numprobe_bisect: " << e.what() << "\n";
    return 2;
  }
}
