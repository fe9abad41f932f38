//===- PhaseTimerTest.cpp - gmopt-compile's phase timer -------------------===//
//
// The phases come out in the order they ran, each with its kind; the pass
// manager's timings keep pipeline order, with the plan-writing pass as the
// plan phase and the verifier last; sums per kind add up to the total.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/PhaseTimer.h"

#include "passes/PassManager.h"

#include "ir/Module.h"
#include "ir/serialization/TextIR.h"

#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace gmopt;

namespace {

TEST(PhaseTimerTest, PhasesInOrderWithKindsAndSums) {
  PhaseTimer timer;
  timer.start("import", PhaseKind::Import);
  timer.start("write .gm", PhaseKind::Write);
  timer.stop();
  timer.stop(); // no running phase: nothing added
  ASSERT_EQ(timer.getPhases().size(), 2u);
  EXPECT_EQ(timer.getPhases()[0].name, "import");
  EXPECT_EQ(timer.getPhases()[0].kind, PhaseKind::Import);
  EXPECT_EQ(timer.getPhases()[1].kind, PhaseKind::Write);
  EXPECT_DOUBLE_EQ(timer.getTotalSeconds(),
                   timer.getSeconds(PhaseKind::Import) +
                       timer.getSeconds(PhaseKind::Write));
  EXPECT_EQ(timer.getSeconds(PhaseKind::Plan), 0.0);
  EXPECT_GE(timer.getTotalCpuSeconds(), 0.0);

  llvm::json::Object json = timer.toJson();
  const llvm::json::Array *phases = json.getArray("phases");
  ASSERT_TRUE(phases);
  ASSERT_EQ(phases->size(), 2u);
  const llvm::json::Object *first = (*phases)[0].getAsObject();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->getString("kind"), llvm::StringRef("import"));
  EXPECT_TRUE(first->getNumber("cpu_seconds"));
  const llvm::json::Object *byKind = json.getObject("seconds_by_kind");
  ASSERT_TRUE(byKind);
  EXPECT_TRUE(byKind->getNumber("plan"));
  EXPECT_TRUE(json.getObject("cpu_seconds_by_kind"));
  EXPECT_TRUE(json.getNumber("total_seconds"));
}

TEST(PhaseTimerTest, PassTimingsKeepPipelineOrderAndMarkThePlanner) {
  auto module = parseModule(R"(
module attributes {opsets = {"" = 17}} {
  graph @g(%x: f32[4]) {
    %a = Relu(%x) : f32[4]
    return %a
  }
}
)",
                            "phase-timer");
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  PassManager manager;
  ASSERT_FALSE(static_cast<bool>(
      manager.addPipeline("canonicalize,schedule,plan-buffers")));
  ASSERT_FALSE(static_cast<bool>(manager.run(**module)));
  PhaseTimer timer;
  timer.start("import", PhaseKind::Import);
  timer.addPassTimings(manager);
  llvm::ArrayRef<PhaseTiming> phases = timer.getPhases();
  ASSERT_EQ(phases.size(), 5u);
  EXPECT_EQ(phases[0].kind, PhaseKind::Import);
  EXPECT_EQ(phases[1].name, "canonicalize");
  EXPECT_EQ(phases[1].kind, PhaseKind::Pass);
  EXPECT_EQ(phases[2].name, "schedule");
  EXPECT_EQ(phases[2].kind, PhaseKind::Pass);
  EXPECT_EQ(phases[3].name, "plan-buffers");
  EXPECT_EQ(phases[3].kind, PhaseKind::Plan);
  EXPECT_EQ(phases[4].name, "(verifier)");
  EXPECT_EQ(phases[4].kind, PhaseKind::Verify);

  std::string table;
  llvm::raw_string_ostream os(table);
  timer.print(os);
  EXPECT_NE(table.find("plan          plan-buffers\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("all verify\n"), std::string::npos) << table;
}

} // namespace
