// Run directories agreed by the ranks of a launch (run_dir.h).
#include "run_dir.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "environment.h"

namespace probe {
namespace {

// Identifies one launch, the same on every local rank: torchrun's run id and the agent's pid
// (every worker's parent), or this process alone without torchrun.
std::string launch_id() {
  if (const char* id = env("PROBE_RUN_ID")) return id;
  if (const char* run = env("TORCHELASTIC_RUN_ID")) {
    const char* restart = env("TORCHELASTIC_RESTART_COUNT");
    return std::string(run) + ":" + std::to_string(::getppid()) + ":" + (restart ? restart : "0");
  }
  return "pid:" + std::to_string(::getpid());
}

}  // namespace

// The next free <root>/<N>, agreed by all ranks of a launch without communication: mkdir is
// atomic, so the rank that creates N stamps it with the launch id and the others, finding N
// taken, adopt it if the stamp is theirs and move on otherwise.
std::filesystem::path next_free_run_dir(const std::filesystem::path& root) {
  const std::string id = launch_id();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec)
    throw std::runtime_error("numprobe: cannot create '" + root.string() + "': " + ec.message());
  for (int n = 0;; ++n) {
    const auto dir = root / std::to_string(n);
    const auto stamp = dir / ".launch";
    if (std::filesystem::create_directory(dir, ec)) {
      const auto tmp = dir / (".launch.tmp" + std::to_string(::getpid()));
      std::ofstream(tmp) << id;
      std::filesystem::rename(tmp, stamp);
      return dir;
    }
    if (ec)
      throw std::runtime_error("numprobe: cannot create '" + dir.string() + "': " + ec.message());
    // Taken: wait briefly for its creator's stamp (it writes it right after mkdir), unless the
    // directory is old: one made by hand or by another tool would cost every launch 2 s.
    std::string owner;
    const auto age =
        std::filesystem::file_time_type::clock::now() - std::filesystem::last_write_time(dir, ec);
    const bool recent = !ec && age < std::chrono::minutes(1);
    for (int tries = 0; recent && tries < 200 && !std::filesystem::exists(stamp); ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream stamp_in(stamp);
    std::getline(stamp_in, owner);  // the whole id: PROBE_RUN_ID may hold spaces
    if (owner == id) return dir;
  }
}

}  // namespace probe
