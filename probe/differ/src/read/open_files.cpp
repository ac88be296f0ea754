// The process's open-file limit: a run of thousands of ranks holds one log per rank open.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>

#include "differ/options.h"

namespace probe::differ {

std::uint64_t raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max()
                                       : static_cast<std::uint64_t>(lim.rlim_cur);
}

int default_max_open_files() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<int>::max();
  // Descriptors in use now (stdio, a --json file, ...), counted where the system lists them.
  std::int64_t in_use = 16;
  std::error_code ec;
  std::filesystem::directory_iterator fds("/proc/self/fd", ec);
  if (!ec) {
    in_use = 0;
    for (auto it = fds; it != std::filesystem::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      ++in_use;
    }
  }
  constexpr std::int64_t kReserve = 32;  // the other run's transient opens, the --json file
  const std::int64_t free =
      static_cast<std::int64_t>(std::min<rlim_t>(lim.rlim_cur, 1 << 30)) - in_use - kReserve;
  return static_cast<int>(std::max<std::int64_t>(free / 2, 2));
}

}  // namespace probe::differ
