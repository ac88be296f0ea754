// Independent divergences: every bug-class root listed with its effect on training, and the
// headline the one that changes training (a loss computed another way, one rounding apart while
// every gradient agrees, is listed as local below a weight the optimizer decayed).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "differ/report.h"
#include "differ_test_util.h"

using namespace differ_test;
using namespace probe::differ;

namespace {

// A 0-dim float32 loss of value v.
Record loss_record(std::int64_t step, double v) {
  Record r = tensor(step, Kind::output, "loss", 80 + static_cast<std::uint64_t>(step), v, 0);
  r.stats.min = r.stats.max = r.stats.mean = v;
  r.stats.shape = {};
  return r;
}

// One step of a model with weights w and norm: its input, its logits and its loss (the forward
// outputs of the model and of its loss, `loss` the loss's value), then the gradients.
std::vector<Record> step_records(std::int64_t step, double loss) {
  return {tensor(step, Kind::param, "w", 10 + static_cast<std::uint64_t>(step), 1.0),
          tensor(step, Kind::param, "norm", 20, 2.0),
          tensor(step, Kind::input, "tokens", 40 + static_cast<std::uint64_t>(step), 3.0, 0),
          tensor(step, Kind::output, "model", 30, 4.0, 0),
          loss_record(step, loss),
          tensor(step, Kind::mb_grad, "w", 50 + static_cast<std::uint64_t>(step), 0.5, 0),
          tensor(step, Kind::mb_grad, "norm", 60 + static_cast<std::uint64_t>(step), 0.25, 0),
          tensor(step, Kind::grad, "w", 50 + static_cast<std::uint64_t>(step), 0.5),
          tensor(step, Kind::grad, "norm", 60 + static_cast<std::uint64_t>(step), 0.25)};
}

Result compare(const std::string& name, const std::vector<Record>& a, const std::vector<Record>& b,
               DiffOptions opt = {}) {
  const auto dir = fresh_dir(name);
  write_run(dir / "a", {a});
  write_run(dir / "b", {b});
  return diff(dir / "a", dir / "b", opt);
}

// The base run: three steps, every record the same in the test run but what each test changes.
std::vector<Record> base_run() {
  std::vector<Record> r;
  for (std::int64_t s = 0; s < 3; ++s)
    for (auto& rec : step_records(s, 2.5 - 0.1 * static_cast<double>(s))) r.push_back(rec);
  return r;
}

bool is_loss(const Record& r) { return r.kind == Kind::output && r.name == "loss"; }

// The loss of every step one float32 rounding apart (computed another way), nothing else.
std::vector<Record> loss_rounded(std::vector<Record> r) {
  for (auto& rec : r)
    if (is_loss(rec)) {
      rec.stats.hash += 500;
      rec.stats.norm = std::nextafter(static_cast<float>(rec.stats.norm), 10.0f);
      rec.stats.min = rec.stats.max = rec.stats.mean = rec.stats.norm;
    }
  return r;
}

// The norm weight decayed by the optimizer of step 0: it differs from step 1 on, and what step 1
// and 2 compute from it inherits that.
std::vector<Record> norm_decayed(std::vector<Record> r) {
  for (auto& rec : r) {
    if (rec.step == 0) continue;
    if (rec.kind == Kind::param && rec.name == "norm") {
      rec.stats.hash += 1000;
      rec.stats.norm *= 0.999;
    } else if (rec.kind == Kind::output || rec.kind == Kind::mb_grad || rec.kind == Kind::grad) {
      rec.stats.hash += 1000;
      rec.stats.norm *= 1.001;
    }
  }
  return r;
}

}  // namespace

