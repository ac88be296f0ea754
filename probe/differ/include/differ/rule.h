// The rules a comparison's explanations and causes are named by, one table: each rule's name
// (its spelling in the text report, --json and --html) and the verdicts it may give. The pair
// rules are docs/diff-logs.md's rule table, row for row (a test holds them to it); the others name
// causes of the comparison as a whole (steps or kinds one run lacks) and of op traces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>

namespace probe::differ {

enum class Rule : std::uint8_t {
  // Explanations of a divergent pair, in the order the rules are tried.
  none_gradient,
  none,
  missing_record,
  nonfinite,
  unreduced_gradient,
  replica_mismatch,
  rng,
  rng_unused,
  data,
  elements_moved,
  convention,
  constant_factor,
  different_ops,
  init,
  inherited,
  partial_sum,
  unexplained,
  summation_order,
  wrong_reduction,
  optimizer,
  cannot_tell,
  // Causes of the comparison as a whole.
  step_range,
  kind_not_recorded,
  names_differ,
  untied,
  // Causes op traces find.
  op_root_cause,
  op_beyond_noise,
  op_inherited,
};

// The verdict a rule gives. `follows`: that of what the pair descends from (inherited: noise
// grown from noise, or the consequence of a bug).
enum class RuleClass : std::uint8_t { bug, noise, cannot_tell, follows };

inline constexpr std::size_t kRuleCount = static_cast<std::size_t>(Rule::op_inherited) + 1;
// (rule, bug or not) pairs an explanation can be: one per rule, two for the `follows` ones.
inline constexpr std::size_t kFollowingRules = 2;
inline constexpr std::size_t kExplanationCount = kRuleCount + kFollowingRules;

struct RuleInfo {
  Rule rule;
  std::string_view name;
  RuleClass rule_class;
  bool explains_pairs;  // a pair's explanation (docs/diff-logs.md's rule table), not only a cause
};

// Every rule, in the enum's order.
std::span<const RuleInfo> all_rules();
const RuleInfo& info(Rule rule);
std::string_view rule_name(Rule rule);
// The rule spelled `name`; nullopt for none.
std::optional<Rule> rule_named(std::string_view name);

inline std::ostream& operator<<(std::ostream& os, Rule rule) { return os << rule_name(rule); }

}  // namespace probe::differ
