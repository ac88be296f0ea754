#include "faults.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

#include "expert_parallel.h"
#include "model.h"
#include "tensor_parallel.h"

namespace moe {

namespace {

// "<n>:<factor>", both whole: no trailing characters (lr: n is the step; out-scale: the layer).
bool parse_index_and_factor(const std::string& v, std::int64_t& index, double& factor) {
  const auto colon = v.find(':');
  if (colon == std::string::npos) return false;
  try {
    std::size_t used_index = 0, used_factor = 0;
    index = std::stoll(v.substr(0, colon), &used_index);
    factor = std::stod(v.substr(colon + 1), &used_factor);
    return used_index == colon && used_factor == v.size() - colon - 1 && index >= 0;
  } catch (const std::exception&) {
    return false;
  }
}

// The faults that name a layer, by their prefix.
constexpr std::pair<const char*, Fault::Kind> kLayerFaults[] = {
    {"op=", Fault::Kind::op},
    {"op-backward=", Fault::Kind::op_backward},
    {"op-wrong=", Fault::Kind::op_wrong},
    {"op-lowp=", Fault::Kind::op_lowp},
    {"tp-no-reduce=", Fault::Kind::tp_no_reduce},
    {"ep-permute=", Fault::Kind::ep_permute},
    {"ep-grad-scale=", Fault::Kind::ep_grad_scale},
};

bool names_layer(const std::string& text) {
  return std::any_of(std::begin(kLayerFaults), std::end(kLayerFaults),
                     [&](const auto& f) { return text.starts_with(f.first); });
}

// "<fault>=<layer>" (kLayerFaults): a non-negative integer, whole.
void parse_layer_fault(const std::string& text, Fault& f) {
  const std::string prefix = text.substr(0, text.find('=') + 1);
  for (const auto& [name, kind] : kLayerFaults)
    if (prefix == name) f.kind = kind;
  const std::string v = text.substr(prefix.size());
  std::size_t used = 0;
  try {
    f.layer = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || f.layer < 0)
    throw std::invalid_argument("--fault '" + text + "': the layer must be a non-negative integer");
}

// "<step>:<param>:<factor>" (grad-scale): the step and the factor whole, the parameter between.
bool parse_grad_scale(const std::string& v, Fault& f) {
  const auto first = v.find(':'), last = v.rfind(':');
  if (first == std::string::npos || first == last || last == first + 1) return false;
  try {
    std::size_t used_step = 0, used_factor = 0;
    f.step = std::stoll(v.substr(0, first), &used_step);
    f.factor = std::stod(v.substr(last + 1), &used_factor);
    f.param = v.substr(first + 1, last - first - 1);
    return used_step == first && used_factor == v.size() - last - 1 && f.step >= 0;
  } catch (const std::exception&) {
    return false;
  }
}

// "nan=<step>:<param>".
void parse_nan(const std::string& v, Fault& f) {
  const auto colon = v.find(':');
  f.step = std::stoll(v.substr(0, colon));
  f.param = v.substr(colon + 1);
}

// Why a checked fault cannot fire in this run; "" when it can.
std::string why_no_effect(const Fault& fault, const Config& c, const ProcessGroups& groups) {
  using Kind = Fault::Kind;
  const auto past_last = [&] {
    return "step " + std::to_string(fault.step) + " is past the run's last step " +
           std::to_string(c.steps - 1);
  };
  std::string why;
  if (fault.kind == Kind::nan && fault.step >= c.steps) why = past_last();
  if (fault.kind == Kind::skip_reduce && groups.dp_size == 1)
    why = "with one data-parallel rank there is no gradient reduction to skip";
  if (fault.kind == Kind::rng_per_rank && groups.world_size == 1)
    why = "with one rank, rank 0's dropout draws are every rank's";
  if (fault.kind == Kind::init && fault.param.ends_with("norm.weight"))
    why = "norm weights start at 1 whatever the seed";
  if (fault.kind == Kind::lr && fault.step >= c.steps) why = past_last();
  if (fault.kind == Kind::lr && fault.factor == 1)
    why = "a factor of 1 leaves the learning rate as it is";
  if (fault.kind == Kind::grad_scale && fault.step >= c.steps) why = past_last();
  if (fault.kind == Kind::grad_scale && fault.factor == 1)
    why = "a factor of 1 leaves the gradient as it is";
  if (fault.kind == Kind::out_scale && fault.factor == 1)
    why = "a factor of 1 leaves the output as it is";
  if (fault.kind == Kind::tp_no_reduce && groups.tp_size == 1)
    why = "with --tp 1 attention's output is no sum of partial products";
  if ((fault.kind == Kind::sp_norm_unreduced || fault.kind == Kind::sp_dropout_seed) && !c.sp)
    why = "without --sp no rank holds a sequence shard";
  if (fault.kind == Kind::pp_grads_none && groups.stages == 1)
    why = "with one pipeline stage no schedule runs the backward";
  if ((fault.kind == Kind::ep_permute || fault.kind == Kind::ep_grad_scale) && groups.ep_size == 1)
    why = "with --ep 1 no token is dispatched to another rank's experts";
  return why;
}

}  // namespace

Fault Fault::parse(const std::string& text) {
  Fault f;
  auto value = [&](const std::string& prefix) { return text.substr(prefix.size()); };
  if (text == "none") return f;
  if (text == "grads-none") {
    f.kind = Kind::grads_none;
  } else if (text == "pp-grads-none") {
    f.kind = Kind::pp_grads_none;
  } else if (text == "rng-per-rank") {
    f.kind = Kind::rng_per_rank;
  } else if (text.starts_with("nan=") && value("nan=").find(':') != std::string::npos) {
    f.kind = Kind::nan;
    parse_nan(value("nan="), f);
  } else if (text.starts_with("skip-reduce=")) {
    f.kind = Kind::skip_reduce;
    f.param = value("skip-reduce=");
  } else if (text.starts_with("init=") && text.size() > 5) {
    f.kind = Kind::init;
    f.param = value("init=");
  } else if (text.starts_with("lr=") && parse_index_and_factor(value("lr="), f.step, f.factor)) {
    f.kind = Kind::lr;
  } else if (text.starts_with("out-scale=") &&
             parse_index_and_factor(value("out-scale="), f.layer, f.factor)) {
    f.kind = Kind::out_scale;
  } else if (text.starts_with("grad-scale=") && parse_grad_scale(value("grad-scale="), f)) {
    f.kind = Kind::grad_scale;
  } else if (names_layer(text)) {
    parse_layer_fault(text, f);
  } else if (text == "sp-norm-unreduced") {
    f.kind = Kind::sp_norm_unreduced;
  } else if (text == "sp-dropout-seed") {
    f.kind = Kind::sp_dropout_seed;
  } else {
    throw std::invalid_argument(
        "--fault '" + text +
        "': expected none, grads-none, pp-grads-none, rng-per-rank, nan=<step>:<param>, "
        "skip-reduce=<param>, init=<param>, lr=<step>:<factor>, "
        "grad-scale=<step>:<param>:<factor>, "
        "out-scale=<layer>:<factor>, op=<layer>, "
        "op-backward=<layer>, op-wrong=<layer>, op-lowp=<layer>, tp-no-reduce=<layer>, "
        "sp-norm-unreduced, sp-dropout-seed, "
        "ep-permute=<layer> or ep-grad-scale=<layer>");
  }
  return f;
}

std::string Fault::unreduced_param() const { return kind == Kind::skip_reduce ? param : ""; }

std::int64_t Fault::dropout_rank_salt(const ProcessGroups& groups) const {
  return kind == Kind::rng_per_rank ? groups.rank : 0;
}

std::optional<double> Fault::lr_factor(std::int64_t at_step) const {
  if (kind == Kind::lr && step == at_step) return factor;
  return std::nullopt;
}

void check_fault(const Fault& fault, const Config& c, const ProcessGroups& groups) {
  if (!fault.param.empty()) {
    Transformer whole(c.model, 0, c.model.n_layers);
    const auto params = whole->named_parameters();
    if (std::none_of(params.begin(), params.end(),
                     [&](const auto& item) { return item.key() == fault.param; }))
      throw std::invalid_argument("--fault: no parameter named '" + fault.param + "'");
  }
  if (fault.layer >= c.model.n_layers)
    throw std::invalid_argument("--fault: no layer " + std::to_string(fault.layer) +
                                " (the model has " + std::to_string(c.model.n_layers) + ")");
  const std::string why = why_no_effect(fault, c, groups);
  if (!why.empty() && groups.rank == 0)
    std::fprintf(stderr, "moe_train: warning: --fault %s has no effect here: %s\n", c.fault.c_str(),
                 why.c_str());
}

void apply_op_fault(const Fault& fault, ModelArgs& model) {
  using Alt = ModelArgs::AltSoftmax;
  switch (fault.kind) {
    case Fault::Kind::op: model.alt_softmax = Alt::forward; break;
    case Fault::Kind::op_backward: model.alt_softmax = Alt::backward; break;
    case Fault::Kind::op_wrong: model.alt_softmax = Alt::scaled; break;
    case Fault::Kind::op_lowp: model.alt_softmax = Alt::low_precision; break;
    case Fault::Kind::out_scale:
      model.scaled_output_layer = fault.layer;
      model.output_scale = fault.factor;
      return;
    default: return;
  }
  model.alt_softmax_layer = fault.layer;
}

void apply_tensor_parallel_fault(const Fault& fault, TensorParallel& tp) {
  if (fault.kind == Fault::Kind::tp_no_reduce) tp.unreduced_attention_layer = fault.layer;
  if (fault.kind == Fault::Kind::sp_dropout_seed) tp.dropout_of_first_shard = true;
}

void apply_expert_parallel_fault(const Fault& fault, ExpertParallel& ep) {
  if (fault.kind == Fault::Kind::ep_permute) ep.permuted_layer = fault.layer;
}

void scale_expert_gradients_if_due(const Fault& fault, std::vector<Param>& params,
                                   const ProcessGroups& groups) {
  if (fault.kind != Fault::Kind::ep_grad_scale || groups.ep_size == 1) return;
  const std::string prefix = "layers." + std::to_string(fault.layer) + ".moe.experts.";
  for (auto& p : params)
    if (p.name.starts_with(prefix) && p.owned.grad().defined())
      p.owned.mutable_grad().div_(groups.ep_size);
}

void apply_init_fault(const Fault& fault, torch::nn::Module& model, std::uint64_t seed) {
  if (fault.kind != Fault::Kind::init) return;
  for (auto& item : model.named_parameters())
    if (item.key() == fault.param) init_parameter(fault.param, item.value(), seed + 1);
}

void inject_nan_if_due(const Fault& fault, std::int64_t step, std::vector<Param>& params,
                       const ProcessGroups& groups) {
  if (fault.kind != Fault::Kind::nan || fault.step != step || groups.dp_rank != 0) return;
  for (auto& p : params)
    if (p.name == fault.param && p.compute.grad().defined())
      p.compute.grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
}

void scale_gradient_if_due(const Fault& fault, std::int64_t step, std::vector<Param>& params,
                           const ProcessGroups& groups) {
  if (fault.kind != Fault::Kind::grad_scale || fault.step != step || groups.dp_rank != 0) return;
  for (auto& p : params)
    if (p.name == fault.param && p.compute.grad().defined())
      p.compute.mutable_grad().mul_(fault.factor);
}

void die_if_due(const Config& c, std::int64_t step, const ProcessGroups& groups) {
  if (c.die_after_step >= 0 && step == c.die_after_step + 1 && groups.rank == c.die_rank)
    std::raise(SIGKILL);
}

}  // namespace moe
