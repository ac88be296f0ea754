// Op dumps (docs/log-format.md, "Op dumps"): a traced op's schema, argument stack and outputs as
// the bytes of a .pt file that torch.load opens with its defaults (weights_only=True) and
// torch::pickle_load reads. Private to the library: the op trace calls it when its setting
// says dump=1.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace at {
struct RecordFunction;
}

namespace probe::detail {

// The op's schema as text (`aten::softmax.int(Tensor self, int dim, ...) -> Tensor`), "" where
// it has none.
std::string schema_of(const at::RecordFunction& fn);

// `v` as a dump holds it: a tensor detached and copied to the host (its values now, whatever
// an in-place op writes later; an undefined one kUndefinedTensor), a list (of ints, floats, bools,
// tensors) as a tuple (torch.load refuses c10::List and c10::Dict), a generator as the string
// "<generator>" (no replay draws from it); numbers, strings, None as they are.
c10::IValue dumpable(const c10::IValue& v);
inline constexpr const char* kUndefinedTensor = "<undefined>";  // an undefined tensor's place

// The pickled tuple (schema, record name, arguments, outputs); `schema` is "" where the op has
// none (a backward node's own call).
std::vector<char> dump_bytes(const std::string& schema, const std::string& name,
                             std::vector<c10::IValue> arguments,
                             const std::vector<c10::IValue>& outputs);

// A rank's dumps: <rank dir>/dumps/step<S>/<n>.pt, n counting the rank's dumps. Writing stops
// for good, with one message on stderr, at the first dump that would take the rank's dumps past
// `cap_bytes` or that fails (no room, a type torch cannot pickle): the log and training go on.
class DumpWriter {
 public:
  DumpWriter(std::filesystem::path rank_dir, std::int64_t cap_bytes);
  // The dump's path relative to the rank's directory, or "" where it was not written.
  std::string save(std::int64_t step, const std::function<std::vector<char>()>& bytes);
  bool open() const { return !stopped_.load(std::memory_order_relaxed); }

 private:
  void stop(const std::string& why);
  std::filesystem::path rank_dir_;
  std::int64_t cap_bytes_;
  std::mutex mutex_;  // backward ops run on autograd's threads
  std::int64_t written_ = 0;
  std::int64_t count_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace probe::detail
