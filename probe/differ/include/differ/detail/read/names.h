// Parameter names across layouts: wrapper prefixes stripped, --map rules applied, rank lists.
#pragma once

#include <regex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace probe::differ {

// Canonicalises parameter names: strips wrapper prefixes (module., _fsdp_wrapped_module.,
// _orig_mod., _checkpoint_wrapped_module.) at any depth, then applies rules in order.
// A rule is `[@RANKS:]REGEX=REPLACEMENT`: RANKS (e.g. `4-7` or `1,3`) limits it to records of
// those ranks (pipeline stages that renumber their layers); the replacement takes `$N`,
// `${N}`, `$&`, `$$` and arithmetic on a numeric group, `${N+K}` / `${N-K}`. Results are
// cached (names repeat every step).
class NameMapper {
 public:
  NameMapper(bool strip_wrappers, const std::vector<std::string>& rules);  // throws InputError
  const std::string& map(const std::string& name, int rank = 0);
  // Whether a name maps the same on every rank (no rule is scoped to ranks).
  bool rank_independent() const { return !rank_scoped_; }

  struct Rule {
    std::vector<std::pair<int, int>> ranks;  // empty: every rank
    std::regex re;
    std::string replacement;
  };

 private:
  std::string apply_rules(std::string name, int rank) const;

  bool strip_;
  bool rank_scoped_ = false;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, std::string> cache_;
};

// "0-3,6": sorted ranks with consecutive runs collapsed (reports and issue messages).
std::string format_ranks(const std::vector<int>& ranks);
// Expands a replacement (see NameMapper) for one match. Throws InputError.
std::string expand_replacement(const std::smatch& m, const std::string& replacement);
std::string strip_wrapper_prefixes(const std::string& name);

}  // namespace probe::differ
