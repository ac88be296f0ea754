// An op dump (docs/log-format.md, "Op dumps") read back: the op's schema, its arguments as
// they were when it started and its outputs.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace probe::replay {

struct DumpedOp {
  std::string file;
  std::string schema;             // "" where the op had none
  std::string name;               // the record's name
  std::vector<c10::IValue> args;  // lists as tuples
  std::vector<c10::IValue> outputs;
};

// Throws std::runtime_error naming the file where it cannot be read or is no op dump.
DumpedOp load_dump(const std::string& file);

// Every tensor in `v`, tuples and lists flattened in order, an undefined tensor (dumped as
// "<undefined>") as an undefined at::Tensor: the op record's inputs (Record::inputs) are the
// hashes of its arguments' tensors in this order.
void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out);
bool is_undefined_tensor(const c10::IValue& v);

}  // namespace probe::replay
