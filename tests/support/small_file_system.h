// A directory whose files cannot grow past a few KiB, for tests of a log on a full disk: a tmpfs
// of that size where this process may mount one (root with CAP_SYS_ADMIN), else a file-size
// limit (RLIMIT_FSIZE, with SIGXFSZ ignored) on the whole process while it lives. Tests run
// their body once per kind this machine offers (kinds()).
#pragma once

#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace test_support {

class SmallFileSystem {
 public:
  enum class Kind { tmpfs, file_size_limit };

  // The kinds to test here: tmpfs when a mount succeeds, and the limit always (what CI without
  // mount rights gets).
  static std::vector<Kind> kinds() {
    std::vector<Kind> out;
    if (can_mount()) out.push_back(Kind::tmpfs);
    out.push_back(Kind::file_size_limit);
    return out;
  }
  static const char* name(Kind kind) { return kind == Kind::tmpfs ? "tmpfs" : "RLIMIT_FSIZE"; }

  SmallFileSystem(const std::string& name, Kind kind, std::int64_t bytes) : kind_(kind) {
    dir_ = std::filesystem::temp_directory_path() /
           ("numprobe_small_fs_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    if (kind == Kind::tmpfs) {
      const std::string options = "size=" + std::to_string(bytes);
      mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) == 0;
    } else {
      rlimit limit{};
      ::getrlimit(RLIMIT_FSIZE, &limit);
      saved_limit_ = limit;
      limit.rlim_cur = static_cast<rlim_t>(bytes);
      ::setrlimit(RLIMIT_FSIZE, &limit);
      saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    }
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    if (saved_limit_) {
      ::setrlimit(RLIMIT_FSIZE, &*saved_limit_);
      std::signal(SIGXFSZ, saved_handler_);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  // False when the tmpfs could not be mounted after all.
  bool ready() const { return kind_ == Kind::file_size_limit || mounted_; }
  // What a write that no longer fits fails with.
  std::string expected_reason() const {
    return kind_ == Kind::tmpfs ? "No space left on device" : "file size limit";
  }

 private:
  static bool can_mount() {
    static const bool ok = [] {
      const auto probe_dir = std::filesystem::temp_directory_path() /
                             ("numprobe_mount_check_" + std::to_string(::getpid()));
      std::filesystem::create_directories(probe_dir);
      const bool mounted = ::mount("tmpfs", probe_dir.c_str(), "tmpfs", 0, "size=4096") == 0;
      if (mounted) ::umount2(probe_dir.c_str(), MNT_DETACH);
      std::filesystem::remove(probe_dir);
      return mounted;
    }();
    return ok;
  }

  Kind kind_;
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::optional<rlimit> saved_limit_;
  void (*saved_handler_)(int) = SIG_DFL;
};

}  // namespace test_support
