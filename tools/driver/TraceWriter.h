//===- TraceWriter.h - gmopt-run --trace: Chrome trace events ---*- C++ -*-===//
//
// The nodes of every micro-step as the Trace Event Format that Perfetto and
// chrome://tracing open: metadata naming the process and its two tracks,
// one complete event ("ph":"X", ts and dur in microseconds) per micro-step
// on the `steps` track and one per node on the `nodes` track (name: the op;
// cat: `node`; args: the node's name, phase and optimizer step), and a
// counter event ("ph":"C", name `live bytes`) at each node's start with the
// bytes live per memory category while it ran. The writer takes plain data.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_TRACEWRITER_H
#define GMOPT_TOOLS_DRIVER_TRACEWRITER_H

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace gmopt {

/// One node's run.
struct TraceSlice {
  /// The op (`MatMul`) and the node's name.
  std::string op;
  std::string node;
  /// `forward`, `backward`, `optimizer` or `recompute`.
  std::string phase;
  /// Start since its micro-step started, and duration, in microseconds.
  double startMicros = 0;
  double durationMicros = 0;
  /// Bytes live per category while it ran.
  CategoryBytes liveBytes{};
};

/// One micro-step.
struct TraceStep {
  /// The optimizer step (from 1) and the micro-step within it (from 1).
  unsigned step = 1;
  unsigned microStep = 1;
  unsigned microSteps = 1;
  /// Start since the run started, and wall time, in microseconds.
  double startMicros = 0;
  double durationMicros = 0;
  std::vector<TraceSlice> slices;
};

/// The trace document: {"traceEvents": [...], "displayTimeUnit": "ms"},
/// the process named \p processName.
llvm::json::Value traceJson(llvm::ArrayRef<TraceStep> steps,
                            llvm::StringRef processName);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_TRACEWRITER_H
