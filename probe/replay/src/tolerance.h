// How far a correct kernel's output may lie from the float64 reference (docs/diff-logs.md,
// "Replay verdict", where each family's bound is derived). A bound is per output element and
// unit-free: a multiple of the unit roundoff u of the dtype the output is judged in (float32:
// 2^-24), so that u * bound is the largest correct |output - reference|.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace probe::replay {

enum class Family {
  exact,        // data movement, selection, sign and order: no rounding (index, gather, cat, view)
  cast,         // a cast between floating dtypes: the identity in the reference
  rounding,     // one correctly rounded operation per element (mul, div)
  add,          // a + alpha * b: two roundings, of the magnitudes |a| + |alpha b|
  elementwise,  // a function of each element (exp, rsqrt, tanh, silu, pow): a few ulp
  reduction,    // sums and dot products (sum, mean, matmul, linear, addmm): grows with their length
  softmax,      // softmax, log_softmax along a dim
  estimated,    // any other op: estimated from replays on perturbed inputs
};
const char* family_name(Family f);
Family family_of(const std::string& op_name);  // "aten::softmax" -> softmax

// One op's own bound at its float64 inputs (`args` as dumped, `inputs` the float64 tensors the
// replay gave it, in flatten_tensors' order) and float64 output `output_index`; zeros for an
// output that is not floating (indices, masks).
at::Tensor own_bound(Family family, const c10::FunctionSchema& schema,
                     const std::vector<c10::IValue>& args, const std::vector<at::Tensor>& inputs,
                     const at::Tensor& output, std::size_t output_index);

// +1 or -1 per element of `like`, drawn from `gen` (the replay's own generator, never the default).
at::Tensor random_signs(const at::Tensor& like, at::Generator& gen);

// The unit roundoff of a floating dtype (2^-p, p its significand's bits); 0 for the others.
double unit_roundoff(c10::ScalarType dtype);

}  // namespace probe::replay
