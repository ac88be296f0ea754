// One training run of numprobe_bisect: a shell command in its own process group, its output in
// a log file, stopped with its children on Ctrl-C.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace probe::bisect {

struct RunOutcome {
  int exit_code = 0;  // the shell's; 128 + N where a signal N ended it
  double seconds = 0;
  bool interrupted = false;  // Ctrl-C (or SIGTERM) stopped it
};

// SIGINT and SIGTERM, from now on, mark the tool interrupted instead of ending it: the run under
// way is stopped (its process group: the launcher and every rank) and the caller reports.
void catch_interrupts();
bool interrupted();

// Runs `/bin/sh -c command` with `set` added to the environment and `unset` removed from it,
// stdout and stderr into `log`; waits, or stops it on an interrupt.
RunOutcome run_command(const std::string& command, const std::map<std::string, std::string>& set,
                       const std::vector<std::string>& unset, const std::string& log);

}  // namespace probe::bisect
