#include "probe/trace_spec.h"

#include <gtest/gtest.h>

#include <stdexcept>

using probe::TraceSpec;

namespace {
std::string error_of(const std::string& text) {
  try {
    TraceSpec::parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TraceSpec, EmptyTracesNothing) {
  const auto spec = TraceSpec::parse("");
  EXPECT_FALSE(spec.enabled());
  EXPECT_FALSE(spec.traces_step(0));
  EXPECT_FALSE(spec.traces_scope("layers.0"));
  EXPECT_EQ(spec.text(), "");
}

TEST(TraceSpec, FieldsSelectStepsScopesPhasesAndMicrobatches) {
  const auto spec =
      TraceSpec::parse("steps=7;scopes=^layers\\.3\\.;phases=forward,backward;mb=0-3");
  EXPECT_TRUE(spec.traces_step(7));
  EXPECT_FALSE(spec.traces_step(6));
  EXPECT_TRUE(spec.traces_scope("layers.3.attention"));
  EXPECT_FALSE(spec.traces_scope("layers.3"));
  EXPECT_FALSE(spec.traces_scope("layers.13.attention"));
  EXPECT_TRUE(spec.traces_forward());
  EXPECT_TRUE(spec.traces_backward());
  EXPECT_TRUE(spec.traces_microbatch(0));
  EXPECT_TRUE(spec.traces_microbatch(3));
  EXPECT_FALSE(spec.traces_microbatch(4));
  EXPECT_FALSE(spec.traces_microbatch(std::nullopt));  // a microbatch filter needs a microbatch
  EXPECT_EQ(spec.text(), "steps=7;scopes=^layers\\.3\\.;mb=0-3");
  EXPECT_EQ(TraceSpec::parse(spec.text()).text(), spec.text());
}

TEST(TraceSpec, DefaultsTraceEveryStepScopeAndPhase) {
  const auto spec = TraceSpec::parse("phases=backward");
  EXPECT_TRUE(spec.traces_step(123));
  EXPECT_TRUE(spec.traces_scope(""));
  EXPECT_FALSE(spec.traces_forward());
  EXPECT_TRUE(spec.traces_backward());
  EXPECT_TRUE(spec.traces_microbatch(std::nullopt));
  const auto lists = TraceSpec::parse("steps=1,4,7-9");
  EXPECT_TRUE(lists.traces_step(8));
  EXPECT_FALSE(lists.traces_step(5));
  EXPECT_EQ(lists.text(), "steps=1,4,7-9");
}

TEST(TraceSpec, BadSettingsSayWhichFieldIsWrong) {
  EXPECT_NE(error_of("steps=x").find("steps: 'x' is not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of("steps=5-3").find("range '5-3' ends before it starts"), std::string::npos);
  EXPECT_NE(error_of("scopes=(").find("scopes: '(' is not a regular expression"),
            std::string::npos);
  EXPECT_NE(error_of("phases=sideways").find("'sideways' is not forward or backward"),
            std::string::npos);
  EXPECT_NE(error_of("layer=3").find("unknown field 'layer'"), std::string::npos);
  EXPECT_NE(error_of("steps").find("field 'steps' has no '='"), std::string::npos);
  EXPECT_NE(error_of("steps=1;steps=2").find("field 'steps' given twice"), std::string::npos);
  EXPECT_NE(error_of("mb=").find("mb is empty"), std::string::npos);
  EXPECT_NE(error_of("layer=3").find("trace setting 'layer=3'"), std::string::npos);
}

TEST(TraceSpec, DumpSavesTracedOpsUpToACap) {
  EXPECT_FALSE(TraceSpec::parse("steps=0").dumps());
  const auto spec = TraceSpec::parse("steps=0;dump=1");
  EXPECT_TRUE(spec.dumps());
  EXPECT_EQ(spec.dump_cap_bytes(), TraceSpec::kDefaultDumpCapMiB << 20);
  EXPECT_EQ(spec.text(), "steps=0;dump=1");
  const auto capped = TraceSpec::parse("dump=1;dump_cap=3;steps=0");
  EXPECT_EQ(capped.dump_cap_bytes(), 3 << 20);
  EXPECT_EQ(capped.text(), "steps=0;dump=1;dump_cap=3");
  EXPECT_EQ(TraceSpec::parse(capped.text()).text(), capped.text());
  EXPECT_FALSE(TraceSpec::parse("dump=0").dumps());
  EXPECT_NE(error_of("dump=yes").find("dump: 'yes' is not 0 or 1"), std::string::npos);
  EXPECT_NE(error_of("dump=1;dump_cap=0").find("dump_cap: '0' MiB is not between 1 and 2^40"),
            std::string::npos);
  EXPECT_NE(error_of("dump_cap=5").find("dump_cap is a cap on dumps: it needs dump=1"),
            std::string::npos);
}
