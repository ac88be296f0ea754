// numprobe_bisect's search over degrees and its configurations (docs/bisect.md), on stand-in
// evaluations: which configurations diverge is told, not run.
#include <gtest/gtest.h>

#include <set>

#include "configs.h"
#include "search.h"

namespace bisect = probe::bisect;

namespace {

// Counts what is asked for; fails a test that asks for a configuration twice.
struct Oracle {
  std::function<bisect::VersusBase(const bisect::Config&)> rule;
  std::set<std::string> asked;
  bisect::VersusBase operator()(const bisect::Config& c) {
    EXPECT_TRUE(asked.insert(c.text()).second) << c.text() << " asked for twice";
    return rule(c);
  }
};

bisect::Culprit culprit_of(const std::string& base, const std::string& test, Oracle& oracle) {
  const auto c = bisect::find_culprit(bisect::parse_config(base, "--base"),
                                      bisect::parse_config(test, "--test"),
                                      [&](const bisect::Config& c) { return oracle(c); });
  EXPECT_TRUE(c);
  return c.value_or(bisect::Culprit{});
}

}  // namespace

TEST(BisectSearch, ASingleDegreeIsBlamedAtTheBaseOfTheOthers) {
  Oracle o{[](const bisect::Config& c) {
             return c.get("pp") == 2 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto c = culprit_of("dp=4,tp=1,pp=1", "dp=2,tp=1,pp=2", o);
  EXPECT_EQ(c.degrees, std::vector<std::string>({"pp"}));
  EXPECT_EQ(c.before.text(), "dp=4,tp=1,pp=1");
  EXPECT_EQ(c.after.text(), "dp=4,tp=1,pp=2");
  EXPECT_TRUE(c.prerequisites.empty());
}

TEST(BisectSearch, TwoDegreesThatDivergeOnlyTogetherAreBlamedTogether) {
  Oracle o{[](const bisect::Config& c) {
             return c.get("tp") == 2 && c.get("sp") == 1 ? bisect::VersusBase::bug
                                                         : bisect::VersusBase::noise;
           },
           {}};
  const auto c = culprit_of("dp=4,tp=1,sp=0", "dp=2,tp=2,sp=1", o);
  EXPECT_EQ(c.degrees, std::vector<std::string>({"tp", "sp"}));
  EXPECT_EQ(c.before.text(), "dp=4,tp=1,sp=0");
  EXPECT_EQ(c.after.text(), "dp=4,tp=2,sp=1");
}

TEST(BisectSearch, ADegreeWithoutWhichTheRunFailsIsAPrerequisiteNotTheCulprit) {
  // sp needs tp > 1 (the trainer refuses); with it, sp alone brings the divergence in.
  Oracle o{[](const bisect::Config& c) {
             if (c.get("sp") == 1 && c.get("tp") == 1) return bisect::VersusBase::failed;
             return c.get("sp") == 1 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto c = culprit_of("dp=4,tp=1,pp=1,sp=0", "dp=2,tp=2,pp=2,sp=1", o);
  EXPECT_EQ(c.degrees, std::vector<std::string>({"sp"}));
  EXPECT_EQ(c.prerequisites, std::vector<std::string>({"tp"}));
  EXPECT_EQ(c.before.text(), "dp=4,tp=2,pp=1,sp=0");
  EXPECT_EQ(c.after.text(), "dp=4,tp=2,pp=1,sp=1");
}

TEST(BisectSearch, AConfigurationThatFailsOnTheWayIsSkippedAndTheNextStepTellsTheChangesApart) {
  // dp=2,tp=1 does not run; tp is the culprit, dp is noise.
  Oracle o{[](const bisect::Config& c) {
             if (c.get("dp") == 2 && c.get("tp") == 1) return bisect::VersusBase::failed;
             return c.get("tp") == 2 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto c = culprit_of("dp=4,tp=1,pp=1", "dp=2,tp=2,pp=2", o);
  EXPECT_EQ(c.degrees, std::vector<std::string>({"tp"}));
  EXPECT_EQ(c.after.get("tp"), 2);
  EXPECT_EQ(c.after.get("pp"), 1);
}

TEST(BisectSearch, CheaperConfigurationsAreTriedFirstWhereTheOrderIsFree) {
  std::vector<std::string> order;
  Oracle o{[&](const bisect::Config& c) {
             order.push_back(c.text());
             return c.get("sp") == 1 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto base = bisect::parse_config("dp=1,tp=1,sp=0", "--base"),
             test = bisect::parse_config("dp=8,tp=2,sp=1", "--test");
  const auto world = [](const bisect::Config& c) { return c.get("dp") * c.get("tp"); };
  const auto c = bisect::find_culprit(
      base, test, [&](const bisect::Config& c) { return o(c); }, [] { return false; }, world);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->degrees, std::vector<std::string>({"sp"}));
  // After the walk (dp, tp, sp), undoing dp (2 ranks) comes before undoing tp (8 ranks).
  ASSERT_GE(order.size(), 5u);
  EXPECT_EQ(order[3], "dp=1,tp=2,sp=1");
}

TEST(BisectSearch, TheConfigurationTheCulpritActsOnDoesNotDivergeAlready) {
  // Undoing a and then b one at a time says nothing of the two together: a=0,b=1,c=0 diverges.
  const auto rule = [](const bisect::Config& c) {
    if (c.get("c") == 1 && c.get("b") == 0) return bisect::VersusBase::failed;
    if (c.get("b") == 1 && (c.get("a") == 0 || c.get("c") == 1)) return bisect::VersusBase::bug;
    return bisect::VersusBase::noise;
  };
  Oracle o{rule, {}};
  const auto c = culprit_of("a=0,b=0,c=0", "a=1,b=1,c=1", o);
  EXPECT_NE(rule(c.before), bisect::VersusBase::bug) << c.before.text();
  EXPECT_EQ(rule(c.after), bisect::VersusBase::bug) << c.after.text();
  EXPECT_EQ(c.degrees, std::vector<std::string>({"b"}));
}

TEST(BisectSearch, APrerequisiteAmongChangesThatCameInTogetherIsNotBlamed) {
  // --test names sp before tp: the walk's sp step does not run, the tp step diverges.
  Oracle o{[](const bisect::Config& c) {
             if (c.get("sp") == 1 && c.get("tp") == 1) return bisect::VersusBase::failed;
             return c.get("sp") == 1 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto c = culprit_of("dp=4,sp=0,tp=1", "dp=2,sp=1,tp=2", o);
  EXPECT_EQ(c.degrees, std::vector<std::string>({"sp"}));
  EXPECT_EQ(c.prerequisites, std::vector<std::string>({"tp"}));
  EXPECT_EQ(c.before.get("tp"), 2);
}

TEST(BisectSearch, AStopEndsTheSearchWithoutAnAnswer) {
  Oracle o{[](const bisect::Config& c) {
             return c.get("pp") == 2 ? bisect::VersusBase::bug : bisect::VersusBase::noise;
           },
           {}};
  const auto c = bisect::find_culprit(
      bisect::parse_config("dp=4,pp=1", "--base"), bisect::parse_config("dp=2,pp=2", "--test"),
      [&](const bisect::Config& c) { return o(c); }, [] { return true; });
  EXPECT_FALSE(c);
  EXPECT_TRUE(o.asked.empty());
}

TEST(BisectConfigs, TheTemplateTakesDegreesOutAndWorld) {
  const bisect::Launch l{
      "torchrun --nproc-per-node {world} train --tp {tp} --stages {pp} --out {out} {tp}",
      {"dp", "tp", "pp"}};
  const auto c = bisect::parse_config("dp=2,tp=2,pp=2", "--base");
  EXPECT_EQ(l.world_size(c), 8);
  EXPECT_EQ(l.command(c, "o/r"), "torchrun --nproc-per-node 8 train --tp 2 --stages 2 --out o/r 2");
  EXPECT_EQ(l.placeholders(), std::vector<std::string>({"world", "tp", "pp", "out"}));
  EXPECT_NO_THROW(bisect::check(l, c, bisect::parse_config("dp=4,tp=1,pp=1", "--test")));
  EXPECT_EQ(c.dir_name(), "dp2-tp2-pp2");
}

TEST(BisectConfigs, BadInputIsNamed) {
  const auto base = bisect::parse_config("dp=2,tp=1", "--base"),
             test = bisect::parse_config("dp=1,tp=2", "--test");
  const auto message = [&](const bisect::Launch& l, const bisect::Config& t) {
    try {
      bisect::check(l, base, t);
    } catch (const bisect::BadInput& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"train --tp {tp} --dp {dp}", {}}, test).find("has no {out}"),
            std::string::npos);
  EXPECT_NE(message({"train --tp {tp} --out {out}", {}}, test).find("name dp, which neither"),
            std::string::npos);
  EXPECT_NE(message({"train {dp} {tp} {world} --out {out}", {}}, test).find("{world} but --world"),
            std::string::npos);
  EXPECT_NE(message({"train {dp} {tp} {sp} --out {out}", {}}, test).find("{sp}, which --base"),
            std::string::npos);
  EXPECT_NE(message({"train {dp} {tp} --out {out}", {}}, bisect::parse_config("dp=1", "--test"))
                .find("--test does not"),
            std::string::npos);
  EXPECT_NE(message({"train {tp} --out {out}", {"dp", "pp"}}, test).find("--world names pp"),
            std::string::npos);
  EXPECT_THROW(bisect::parse_config("dp=2,dp=3", "--base"), bisect::BadInput);
  EXPECT_THROW(bisect::parse_config("dp=", "--base"), bisect::BadInput);
  EXPECT_THROW(bisect::parse_config("=2", "--base"), bisect::BadInput);
  // dp counted through --world
  EXPECT_NO_THROW(bisect::check({"train {tp} --out {out}", {"dp"}}, base, test));
  EXPECT_NE(
      message({"train {dp} {tp} --out {out}", {}}, bisect::parse_config("dp=-1,tp=2", "--test"))
          .find("--test dp=-1"),
      std::string::npos);
  EXPECT_THROW(bisect::check({"train {out} {dp}", {}}, bisect::parse_config("out=1,dp=1", "--base"),
                             bisect::parse_config("out=1,dp=2", "--test")),
               bisect::BadInput);
}

TEST(BisectConfigs, TheShellsOwnBracesAndOddDirectoriesAreLeftToTheShell) {
  const bisect::Launch l{"cd ${HOME} && train --tp {tp} --out {out}", {}};
  EXPECT_EQ(l.placeholders(), std::vector<std::string>({"tp", "out"}));
  const auto c = bisect::parse_config("tp=2", "--base");
  EXPECT_EQ(l.command(c, "runs/a b{world}"), "cd ${HOME} && train --tp 2 --out 'runs/a b{world}'");
  EXPECT_EQ(bisect::in_order_of(bisect::parse_config("tp=2,dp=1", "--test"),
                                bisect::parse_config("dp=4,tp=1", "--base"))
                .text(),
            "dp=1,tp=2");
}
