// Microbatches matched by the samples they hold (sample_match.h).
#include "differ/detail/pair/sample_match.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

namespace probe::differ {
namespace {

using Samples = std::vector<std::uint64_t>;  // a microbatch's sample hashes, in row order

// The row a sample record holds: "numprobe.sample" row 0, "numprobe.sample#k" row k.
std::optional<std::int64_t> sample_row(const Merged& m) {
  const Record& r = m.record;
  if (r.kind != Kind::input || !r.microbatch || r.state != Record::State::tensor) return {};
  std::string_view name = r.name;
  if (name.substr(0, kSampleRecord.size()) != kSampleRecord) return {};
  name.remove_prefix(kSampleRecord.size());
  if (name.empty()) return 0;
  if (name.front() != '#' || name.size() < 2) return {};
  std::int64_t row = 0;
  for (char c : name.substr(1)) {
    if (c < '0' || c > '9') return {};
    row = row * 10 + (c - '0');
  }
  return row;
}

std::map<std::int64_t, Samples> samples_of(const std::vector<Merged>& records) {
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::uint64_t>>> rows;
  for (const auto& m : records)
    if (const auto row = sample_row(m))
      rows[*m.record.microbatch].push_back({*row, m.record.stats.hash});
  std::map<std::int64_t, Samples> samples;
  for (auto& [mb, list] : rows) {
    std::sort(list.begin(), list.end());
    Samples& s = samples[mb];
    for (const auto& [row, hash] : list) s.push_back(hash);
  }
  return samples;
}

std::string ids_text(const std::vector<std::int64_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

// Microbatches of both runs that share samples, by union-find over their indices (base ones
// first, then test ones).
class Groups {
 public:
  explicit Groups(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  std::size_t find(std::size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(std::size_t a, std::size_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<std::size_t> parent_;
};

// A group of microbatches, both runs': whether its samples, taken together, are the same.
struct Group {
  std::vector<std::int64_t> ids[2];
  Samples all[2];
  bool same_samples() {
    for (auto& s : all) std::sort(s.begin(), s.end());
    return !all[0].empty() && all[0] == all[1];
  }
};

void rename_microbatches(std::vector<Merged>& records,
                         const std::unordered_map<std::int64_t, std::int64_t>& rename) {
  for (auto& m : records) {
    Record& r = m.record;
    if (!r.microbatch) continue;
    const auto it = rename.find(*r.microbatch);
    if (it == rename.end() || it->second == *r.microbatch) continue;
    r.microbatch = it->second;
    // The key is the kind, the microbatch and the canonical name (Run::group_of).
    const auto bar = m.key.find('|');
    if (bar != std::string::npos)
      m.key = m.key.substr(0, 1) + std::to_string(it->second) + m.key.substr(bar);
    for (auto& c : r.covers)
      if (const auto renamed = rename.find(c); renamed != rename.end()) c = renamed->second;
    std::sort(r.covers.begin(), r.covers.end());
  }
}

}  // namespace

void SampleMatch::clear() {
  for (int run = 0; run < 2; ++run) {
    aside_[run].clear();
    words_[run].clear();
  }
}

void SampleMatch::match(std::vector<Merged>& base, std::vector<Merged>& test) {
  clear();
  const auto in_base = samples_of(base), in_test = samples_of(test);
  if (in_base.empty() || in_test.empty()) return;
  // The same samples in the same order: the same microbatch.
  std::map<Samples, std::vector<std::int64_t>> base_of;
  for (auto it = in_base.rbegin(); it != in_base.rend(); ++it)
    base_of[it->second].push_back(it->first);
  std::unordered_map<std::int64_t, std::int64_t> rename;
  std::vector<std::int64_t> left[2];
  std::unordered_set<std::int64_t> base_taken;
  for (const auto& [mb, samples] : in_test) {
    auto it = base_of.find(samples);
    if (it == base_of.end() || it->second.empty()) {
      left[1].push_back(mb);
      continue;
    }
    rename[mb] = it->second.back();
    base_taken.insert(it->second.back());
    it->second.pop_back();
  }
  for (const auto& [mb, samples] : in_base)
    if (!base_taken.count(mb)) left[0].push_back(mb);
  std::int64_t fresh = 0;
  for (const auto* samples : {&in_base, &in_test})
    fresh = std::max(fresh, samples->rbegin()->first + 1);
  for (const auto* records : {&base, &test})
    for (const auto& m : *records)
      if (m.record.microbatch) fresh = std::max(fresh, *m.record.microbatch + 1);
  if (!left[0].empty() || !left[1].empty()) {
    // Microbatches left over, grouped by the samples they share.
    const std::size_t nb = left[0].size();
    Groups groups(nb + left[1].size());
    std::unordered_map<std::uint64_t, std::size_t> owner;
    for (int run = 0; run < 2; ++run)
      for (std::size_t i = 0; i < left[run].size(); ++i) {
        const std::size_t node = run == 0 ? i : nb + i;
        for (std::uint64_t h : (run == 0 ? in_base : in_test).at(left[run][i])) {
          const auto [it, added] = owner.emplace(h, node);
          if (!added) groups.join(node, it->second);
        }
      }
    std::map<std::size_t, Group> by_root;
    for (int run = 0; run < 2; ++run)
      for (std::size_t i = 0; i < left[run].size(); ++i) {
        Group& g = by_root[groups.find(run == 0 ? i : nb + i)];
        g.ids[run].push_back(left[run][i]);
        const Samples& s = (run == 0 ? in_base : in_test).at(left[run][i]);
        g.all[run].insert(g.all[run].end(), s.begin(), s.end());
      }
    std::vector<std::int64_t> unpaired[2];
    for (auto& [root, g] : by_root) {
      if (!g.same_samples()) {
        for (int run = 0; run < 2; ++run)
          unpaired[run].insert(unpaired[run].end(), g.ids[run].begin(), g.ids[run].end());
        continue;
      }
      const std::string words =
          "base microbatch" + std::string(g.ids[0].size() > 1 ? "es " : " ") + ids_text(g.ids[0]) +
          " and test microbatch" + (g.ids[1].size() > 1 ? "es " : " ") + ids_text(g.ids[1]) +
          " hold the same " + std::to_string(g.all[0].size()) + " samples, grouped otherwise";
      for (std::int64_t mb : g.ids[0]) {
        aside_[0].insert(mb);
        words_[0][mb] = words;
      }
      for (std::int64_t mb : g.ids[1]) {
        rename[mb] = fresh;
        aside_[1].insert(fresh);
        words_[1][fresh++] = words;
      }
    }
    // Samples that differ: the leftover microbatches pair in order, and their inputs differ.
    for (auto& ids : unpaired) std::sort(ids.begin(), ids.end());
    for (std::size_t i = 0; i < unpaired[1].size(); ++i)
      rename[unpaired[1][i]] = i < unpaired[0].size() ? unpaired[0][i] : fresh++;
  }
  // A test microbatch without samples keeps its id unless a renamed one takes it.
  std::unordered_set<std::int64_t> targets;
  for (const auto& [from, to] : rename) targets.insert(to);
  for (const auto& m : test)
    if (m.record.microbatch && !in_test.count(*m.record.microbatch) &&
        targets.count(*m.record.microbatch) && !rename.count(*m.record.microbatch))
      rename[*m.record.microbatch] = fresh++;
  const bool identity =
      std::all_of(rename.begin(), rename.end(), [](const auto& r) { return r.first == r.second; });
  if (!identity) rename_microbatches(test, rename);
}

bool SampleMatch::set_aside(const Pair& p, SetAsideReport& report) const {
  const int run = p.base.present ? 0 : 1;
  if (!p.mb || !aside_[run].count(*p.mb)) return false;
  ++report.pairs;
  ++report.by_kind[p.kind];
  if (report.examples.size() < SetAsideReport::kListed)
    report.examples.push_back("step " + std::to_string(p.step) + " " +
                              std::string(kind_name(p.kind)) + " " + p.name + ": " +
                              words_[run].at(*p.mb));
  return true;
}

}  // namespace probe::differ
