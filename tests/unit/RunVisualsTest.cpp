//===- RunVisualsTest.cpp - Timeline page, trace events, progress line ----===//
//
// The writers behind gmopt-run --timeline / --trace and its progress line,
// on plain data: the stacked live bytes and their peak, the page's
// structure (one SVG, a panel per plan, a band per tensor by category, the
// peak marker naming its node, recompute shading only where there is
// recompute, thin bands merged, text escaped), the trace's events, and the
// progress line's text, delay and erasing; and the panels gathered from a
// compiled module's plan against the plan's own figures.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/PlanTimeline.h"
#include "tools/driver/Progress.h"
#include "tools/driver/Runtime.h"
#include "tools/driver/Timeline.h"
#include "tools/driver/TraceWriter.h"

#include "ir/Module.h"
#include "tests/unit/TestPaths.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace gmopt;

namespace {

size_t occurrences(llvm::StringRef text, llvm::StringRef what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != llvm::StringRef::npos;
       at = text.find(what, at + what.size()))
    ++n;
  return n;
}

TimelineBand band(std::string tensor, MemoryCategory category, uint64_t bytes,
                  uint32_t first, uint32_t last) {
  TimelineBand result;
  result.tensor = std::move(tensor);
  result.producer = "MatMul 'mm_" + result.tensor + "'";
  result.category = category;
  result.bytes = bytes;
  result.firstStep = first;
  result.lastStep = last;
  return result;
}

/// Four steps: a parameter over all of them, two activations and a
/// temporary; the peak is at step 2 (w + a + b + t).
TimelinePanel samplePanel() {
  TimelinePanel panel;
  panel.title = "sample";
  panel.steps = {"MatMul 'n0'", "Relu 'n1'", "Add 'n2'", "Sum 'n3'"};
  panel.bands = {band("w", MemoryCategory::Parameters, 4096, 0, 3),
                 band("a", MemoryCategory::Activations, 2048, 0, 2),
                 band("b", MemoryCategory::Activations, 1024, 1, 3),
                 band("t", MemoryCategory::Temporaries, 512, 2, 2)};
  return panel;
}

TEST(TimelineTest, LiveBytesAndPeak) {
  TimelinePanel panel = samplePanel();
  std::vector<uint64_t> live = timelineLiveBytes(panel);
  EXPECT_EQ(live, (std::vector<uint64_t>{6144, 7168, 7680, 5120}));
  TimelinePeak peak = timelinePeak(panel);
  EXPECT_EQ(peak.bytes, 7680u);
  EXPECT_EQ(peak.step, 2u);
  EXPECT_EQ(peak.byCategory[unsigned(MemoryCategory::Parameters)], 4096u);
  EXPECT_EQ(peak.byCategory[unsigned(MemoryCategory::Activations)], 3072u);
  EXPECT_EQ(peak.byCategory[unsigned(MemoryCategory::Temporaries)], 512u);
}

TEST(TimelineTest, PageStructure) {
  TimelinePanel baseline = samplePanel();
  TimelinePanel optimized = samplePanel();
  optimized.title = "optimized";
  optimized.bands.pop_back(); // no temporary: peak 7168 at step 1
  optimized.recompute = {false, true, true, false};
  optimized.reservedBytes = 8192;
  std::string html =
      renderTimelineHtml("a <model> & co", {baseline, optimized});
  llvm::StringRef page(html);
  EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(occurrences(page, "<svg"), 1u);
  EXPECT_EQ(occurrences(page, "<g class=\"panel\""), 2u);
  // Nothing fetched: no script, no external reference but the SVG namespace.
  EXPECT_EQ(occurrences(page, "<script"), 0u);
  EXPECT_EQ(occurrences(page, "http"), 1u);
  // A band per tensor (legend swatches are rects without a <title>).
  EXPECT_EQ(occurrences(
                page, "<title>&#39;w&#39;: 4.00 KiB (4096 bytes), parameters"),
            2u);
  EXPECT_EQ(
      occurrences(page, "<title>&#39;t&#39;: 512 B (512 bytes), temporaries"),
      1u);
  EXPECT_EQ(occurrences(page, "produced by MatMul &#39;mm_a&#39;"), 2u);
  // The parameter lies under everything: one rect over all four steps.
  EXPECT_NE(page.find("<rect class=\"band parameters\" x=\"72\""),
            llvm::StringRef::npos);
  // b sits on a, which ends before it: a path whose bottom drops.
  EXPECT_EQ(occurrences(page, "<path class=\"band activations\""), 2u);
  EXPECT_NE(page.find("peak 7.50 KiB at step 2: Add &#39;n2&#39;"),
            llvm::StringRef::npos);
  EXPECT_NE(page.find("peak 7.00 KiB at step 1: Relu &#39;n1&#39;"),
            llvm::StringRef::npos);
  EXPECT_EQ(occurrences(page, "class=\"recompute\""), 1u);
  EXPECT_NE(page.find("recompute: steps 1-2 (Relu &#39;n1&#39; ... Add "
                      "&#39;n2&#39;), 2 nodes"),
            llvm::StringRef::npos);
  EXPECT_EQ(occurrences(page, "class=\"reserved\""), 1u);
  EXPECT_NE(page.find("<h1>a &lt;model&gt; &amp; co</h1>"),
            llvm::StringRef::npos);
  EXPECT_NE(page.find("peak reduction: 6.7%"), llvm::StringRef::npos);

  // Without recompute nodes there is no shading.
  std::string plain = renderTimelineHtml("m", {baseline});
  EXPECT_EQ(occurrences(plain, "class=\"recompute\""), 0u);
  EXPECT_EQ(occurrences(plain, "<g class=\"panel\""), 1u);
}

