#include "runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace probe::bisect {
namespace {

volatile sig_atomic_t g_interrupted = 0;

void on_signal(int) { g_interrupted = 1; }

// In the child, before exec: its own process group, the log as stdout and stderr, the
// environment as asked.
[[noreturn]] void exec_child(const std::string& command, const std::map<std::string, std::string>& set,
                             const std::vector<std::string>& unset, const std::string& log) {
  setpgid(0, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(126);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  for (const auto& name : unset) unsetenv(name.c_str());
  for (const auto& [name, value] : set) setenv(name.c_str(), value.c_str(), 1);
  execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

// The whole group: SIGTERM, then SIGKILL after a grace period.
void stop_group(pid_t pid, int& status) {
  kill(-pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      kill(-pid, SIGKILL);  // ranks the launcher left behind
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
}

}  // namespace

void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_interrupted != 0; }

RunOutcome run_command(const std::string& command, const std::map<std::string, std::string>& set,
                       const std::vector<std::string>& unset, const std::string& log) {
  const auto start = std::chrono::steady_clock::now();
  RunOutcome out;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("cannot start a run: fork failed");
  if (pid == 0) exec_child(command, set, unset, log);
  setpgid(pid, pid);  // also here: no race with a signal sent before the child's own call
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (interrupted()) {
      stop_group(pid, status);
      out.interrupted = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return out;
}

}  // namespace probe::bisect
