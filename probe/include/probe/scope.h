// probe::Scope: names the ops run inside it, for op traces (docs/log-format.md, "Op records").
//
//   probe::Scope scope("layers.3");      // ops here: layers.3/<op>#<k>
//   { probe::Scope inner("attention"); } // ops here: layers.3.attention/<op>#<k>
//
// Scopes nest per thread and join with '.'. Each also opens a profiler user scope of its joined
// name (RECORD_USER_SCOPE), so profiler traces show the same names. Without an op trace a scope
// costs one string join and one atomic load.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace probe {

class Scope {
 public:
  explicit Scope(std::string_view name);
  // A root scope: ops directly inside are named after it, but scopes opened inside do not join
  // its name (Probe::forward opens one named after the forward, so the module scopes the model
  // opens read the same with or without it).
  struct Root {};
  Scope(Root, std::string_view name);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  const std::string& name() const;  // the joined name

 private:
  void open(std::string name, bool root);
  struct Profiled;
  std::unique_ptr<Profiled> profiled_;
  std::size_t frame_ = 0;  // its place in this thread's scope stack
};

// The joined name of the innermost scope open on this thread; "" outside every scope.
const std::string& current_scope();

}  // namespace probe
