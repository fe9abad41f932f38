//===- Timeline.h - The memory timeline page (--timeline) -------*- C++ -*-===//
//
// One self-contained HTML page (inline SVG, no script, nothing fetched)
// that shows the live bytes of a training step over its schedule, stacked
// by memory category, one panel per plan (the baseline and the optimized
// one side by side on the same byte scale). Every tensor is a band; its SVG
// <title> (the browser's native tooltip) names the tensor, its bytes, its
// category, its producer and its live steps. Each panel marks its peak with
// the node that runs there and shades the runs of recompute nodes. The
// writer takes plain data; PlanTimeline.h gathers it from a module's plan.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_TIMELINE_H
#define GMOPT_TOOLS_DRIVER_TIMELINE_H

#include "ir/Plan.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gmopt {

/// One tensor's storage over the schedule.
struct TimelineBand {
  /// The tensor (its value name).
  std::string tensor;
  /// What defines it: `Op 'node'`, `graph input` or `initializer`.
  std::string producer;
  MemoryCategory category = MemoryCategory::Temporaries;
  /// Bytes held (at allocation size).
  uint64_t bytes = 0;
  /// The steps it is live at, inclusive.
  uint32_t firstStep = 0;
  uint32_t lastStep = 0;
};

/// One schedule and the bands live over it.
struct TimelinePanel {
  /// The heading (`baseline: original graph, eager`).
  std::string title;
  /// The node at each step (`Op 'name'`); its size is the step count.
  std::vector<std::string> steps;
  /// Per step: the node is a recompute clone (shaded). Empty: none.
  std::vector<bool> recompute;
  /// Every tensor with storage of its own (views and in-place results
  /// share their source's band).
  std::vector<TimelineBand> bands;
  /// The bytes the plan reserves (arena + persistent), drawn as a dashed
  /// line when given.
  std::optional<uint64_t> reservedBytes;
};

/// The live-byte maximum of a panel.
struct TimelinePeak {
  uint64_t bytes = 0;
  /// The first step where it occurs.
  uint32_t step = 0;
  /// The split by category at that step.
  CategoryBytes byCategory{};
};

/// Bytes of the bands live at each step of \p panel.
std::vector<uint64_t> timelineLiveBytes(const TimelinePanel &panel);

/// The peak of \p panel (zero bytes at step 0 for an empty one).
TimelinePeak timelinePeak(const TimelinePanel &panel);

/// The HTML page: \p title as its heading, then one SVG holding \p panels
/// side by side, all drawn on the scale of the largest peak. A band thinner
/// than a pixel's fraction is merged with the other thin ones of its
/// category into one band that says how many tensors it holds, so the page
/// stays small for large graphs.
std::string renderTimelineHtml(llvm::StringRef title,
                               llvm::ArrayRef<TimelinePanel> panels);

/// \p bytes for people: `512 B`, `1.50 KiB`, `12.3 MiB`, `2.00 GiB`.
std::string formatTimelineBytes(uint64_t bytes);

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_TIMELINE_H
