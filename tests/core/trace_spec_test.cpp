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
  const auto spec = TraceSpec::parse("steps=7;scopes=^layers\\.3\\.;phases=forward,backward;mb=0-3");
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
  EXPECT_NE(error_of("steps=x").find("steps: 'x' is not a non-negative integer"), std::string::npos);
  EXPECT_NE(error_of("steps=5-3").find("range '5-3' ends before it starts"), std::string::npos);
  EXPECT_NE(error_of("scopes=(").find("scopes: '(' is not a regular expression"), std::string::npos);
  EXPECT_NE(error_of("phases=sideways").find("'sideways' is not forward or backward"), std::string::npos);
  EXPECT_NE(error_of("layer=3").find("unknown field 'layer'"), std::string::npos);
  EXPECT_NE(error_of("steps").find("field 'steps' has no '='"), std::string::npos);
  EXPECT_NE(error_of("steps=1;steps=2").find("field 'steps' given twice"), std::string::npos);
  EXPECT_NE(error_of("mb=").find("mb is empty"), std::string::npos);
  EXPECT_NE(error_of("layer=3").find("trace setting 'layer=3'"), std::string::npos);
}
