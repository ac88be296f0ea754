// The rule table (differ/rule.h) against docs/diff-logs.md: the rules the docs list, in their
// order and with their verdicts, are the ones the differ applies, and every other rule a cause
// may name is documented.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "differ/rule.h"

using namespace probe::differ;

namespace {

std::string read_docs() {
  std::ifstream in(NUMPROBE_DIFF_LOGS_DOC);
  EXPECT_TRUE(in) << "cannot open " << NUMPROBE_DIFF_LOGS_DOC;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct DocRow {
  std::vector<std::string> names;
  std::string verdict;
};

// The rows of the table under "The rules, in this order": `| `a` / `b` | class | when |`.
std::vector<DocRow> rule_rows(const std::string& docs) {
  std::vector<DocRow> rows;
  const auto start = docs.find("The rules, in this order");
  EXPECT_NE(start, std::string::npos) << "docs/diff-logs.md has no rule table";
  if (start == std::string::npos) return rows;
  std::istringstream lines(docs.substr(start));
  std::string line;
  std::getline(lines, line);  // the sentence
  bool in_table = false;
  const std::regex row(R"(^\| ([^|]+) \| ([^|]+) \|)"), name("`([a-z_]+)`");
  while (std::getline(lines, line)) {
    if (line.empty()) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    std::smatch m;
    if (!std::regex_search(line, m, row) || m[1] == "rule" || m[1].str().starts_with("---"))
      continue;
    DocRow r;
    r.verdict = m[2];
    const std::string cell = m[1];
    for (auto it = std::sregex_iterator(cell.begin(), cell.end(), name);
         it != std::sregex_iterator(); ++it)
      r.names.push_back((*it)[1]);
    rows.push_back(r);
  }
  return rows;
}

std::set<std::string> verdicts_of(RuleClass c) {
  switch (c) {
    case RuleClass::bug: return {"bug"};
    case RuleClass::noise: return {"noise"};
    case RuleClass::cannot_tell: return {"cannot tell"};
    case RuleClass::follows: return {"bug", "noise"};
  }
  return {};
}

}  // namespace

TEST(RuleTable, DocsListTheExplanationRulesInOrderWithTheirVerdicts) {
  const auto rows = rule_rows(read_docs());
  ASSERT_FALSE(rows.empty());
  std::vector<std::string> doc_order;
  std::map<std::string, std::set<std::string>> doc_verdicts;
  for (const auto& r : rows) {
    ASSERT_FALSE(r.names.empty()) << "a rule row without a `rule` name";
    for (const auto& n : r.names) {
      if (!doc_verdicts.contains(n)) doc_order.push_back(n);
      doc_verdicts[n].insert(r.verdict);
    }
  }
  std::vector<std::string> code_order;
  for (const auto& r : all_rules()) {
    if (!r.explains_pairs) continue;
    code_order.emplace_back(r.name);
    EXPECT_EQ(doc_verdicts[std::string(r.name)], verdicts_of(r.rule_class)) << r.name;
  }
  EXPECT_EQ(doc_order, code_order);
}

TEST(RuleTable, EveryOtherRuleIsDocumented) {
  const std::string docs = read_docs();
  for (const auto& r : all_rules()) {
    if (r.explains_pairs) continue;
    const std::string name(r.name);
    EXPECT_TRUE(docs.find("`" + name + "`") != std::string::npos ||
                docs.find("[" + name + "]") != std::string::npos)
        << name << " is named in no docs/diff-logs.md text";
  }
}

TEST(RuleTable, NamesRoundTrip) {
  for (const auto& r : all_rules()) {
    EXPECT_EQ(rule_named(r.name), r.rule);
    EXPECT_EQ(info(r.rule).name, r.name);
  }
  EXPECT_EQ(rule_named("no_such_rule"), std::nullopt);
}
