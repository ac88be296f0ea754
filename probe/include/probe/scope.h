// probe::Scope: names the ops run inside it, for op traces (docs/log-format.md, "Op records").
//
//   probe::Scope scope("layers.3");      // ops here: layers.3/<op>#<k>
//   { probe::Scope inner("attention"); } // ops here: layers.3.attention/<op>#<k>
//
// Scopes nest per thread and join with '.'. Each also opens a profiler user scope of its joined
// name (RECORD_USER_SCOPE), so profiler traces show the same names. Without an op trace a scope
// costs one string join and one atomic load.
//
// A scope split over ranks (tensor parallelism: each rank computes some heads, or some tokens)
// says so, and so do the scopes inside it and the backward of its ops:
//
//   probe::Scope scope("layers.3", probe::Split{tp_rank, tp_size});
//
// Its op records then carry the hashes their outputs and inputs would have as shards of the
// whole cut along each dim (docs/log-format.md, "Split scopes"), so that the differ composes
// them across the ranks and aligns them with the ops of a run that computes the whole.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace probe {

// This rank's place among the ranks a scope's computation is split over; size 1: not split.
struct Split {
  int rank = 0;
  int size = 1;
  bool split() const { return size > 1; }
};

class Scope {
 public:
  explicit Scope(std::string_view name);
  // Split over `split.size` ranks (size 1: as its enclosing scope is). Throws
  // std::invalid_argument unless 0 <= rank < size.
  Scope(std::string_view name, Split split);
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
  void open(std::string name, bool root, Split split);
  struct Profiled;
  std::unique_ptr<Profiled> profiled_;
  std::size_t frame_ = 0;  // its place in this thread's scope stack
};

// The joined name of the innermost scope open on this thread; "" outside every scope.
const std::string& current_scope();

}  // namespace probe
