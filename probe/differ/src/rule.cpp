#include "differ/rule.h"

#include <array>
#include <cstddef>

namespace probe::differ {
namespace {

using enum RuleClass;

constexpr std::array<RuleInfo, kRuleCount> kRules = {{
    {Rule::none_gradient, "none_gradient", bug, true},
    {Rule::none, "none", bug, true},
    {Rule::missing_record, "missing_record", bug, true},
    {Rule::nonfinite, "nonfinite", bug, true},
    {Rule::unreduced_gradient, "unreduced_gradient", bug, true},
    {Rule::replica_mismatch, "replica_mismatch", bug, true},
    {Rule::rng, "rng", bug, true},
    {Rule::rng_unused, "rng_unused", noise, true},
    {Rule::data, "data", bug, true},
    {Rule::elements_moved, "elements_moved", bug, true},
    {Rule::convention, "convention", noise, true},
    {Rule::constant_factor, "constant_factor", bug, true},
    {Rule::different_ops, "different_ops", bug, true},
    {Rule::init, "init", bug, true},
    {Rule::inherited, "inherited", follows, true},
    {Rule::partial_sum, "partial_sum", noise, true},
    {Rule::unexplained, "unexplained", bug, true},
    {Rule::summation_order, "summation_order", noise, true},
    {Rule::wrong_reduction, "wrong_reduction", bug, true},
    {Rule::optimizer, "optimizer", bug, true},
    {Rule::cannot_tell, "cannot_tell", cannot_tell, true},
    {Rule::step_range, "step_range", bug, false},
    {Rule::kind_not_recorded, "kind_not_recorded", bug, false},
    {Rule::names_differ, "names_differ", bug, false},
    {Rule::untied, "untied", bug, false},
    {Rule::op_root_cause, "op_root_cause", bug, false},
    {Rule::op_beyond_noise, "op_beyond_noise", bug, false},
    {Rule::op_inherited, "op_inherited", follows, false},
}};

constexpr bool in_enum_order() {
  for (std::size_t i = 0; i < kRules.size(); ++i)
    if (static_cast<std::size_t>(kRules[i].rule) != i) return false;
  return true;
}
constexpr std::size_t following() {
  std::size_t n = 0;
  for (const auto& r : kRules) n += r.rule_class == follows;
  return n;
}
static_assert(in_enum_order(), "kRules lists every Rule once, in the enum's order");
static_assert(kRuleCount == kRules.size(), "a Rule without a row");
static_assert(following() == kFollowingRules,
              "kExplanationCount counts two entries per `follows` rule");

}  // namespace

std::span<const RuleInfo> all_rules() { return kRules; }

const RuleInfo& info(Rule rule) { return kRules[static_cast<std::size_t>(rule)]; }

std::string_view rule_name(Rule rule) { return info(rule).name; }

std::optional<Rule> rule_named(std::string_view name) {
  for (const auto& r : kRules)
    if (r.name == name) return r.rule;
  return std::nullopt;
}

}  // namespace probe::differ
