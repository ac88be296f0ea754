// Calling a dumped op again through the dispatcher, by its schema, with its tensors replaced as
// the replay asks (upcast to float64, or values other ops of the region computed).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <vector>

namespace probe::replay {

// What happens to each tensor argument (its index among the op's tensors, flatten_tensors'
// order) and to dtype arguments.
struct ArgPolicy {
  std::function<at::Tensor(std::size_t index, const at::Tensor& dumped)> tensor;
  bool float64 = false;  // a floating dtype argument (softmax's dtype=, to's dtype) becomes float64
  bool abs_scalars = false;  // Scalar arguments by their magnitude (the op on |inputs|)
};

// The parsed schema; throws std::runtime_error naming the op where the text does not parse.
c10::FunctionSchema parse_schema(const std::string& text);

// Why the op cannot be replayed ("" where it can): no schema, a random op.
std::string not_replayable_reason(const std::string& schema_text,
                                  const c10::FunctionSchema* schema);

// The op's outputs for `args` (as dumped) under `policy`; `name` (e.g. "aten::add" where the op
// is replayed as another) overrides the schema's op. Throws std::runtime_error with the op's name
// and the dispatcher's message.
std::vector<c10::IValue> call_op(const c10::FunctionSchema& schema,
                                 const std::vector<c10::IValue>& args, const ArgPolicy& policy,
                                 const std::string& name = {});

// The op's output `index` as a tensor (undefined where it is none).
at::Tensor output_tensor(const std::vector<c10::IValue>& outputs, std::size_t index);

}  // namespace probe::replay
