#include "region_replay.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <c10/core/DefaultDtype.h>

#include <cstring>
#include <unordered_map>

#include "op_call.h"

namespace probe::replay {
namespace {

// An op's output perturbed to see how its error reaches the region's output (replay_run): the
// relative size, the sign patterns tried (all +, all -, then random) and the margin on the
// largest effect seen.
constexpr double kPropagation = 1.0 / (1u << 30);
constexpr int kPropagationTrials = 4;
constexpr double kPropagationMargin = 2;

enum class Mode { float64, recorded };

// Float64 as the default dtype while a reference is computed: an op that makes a floating tensor
// from integers (true division, a creation op without a dtype) makes it in float64 too.
class DefaultDtype {
 public:
  explicit DefaultDtype(bool float64) : saved_(c10::get_default_dtype()) {
    if (float64) c10::set_default_dtype(caffe2::TypeMeta::Make<double>());
  }
  ~DefaultDtype() { c10::set_default_dtype(saved_); }
  DefaultDtype(const DefaultDtype&) = delete;
  DefaultDtype& operator=(const DefaultDtype&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

struct Chain {
  const RunRegion& region;
  Mode mode;
  // Replace op `override_op`'s output by `override_value` (a perturbed one).
  std::optional<std::size_t> override_op;
  at::Tensor override_value;
  // Filled when asked: each op's output and own bound (float64 mode).
  std::vector<at::Tensor>* outputs = nullptr;
  std::vector<at::Tensor>* bounds = nullptr;

  at::Tensor run() const {
    const DefaultDtype dtype(mode == Mode::float64);
    std::unordered_map<std::uint64_t, at::Tensor> values;
    for (std::size_t k = 0; k < region.ops.size(); ++k) {
      const RegionOp& op = region.ops[k];
      std::vector<at::Tensor> given;
      ArgPolicy policy;
      policy.float64 = mode == Mode::float64;
      policy.tensor = [&](std::size_t i, const at::Tensor& dumped) {
        at::Tensor t = dumped;
        if (i < op.inputs.size() && op.inputs[i])
          if (auto it = values.find(*op.inputs[i]); it != values.end()) t = it->second;
        if (mode == Mode::float64 && t.defined() && t.is_floating_point()) t = t.to(at::kDouble);
        if (given.size() <= i) given.resize(i + 1);
        given[i] = t;
        return t;
      };
      at::Tensor out = output_tensor(call_op(*op.schema, op.dump.args, policy), op.output_index);
      if (!out.defined())
        throw NotReplayable(op.name + ": its replay returned no output " +
                            std::to_string(op.output_index));
      if (outputs) outputs->push_back(out);
      if (bounds)
        bounds->push_back(own_bound(family_of(op.schema->name()), *op.schema, op.dump.args, given,
                                    out, op.output_index));
      if (override_op == k) out = override_value;
      values[op.output] = out;
    }
    if (auto it = values.find(region.output); it != values.end()) return it->second;
    if (!region.ops.empty()) throw NotReplayable("no op of the region made the value it hands on");
    return mode == Mode::float64 ? region.handed_on.to(at::kDouble) : region.handed_on;
  }
};

at::Tensor recorded_output(const RunRegion& region) {
  for (auto it = region.ops.rbegin(); it != region.ops.rend(); ++it)
    if (it->output == region.output) {
      at::Tensor t = output_tensor(it->dump.outputs, it->output_index);
      if (t.defined()) return t;
    }
  if (region.ops.empty() && region.handed_on.defined()) return region.handed_on;
  throw NotReplayable("the dumps do not hold the value the region hands on");
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes())) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

at::Tensor signs(const at::Tensor& like, int trial, at::Generator& gen) {
  if (trial == 0) return at::ones_like(like);
  if (trial == 1) return -at::ones_like(like);
  return random_signs(like, gen);
}

// Each op's own bound carried to the region's output: the op's output moved by its bound (times
// kPropagation) with several sign patterns, the largest change of the output seen, per element.
at::Tensor propagated(const RunRegion& region, const std::vector<at::Tensor>& outputs,
                      const std::vector<at::Tensor>& bounds, const at::Tensor& reference) {
  at::Tensor total = at::zeros_like(reference);
  // its own: no draw from the default
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0x7265706c6179ull);
  for (std::size_t k = 0; k + 1 < region.ops.size(); ++k) {
    if (!bounds[k].defined() || bounds[k].numel() == 0 || !outputs[k].is_floating_point() ||
        bounds[k].abs().max().item<double>() == 0)
      continue;
    at::Tensor spread = at::zeros_like(reference);
    for (int trial = 0; trial < kPropagationTrials; ++trial) {
      Chain c{region, Mode::float64, k,
              outputs[k] + kPropagation * bounds[k] * signs(bounds[k], trial, gen)};
      spread = at::maximum(spread, at::nan_to_num((c.run() - reference).abs() / kPropagation));
    }
    total += kPropagationMargin * spread;
  }
  return total;
}

}  // namespace

std::size_t output_index_of(const std::string& record_name) {
  const auto hash = record_name.rfind('#');
  if (hash == std::string::npos) return 0;
  const auto dot = record_name.find('.', hash);
  return dot == std::string::npos ? 0 : std::stoul(record_name.substr(dot + 1));
}

RunReplay replay_run(const RunRegion& region) {
  RunReplay r;
  r.recorded = recorded_output(region);
  for (const RegionOp& op : region.ops) {
    const std::string why =
        not_replayable_reason(op.dump.schema, op.schema ? &*op.schema : nullptr);
    if (!why.empty()) throw NotReplayable(op.name + ": " + why);
    r.families.push_back(family_of(op.schema->name()));
  }
  std::vector<at::Tensor> outputs, bounds;
  try {
    Chain reference{region, Mode::float64, std::nullopt, {}};
    reference.outputs = &outputs;
    reference.bounds = &bounds;
    r.reference = reference.run();
    // The last op's bound reaches the output as it is; the others' through the ops after them;
    // +1: the output's own rounding into its dtype (a float64 result cast to float32).
    r.bound = propagated(region, outputs, bounds, r.reference) + r.reference.abs();
    if (!region.ops.empty() && region.ops.back().output == region.output) r.bound += bounds.back();
    const at::Tensor again = Chain{region, Mode::recorded, std::nullopt, {}}.run();
    r.replays_bitwise = same_bits(again, r.recorded);
    if (!*r.replays_bitwise && again.sizes().equals(r.recorded.sizes())) {
      const double u = unit_roundoff(r.recorded.scalar_type());
      const at::Tensor d =
          (again.to(at::kDouble) - r.recorded.to(at::kDouble)).abs() /
          (r.reference.abs().clamp_min(std::numeric_limits<double>::min()) * (u > 0 ? u : 1));
      r.replay_units = at::nan_to_num(d).max().item<double>();
    }
  } catch (const NotReplayable&) {
    throw;
  } catch (const std::exception& e) {
    throw NotReplayable(e.what());
  }
  return r;
}

}  // namespace probe::replay
