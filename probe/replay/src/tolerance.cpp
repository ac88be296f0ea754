#include "tolerance.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <unordered_map>

#include "op_call.h"
#include "probe/dtype_facts.h"
#include "probe/tensor_stats.h"

namespace probe::replay {
namespace {

// The implementation's own error of an elementwise function, in units of u: SLEEF's vectorized
// functions, which ATen's CPU kernels call, are accurate to 1 or 3.5 ulp (an ulp is up to 2u),
// plus the rounding of the function's argument and result.
constexpr double kElementwiseUnits = 8;
// Replays on perturbed inputs: the relative perturbation (far above float64's rounding, far
// below any float32 effect), the number of random sign patterns, and the margin on what they
// show (random signs underestimate the worst case).
constexpr double kPerturbation = 1.0 / (1u << 30);
constexpr int kPerturbTrials = 4;
constexpr double kPerturbMargin = 2;

// Ops that are not in the table are estimated, among them those whose kernels cancel inside
// (gelu's 1 + erf(x / sqrt 2) for x << 0, hardswish's x + 3, logit near 1/2, lerp, addcmul,
// addcdiv) and those that sum into their output (index_put with accumulate, scatter with reduce).
const std::unordered_map<std::string, Family>& families() {
  static const std::unordered_map<std::string, Family> table = [] {
    std::unordered_map<std::string, Family> t;
    for (const char* n : {"view",
                          "reshape",
                          "_reshape_alias",
                          "_unsafe_view",
                          "permute",
                          "transpose",
                          "t",
                          "expand",
                          "expand_as",
                          "slice",
                          "select",
                          "narrow",
                          "index",
                          "index_select",
                          "gather",
                          "embedding",
                          "take",
                          "take_along_dim",
                          "cat",
                          "stack",
                          "split",
                          "split_with_sizes",
                          "chunk",
                          "unbind",
                          "unsqueeze",
                          "squeeze",
                          "flatten",
                          "unflatten",
                          "contiguous",
                          "clone",
                          "copy",
                          "detach",
                          "alias",
                          "view_as",
                          "reshape_as",
                          "repeat",
                          "roll",
                          "flip",
                          "masked_select",
                          "neg",
                          "abs",
                          "relu",
                          "max",
                          "min",
                          "amax",
                          "amin",
                          "maximum",
                          "minimum",
                          "topk",
                          "sort",
                          "argmax",
                          "argmin",
                          "zeros_like",
                          "ones_like",
                          "empty_like",
                          "zero",
                          "triu",
                          "tril",
                          "eq",
                          "ne",
                          "lt",
                          "le",
                          "gt",
                          "ge",
                          "lift_fresh",
                          "sign",
                          "movedim",
                          "as_strided",
                          "diagonal",
                          "unfold",
                          "floor_divide",
                          "floor",
                          "ceil",
                          "round",
                          "trunc"})
      t[n] = Family::exact;
    for (const char* n : {"to", "_to_copy", "type_as", "_autocast_to_reduced_precision",
                          "_autocast_to_full_precision"})
      t[n] = Family::cast;
    // A scalar operand (a clamp's bound, a fill value) rounds into the dtype as a result does.
    for (const char* n :
         {"mul", "div", "true_divide", "reciprocal", "square", "clamp", "clamp_min", "clamp_max",
          "masked_fill", "fill", "full_like", "where", "constant_pad_nd"})
      t[n] = Family::rounding;
    for (const char* n : {"add", "sub"}) t[n] = Family::add;
    for (const char* n :
         {"exp",   "exp2",  "expm1",       "log",        "log2",     "log10", "log1p",
          "sqrt",  "rsqrt", "tanh",        "sigmoid",    "silu",     "gelu",  "erf",
          "erfc",  "sin",   "cos",         "tan",        "asin",     "acos",  "atan",
          "atan2", "sinh",  "cosh",        "pow",        "softplus", "mish",  "elu",
          "selu",  "celu",  "log_sigmoid", "leaky_relu", "hypot"})
      t[n] = Family::elementwise;
    for (const char* n : {"sum", "mean", "nansum", "matmul", "mm", "bmm", "addmm", "addbmm",
                          "baddbmm", "linear", "dot", "vdot", "mv", "addmv", "cumsum"})
      t[n] = Family::reduction;
    for (const char* n : {"softmax", "_softmax", "log_softmax", "_log_softmax", "special_softmax"})
      t[n] = Family::softmax;
    return t;
  }();
  return table;
}

std::string base_name(const std::string& op_name) {
  std::string n =
      op_name.substr(op_name.find("::") == std::string::npos ? 0 : op_name.find("::") + 2);
  if (n.size() > 1 && n.back() == '_') n.pop_back();  // the in-place form rounds as the other
  return n;
}

std::int64_t wrap_dim(std::int64_t dim, std::int64_t rank) {
  return dim < 0 ? dim + std::max<std::int64_t>(rank, 1) : dim;
}

// The op on the magnitudes of its tensors and scalars: for a sum or a product of sums (a
// matmul), sum |terms|, what its rounding error is proportional to.
at::Tensor on_magnitudes(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                         const std::vector<at::Tensor>& inputs, std::size_t output_index) {
  ArgPolicy policy;
  policy.tensor = [&](std::size_t i, const at::Tensor&) {
    return inputs[i].defined() ? inputs[i].abs() : inputs[i];
  };
  policy.abs_scalars = true;
  policy.float64 = true;
  // a - alpha * b rounds like a + alpha * b.
  const std::string name =
      base_name(schema.name()) == "sub" ? std::string("aten::add") : std::string();
  return output_tensor(call_op(schema, args, policy, name), output_index).abs();
}

// Terms summed per output element.
std::int64_t reduction_length(const std::string& op, const std::vector<c10::IValue>& args,
                              const std::vector<at::Tensor>& inputs, const at::Tensor& output) {
  const auto last = [](const at::Tensor& t) { return t.dim() == 0 ? std::int64_t{1} : t.size(-1); };
  if (op == "sum" || op == "mean" || op == "nansum")
    return std::max<std::int64_t>(1,
                                  inputs[0].numel() / std::max<std::int64_t>(1, output.numel())) +
           (op == "mean");
  if (op == "cumsum")
    return inputs[0].dim() == 0 ? 1 : inputs[0].size(wrap_dim(args[1].toInt(), inputs[0].dim()));
  // bias, alpha, beta
  if (op == "addmm" || op == "baddbmm" || op == "addmv") return last(inputs[1]) + 2;
  if (op == "addbmm") return inputs[1].size(0) * last(inputs[1]) + 2;
  if (op == "linear") return last(inputs[0]) + (inputs.size() > 2 && inputs[2].defined());
  return last(inputs[0]);  // matmul, mm, bmm, dot, vdot, mv
}

// softmax: y_i = e^(x_i - m) / sum_j e^(x_j - m). x_i - m rounds by u|x_i - m|, which the exp turns
// into a relative error |x_i - m| u; each exp adds ~2u; the sum of n positive terms adds at most
// n u relative, and its terms' own errors weighted by their share w_j = y_j; the division u.
// log_softmax: (x_i - m) - log(sum): the same terms, absolute, plus log's and the subtraction's
// rounding of |log sum| and |y_i|.
at::Tensor softmax_bound(const std::string& op, const std::vector<c10::IValue>& args,
                         const at::Tensor& x, const at::Tensor& y) {
  const std::int64_t dim = wrap_dim(args[1].toInt(), x.dim());
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const at::Tensor m = x.amax(dim, /*keepdim=*/true);
  const at::Tensor z = x - m;
  // Masked entries (-inf) have no error: e^-inf is 0 exactly.
  const at::Tensor a = at::where(at::isfinite(z), z.abs(), at::zeros_like(z));
  const at::Tensor w = at::softmax(x, dim);
  const at::Tensor spread = (at::nan_to_num(w) * a).sum(dim, /*keepdim=*/true);
  const at::Tensor terms = a + spread + static_cast<double>(n + 6);
  if (op == "softmax" || op == "_softmax" || op == "special_softmax")
    return at::nan_to_num(y.abs()) * terms;
  const at::Tensor lse =
      at::where(at::isfinite(z), z.exp(), at::zeros_like(z)).sum(dim, true).log().abs();
  return at::where(at::isfinite(y), terms + lse + y.abs(), at::zeros_like(y));
}

// An op with no derived bound: its output's change when every floating input moves by a relative
// kPerturbation in random directions, as a multiple of that relative change (the op's
// condition), applied to one rounding of each input, plus kElementwiseUnits for its own.
at::Tensor estimated_bound(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                           const std::vector<at::Tensor>& inputs, const at::Tensor& output,
                           std::size_t output_index) {
  // A generator of its own: the replay draws nothing from the default one.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0x6e756d70726f6265ull);
  at::Tensor spread = at::zeros_like(output);
  for (int trial = 0; trial < kPerturbTrials; ++trial) {
    ArgPolicy policy;
    policy.float64 = true;
    policy.tensor = [&](std::size_t i, const at::Tensor&) {
      const at::Tensor& x = inputs[i];
      if (!x.defined() || !x.is_floating_point()) return x;
      return x * (1 + kPerturbation * random_signs(x, gen));
    };
    const at::Tensor moved = output_tensor(call_op(schema, args, policy), output_index);
    spread = at::maximum(spread, at::nan_to_num((moved - output).abs() / kPerturbation));
  }
  return kElementwiseUnits * output.abs() + kPerturbMargin * spread;
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::exact: return "exact";
    case Family::cast: return "cast";
    case Family::rounding: return "rounding";
    case Family::add: return "add";
    case Family::elementwise: return "elementwise";
    case Family::reduction: return "reduction";
    case Family::softmax: return "softmax";
    case Family::estimated: return "estimated";
  }
  return "?";
}

Family family_of(const std::string& op_name) {
  const auto& t = families();
  const auto it = t.find(base_name(op_name));
  return it == t.end() ? Family::estimated : it->second;
}

at::Tensor own_bound(Family family, const c10::FunctionSchema& schema,
                     const std::vector<c10::IValue>& args, const std::vector<at::Tensor>& inputs,
                     const at::Tensor& output, std::size_t output_index) {
  const std::string op = base_name(schema.name());
  // Indices, masks, counts: no rounding (and nothing to move in a propagation).
  if (!output.is_floating_point() || output.numel() == 0)
    return at::zeros_like(output, output.options().dtype(at::kDouble));
  switch (family) {
    case Family::exact:
    case Family::cast: return at::zeros_like(output);
    case Family::rounding:
      // One rounding, or two where a division by a scalar multiplies by its rounded reciprocal.
      return 2 * output.abs();
    case Family::add: return 2 * on_magnitudes(schema, args, inputs, output_index);
    case Family::elementwise: return kElementwiseUnits * output.abs();
    case Family::reduction:
      // Recursive summation of n terms errs by at most gamma_n sum|terms| ~ n u sum|terms|
      // (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.5 and 4.4);
      // pairwise and blocked orders err less. +2: the result's rounding and a scaling.
      return static_cast<double>(reduction_length(op, args, inputs, output) + 2) *
             on_magnitudes(schema, args, inputs, output_index);
    case Family::softmax: return softmax_bound(op, args, inputs[0], output);
    case Family::estimated: return estimated_bound(schema, args, inputs, output, output_index);
  }
  return at::zeros_like(output);
}

at::Tensor random_signs(const at::Tensor& like, at::Generator& gen) {
  return at::empty_like(like).bernoulli_(0.5, gen).mul_(2).sub_(1);
}

double unit_roundoff(c10::ScalarType dtype) {
  return probe::unit_roundoff(probe::dtype_name(dtype));
}

}  // namespace probe::replay
