#include "probe/scope.h"

#include <ATen/record_function.h>

#include <stdexcept>
#include <string>

#include "op_trace.h"

namespace probe {

// The profiler user scope: RecordFunction cannot move, so it lives behind a pointer, made only
// when some RecordFunction callback (a profiler) is registered.
struct Scope::Profiled {
  at::RecordFunction function{at::RecordScope::USER_SCOPE};
};

Scope::Scope(std::string_view name) : Scope(name, Split{}) {}

Scope::Scope(std::string_view name, Split split) {
  if (split.size < 1 || split.rank < 0 || split.rank >= split.size)
    throw std::invalid_argument("numprobe: Scope '" + std::string(name) + "': split rank " +
                                std::to_string(split.rank) + " of " + std::to_string(split.size) +
                                " (needs 0 <= rank < size)");
  const auto& frames = detail::scope_frames();
  std::string joined;
  if (!frames.empty() && !frames.back().root) {
    joined.reserve(frames.back().name.size() + 1 + name.size());
    joined += frames.back().name;
    joined += '.';
  }
  joined += name;
  // Inside a split scope, split alike unless declared otherwise.
  if (!split.split() && !frames.empty()) split = frames.back().split;
  open(std::move(joined), false, split);
}

Scope::Scope(Root, std::string_view name) { open(std::string(name), true, Split{}); }

void Scope::open(std::string name, bool root, Split split) {
  frame_ = detail::scope_frames().size();
  detail::scope_frames().push_back({std::move(name), root, false, split});
  detail::scope_entered();
  if (at::hasCallbacks()) {
    profiled_ = std::make_unique<Profiled>();
    if (profiled_->function.isActive())
      profiled_->function.before(detail::scope_frames().back().name.c_str());
    else profiled_.reset();
  }
}

Scope::~Scope() {
  profiled_.reset();  // ends the profiler scope
  detail::scope_left();
  detail::scope_frames().pop_back();
}

const std::string& Scope::name() const { return detail::scope_frames()[frame_].name; }

const std::string& current_scope() {
  static const std::string outside;
  const auto& frames = detail::scope_frames();
  return frames.empty() ? outside : frames.back().name;
}

}  // namespace probe