TEST(TimelineTest, ThinBandsMerge) {
  TimelinePanel panel;
  panel.title = "many";
  panel.steps.assign(10, "Relu 'r'");
  panel.bands.push_back(
      band("big", MemoryCategory::Activations, 1 << 20, 0, 9));
  for (uint32_t i = 0; i != 100; ++i)
    panel.bands.push_back(band("small" + std::to_string(i),
                               MemoryCategory::Temporaries, 256, i % 10,
                               i % 10));
  std::string html = renderTimelineHtml("m", {panel});
  EXPECT_EQ(occurrences(html, "&#39;small"), 0u);
  EXPECT_EQ(occurrences(html,
                        "100 smaller temporaries tensors (each at most 256 B), "
                        "2.50 KiB together at most"),
            1u);
  EXPECT_EQ(timelinePeak(panel).bytes, (1u << 20) + 2560u);
}

TEST(TimelineTest, FormatBytes) {
  EXPECT_EQ(formatTimelineBytes(0), "0 B");
  EXPECT_EQ(formatTimelineBytes(1023), "1023 B");
  EXPECT_EQ(formatTimelineBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatTimelineBytes(12u << 20), "12.0 MiB");
  EXPECT_EQ(formatTimelineBytes(uint64_t(3) << 30), "3.00 GiB");
}

TEST(PlanTimelineTest, PanelsFollowThePlans) {
  std::string dir = gmopt::testdataDir() + "/mlp";
  for (llvm::StringRef pipeline :
       {"canonicalize,schedule,plan-buffers",
        "canonicalize,recompute{mode=full},schedule,plan-buffers"}) {
    auto model =
        loadRunnableModel(dir + "/training_model.onnx", {{"batch", 8}}, nullptr,
                          /*wantOriginal=*/true, pipeline);
    ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
    const Module &module = *model->module;
    const ExecutionPlan &plan = module.plan;
    TimelinePanel panel = timelinePanelFromPlan(module, plan, "opt", true);
    ASSERT_EQ(panel.steps.size(), module.getGraph().getNumNodes());
    // A band per value with storage of its own and per workspace slice.
    size_t owners = 0;
    for (const auto &[value, assignment] : plan.buffers)
      owners += assignment.kind != StorageKind::Alias;
    EXPECT_EQ(panel.bands.size(), owners + plan.workspaces.size());
    // The peak is the plan's live-byte bound on top of its persistent bytes.
    TimelinePeak peak = timelinePeak(panel);
    EXPECT_EQ(peak.bytes, plan.figures.lowerBoundBytes +
                              plan.figures.totalPersistentBytes());
    EXPECT_EQ(peak.step, plan.figures.lowerBoundStep);
    EXPECT_EQ(panel.reservedBytes, plan.figures.plannedBytes());
    size_t clones = 0;
    for (const Node &node : module.getGraph().getNodes())
      clones += node.getPhase() == Phase::Recompute;
    EXPECT_EQ(size_t(llvm::count(panel.recompute, true)), clones);
    EXPECT_EQ(panel.recompute.empty(), clones == 0);
    if (pipeline.contains("recompute")) {
      EXPECT_GT(clones, 0u);
    }
    // The baseline panel is the original graph's eager estimate.
    auto eager = makeTrivialPlan(*model->original,
                                 getWorkspaceModel(WorkspaceTarget::Cpu));
    ASSERT_TRUE(bool(eager)) << llvm::toString(eager.takeError());
    TimelinePanel baseline =
        timelinePanelFromPlan(*model->original, *eager, "base", false);
    EXPECT_EQ(timelinePeak(baseline).bytes, eager->figures.eagerEstimateBytes);
    EXPECT_FALSE(baseline.reservedBytes);
  }
}