TEST(IndependentDivergences, AHarmlessLossChangeIsLocalAndTheDecayedWeightHeadlines) {
  auto r = compare("independent_harmless", base_run(), norm_decayed(loss_rounded(base_run())));
  ASSERT_TRUE(r.first_unexplained) << text_of(r);
  EXPECT_EQ(r.first_unexplained->step, 1);
  EXPECT_EQ(r.first_unexplained->kind, Kind::param);
  EXPECT_EQ(r.first_unexplained->name, "norm");
  EXPECT_EQ(r.unexplained_cause->rule, Rule::optimizer);
  ASSERT_EQ(r.independent.size(), 2u) << text_of(r);
  EXPECT_EQ(r.independent[0].effect, Independent::Effect::training);
  EXPECT_GT(r.independent[0].inherited, 0);  // step 1 and 2's gradients
  const Independent& loss = r.independent[1];
  EXPECT_EQ(loss.kind, Kind::output);
  EXPECT_EQ(loss.rule, Rule::unexplained);
  EXPECT_EQ(loss.effect, Independent::Effect::local);
  EXPECT_EQ(loss.first.step, 0);
  EXPECT_EQ(r.exit_code(), 1);
  const std::string text = text_of(r);
  EXPECT_TRUE(says(text, "FIRST UNEXPLAINED DIVERGENCE step 1 step begin param norm [different]"))
      << text;
  EXPECT_TRUE(says(text, "INDEPENDENT DIVERGENCES 2, ranked by their effect on training")) << text;
  EXPECT_TRUE(says(text,
                   "2. [unexplained] step 0 forward mb 0 output loss\n local (1 record of 1 "
                   "name at step 0): the gradients or weights compared after it inherit "
                   "nothing of it\n output loss mb 0 differs by relative norm"))
      << text;
  const auto j = nlohmann::json::parse(to_json(r, {}));
  ASSERT_EQ(j["independent_divergences"].size(), 2u);
  EXPECT_EQ(j["independent_divergences"][1]["effect"], "local");
  EXPECT_EQ(j["independent_divergences"][0]["cause"]["rule"], "optimizer");
  EXPECT_EQ(j["first_unexplained_divergence"]["name"], "norm");
}

TEST(IndependentDivergences, TheLossChangeAloneIsLocalAndStillTheHeadline) {
  auto r = compare("independent_loss_alone", base_run(), loss_rounded(base_run()));
  ASSERT_TRUE(r.first_unexplained);
  EXPECT_EQ(r.first_unexplained->name, "loss");
  EXPECT_EQ(r.first_unexplained->step, 0);
  ASSERT_EQ(r.independent.size(), 1u);
  // One root of one rule and kind, recurring at every step: one entry.
  EXPECT_EQ(r.independent[0].records, 3);
  EXPECT_EQ(r.independent[0].last_step, 2);
  // Each step's gradients come after its loss, compared equal: local.
  EXPECT_EQ(r.independent[0].effect, Independent::Effect::local);
  EXPECT_TRUE(says(text_of(r), "INDEPENDENT DIVERGENCES 1, the headline")) << text_of(r);
}

TEST(IndependentDivergences, WithoutGradientsOrWeightsAfterItTheEffectIsUnknown) {
  std::vector<Record> a, b;
  for (const auto& rec : base_run())
    if (is_loss(rec) || rec.kind == Kind::input) a.push_back(rec);
  for (const auto& rec : loss_rounded(base_run()))
    if (is_loss(rec) || rec.kind == Kind::input) b.push_back(rec);
  auto r = compare("independent_unknown", a, b);
  ASSERT_EQ(r.independent.size(), 1u);
  EXPECT_EQ(r.independent[0].effect, Independent::Effect::unknown);
}

TEST(IndependentDivergences, ARootTrainingInheritsIsOneEntryAndItsConsequencesAreNotListed) {
  // The input of step 0 differs: everything after it inherits it, nothing else is independent.
  auto b = base_run();
  for (auto& rec : b)
    if (rec.kind != Kind::param) {
      rec.stats.hash += 7;
      rec.stats.norm *= 1.01;
    }
  for (auto& rec : b)
    if (rec.step >= 1 && rec.kind == Kind::param) {
      rec.stats.hash += 7;
      rec.stats.norm *= 1.01;
    }
  auto r = compare("independent_data", base_run(), b);
  ASSERT_EQ(r.independent.size(), 1u) << text_of(r);
  EXPECT_EQ(r.independent[0].rule, Rule::data);
  EXPECT_EQ(r.independent[0].effect, Independent::Effect::training);
  EXPECT_EQ(r.first_unexplained->kind, Kind::input);
  // One entry that changes training: the headline says it all, no list.
  EXPECT_EQ(text_of(r).find("INDEPENDENT DIVERGENCES"), std::string::npos) << text_of(r);
}

TEST(IndependentDivergences, StrictListsNothingAndKeepsTheFirstDivergence) {
  DiffOptions strict;
  strict.strict = true;
  auto r =
      compare("independent_strict", base_run(), norm_decayed(loss_rounded(base_run())), strict);
  EXPECT_EQ(text_of(r).find("INDEPENDENT DIVERGENCES"), std::string::npos);
  ASSERT_TRUE(r.first_divergence);
  EXPECT_EQ(r.first_divergence->name, "loss");
}
