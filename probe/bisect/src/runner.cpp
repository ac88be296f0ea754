#include "runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>

namespace probe::bisect {
namespace {

volatile sig_atomic_t g_interrupts = 0;

void on_signal(int) { g_interrupts = g_interrupts + 1; }

// How long a stopped run may take to end on SIGTERM (torchrun gives its workers ~30 s) before
// SIGKILL; a second Ctrl-C does not wait.
constexpr auto kGrace = std::chrono::seconds(40);

// In the child, before exec: its own process group, no terminal input, the log as stdout and
// stderr, the environment as asked.
[[noreturn]] void exec_child(const std::string& command,
                             const std::map<std::string, std::string>& set,
                             const std::vector<std::string>& unset, int log_fd) {
  setpgid(0, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  for (const auto& name : unset) unsetenv(name.c_str());
  for (const auto& [name, value] : set) setenv(name.c_str(), value.c_str(), 1);
  execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

// The processes whose parent is this one: a run's ranks orphaned by their launcher come back
// here (this process is their subreaper), torchrun's workers included (it starts them with
// setsid, outside the run's process group).
std::vector<pid_t> children() {
  std::vector<pid_t> pids;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (!proc) return pids;
  while (const dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
      pids.push_back(pid);
  }
  closedir(proc);
  return pids;
}

// Waits while `busy` holds, for the grace period at most, or until another Ctrl-C; whether it
// still holds.
bool still_busy_after_grace(const std::function<bool()>& busy) {
  const auto until = std::chrono::steady_clock::now() + kGrace;
  const sig_atomic_t interrupts = g_interrupts;
  while (busy()) {
    if (std::chrono::steady_clock::now() > until || g_interrupts != interrupts) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

void reap_all() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Whatever is left of a run: its process group and the orphans that came back here, SIGTERM
// then, after the grace period (or a second Ctrl-C), SIGKILL.
void sweep(pid_t group) {
  const auto alive = [&] {
    reap_all();
    return kill(-group, 0) == 0 || !children().empty();
  };
  if (!alive()) return;
  kill(-group, SIGTERM);
  for (pid_t p : children()) kill(p, SIGTERM);
  still_busy_after_grace(alive);
  kill(-group, SIGKILL);
  for (pid_t p : children()) kill(p, SIGKILL);
  reap_all();
}

}  // namespace

void catch_interrupts() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

bool interrupted() { return g_interrupts != 0; }

RunOutcome run_command(const std::string& command, const std::map<std::string, std::string>& set,
                       const std::vector<std::string>& unset, const std::string& log) {
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0)
    throw std::runtime_error("cannot write the run's log " + log + ": " + std::strerror(errno));
  const auto start = std::chrono::steady_clock::now();
  RunOutcome out;
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    throw std::runtime_error("cannot start a run: fork failed");
  }
  if (pid == 0) exec_child(command, set, unset, log_fd);
  close(log_fd);
  setpgid(pid, pid);  // also here: no race with a signal sent before the child's own call
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (interrupted()) {
      out.interrupted = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (out.interrupted) {
    kill(-pid, SIGTERM);  // the launcher first: torchrun stops its workers on SIGTERM
    if (still_busy_after_grace([&] { return waitpid(pid, &status, WNOHANG) != pid; })) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  sweep(pid);  // ranks left behind, in the group or orphaned
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return out;
}

}  // namespace probe::bisect