TEST(TraceWriterTest, EventsPerNodeAndStep) {
  std::vector<TraceStep> steps(2);
  for (unsigned i = 0; i != 2; ++i) {
    steps[i].step = 1;
    steps[i].microStep = i + 1;
    steps[i].microSteps = 2;
    steps[i].startMicros = 1000.0 * i;
    steps[i].durationMicros = 900;
    for (unsigned n = 0; n != 3; ++n) {
      TraceSlice slice;
      slice.op = n == 1 ? "MatMul" : "Relu";
      slice.node = "node" + std::to_string(n);
      slice.phase = "forward";
      slice.startMicros = 100.0 * n;
      slice.durationMicros = 50;
      slice.liveBytes[unsigned(MemoryCategory::Activations)] = 256 * (n + 1);
      steps[i].slices.push_back(slice);
    }
  }
  llvm::json::Value trace = traceJson(steps, "gmopt-run test");
  const llvm::json::Array *events =
      trace.getAsObject()->getArray("traceEvents");
  ASSERT_TRUE(events);
  unsigned nodes = 0, counters = 0, stepSlices = 0, metadata = 0;
  for (const llvm::json::Value &event : *events) {
    const llvm::json::Object &e = *event.getAsObject();
    llvm::StringRef ph = *e.getString("ph");
    if (ph == "M")
      ++metadata;
    else if (ph == "C") {
      ++counters;
      EXPECT_TRUE(e.getObject("args")->getInteger("activations"));
    } else if (*e.getString("cat") == "node") {
      ++nodes;
      EXPECT_TRUE(e.getObject("args")->getString("node"));
    } else {
      ++stepSlices;
    }
  }
  EXPECT_EQ(metadata, 3u);
  EXPECT_EQ(nodes, 6u);
  EXPECT_EQ(counters, 6u);
  EXPECT_EQ(stepSlices, 2u);
  // The second micro-step's MatMul: its step's start plus its own.
  std::string text;
  llvm::raw_string_ostream(text) << trace;
  EXPECT_NE(text.find("\"name\":\"step 1 (micro-step 2/2)\""),
            std::string::npos);
  EXPECT_NE(text.find("\"dur\":50,\"name\":\"MatMul\",\"ph\":\"X\",\"pid\":1,"
                      "\"tid\":2,\"ts\":1100"),
            std::string::npos);
}

TEST(ProgressTest, LineText) {
  EXPECT_EQ(formatProgressLine(3, 10, 2.5, 412.54, 2.94),
            "step 3/10  loss 2.500000  412.5 ms/step  ETA 2.9 s");
  EXPECT_EQ(formatProgressLine(10, 10, 2.5, 1, 0),
            "step 10/10  loss 2.500000  1.0 ms/step");
  EXPECT_EQ(formatProgressDuration(42.4), "42 s");
  EXPECT_EQ(formatProgressDuration(185), "3m05s");
  EXPECT_EQ(formatProgressDuration(7620), "2h07m");
  EXPECT_EQ(formatProgressDuration(-1), "0.0 s");
}

TEST(ProgressTest, DelayEraseAndDisabled) {
  double now = 100;
  auto clock = [&now] { return now; };
  std::string text;
  llvm::raw_string_ostream os(text);
  {
    ProgressLine line(os, true, 1.0, clock);
    now = 100.5; // before the delay: nothing
    line.update(1, 4, 3.0, 500);
    EXPECT_TRUE(text.empty());
    EXPECT_FALSE(line.isShown());
    now = 102; // two steps in 2 s: 2 s to go
    line.update(2, 4, 2.0, 750);
    EXPECT_EQ(text,
              "\rstep 2/4  loss 2.000000  750.0 ms/step  ETA 2.0 s\x1b[K");
    EXPECT_TRUE(line.isShown());
    // Redrawn at most ten times a second.
    now = 102.05;
    line.update(3, 4, 1.5, 700);
    EXPECT_EQ(text,
              "\rstep 2/4  loss 2.000000  750.0 ms/step  ETA 2.0 s\x1b[K");
    // A write to the wrapped stream erases the line first.
    std::string out;
    llvm::raw_string_ostream target(out);
    ProgressClearingStream clearing(target, line);
    clearing << "step 2: loss 2\n";
    EXPECT_EQ(out, "step 2: loss 2\n");
    EXPECT_FALSE(line.isShown());
    EXPECT_TRUE(llvm::StringRef(text).ends_with("\r\x1b[K"));
    text.clear();
    line.update(3, 4, 1.0, 700);
  }
  // The destructor erased the line it left.
  EXPECT_TRUE(llvm::StringRef(text).ends_with("\x1b[K\r\x1b[K"));

  std::string quiet;
  llvm::raw_string_ostream quietStream(quiet);
  ProgressLine off(quietStream, false, 0, clock);
  off.update(1, 2, 1.0, 1);
  off.clear();
  EXPECT_TRUE(quiet.empty());
}

} // namespace
