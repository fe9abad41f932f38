//===- TraceWriter.cpp - Chrome trace events ------------------------------===//

#include "tools/driver/TraceWriter.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;

namespace {

constexpr int64_t kPid = 1;
constexpr int64_t kStepsTid = 1;
constexpr int64_t kNodesTid = 2;

llvm::json::Object metadata(llvm::StringRef what, std::optional<int64_t> tid,
                            llvm::StringRef name) {
  llvm::json::Object event{{"name", what},
                           {"ph", "M"},
                           {"pid", kPid},
                           {"args", llvm::json::Object{{"name", name}}}};
  if (tid)
    event["tid"] = *tid;
  return event;
}

} // namespace

llvm::json::Value gmopt::traceJson(llvm::ArrayRef<TraceStep> steps,
                                   llvm::StringRef processName) {
  llvm::json::Array events;
  events.push_back(metadata("process_name", std::nullopt, processName));
  events.push_back(metadata("thread_name", kStepsTid, "steps"));
  events.push_back(metadata("thread_name", kNodesTid, "nodes"));
  for (const TraceStep &step : steps) {
    std::string name =
        step.microSteps > 1
            ? llvm::formatv("step {0} (micro-step {1}/{2})", step.step,
                            step.microStep, step.microSteps)
                  .str()
            : llvm::formatv("step {0}", step.step).str();
    events.push_back(llvm::json::Object{{"name", name},
                                        {"cat", "step"},
                                        {"ph", "X"},
                                        {"ts", step.startMicros},
                                        {"dur", step.durationMicros},
                                        {"pid", kPid},
                                        {"tid", kStepsTid}});
    for (const TraceSlice &slice : step.slices) {
      double ts = step.startMicros + slice.startMicros;
      events.push_back(llvm::json::Object{
          {"name", slice.op},
          {"cat", "node"},
          {"ph", "X"},
          {"ts", ts},
          {"dur", slice.durationMicros},
          {"pid", kPid},
          {"tid", kNodesTid},
          {"args", llvm::json::Object{{"node", slice.node},
                                      {"phase", slice.phase},
                                      {"step", int64_t(step.step)}}}});
      llvm::json::Object bytes;
      for (unsigned c = 0; c != kNumMemoryCategories; ++c)
        bytes[memoryCategoryName(static_cast<MemoryCategory>(c))] =
            static_cast<int64_t>(slice.liveBytes[c]);
      events.push_back(llvm::json::Object{{"name", "live bytes"},
                                          {"ph", "C"},
                                          {"ts", ts},
                                          {"pid", kPid},
                                          {"args", std::move(bytes)}});
    }
  }
  return llvm::json::Object{{"traceEvents", std::move(events)},
                            {"displayTimeUnit", "ms"}};
}
