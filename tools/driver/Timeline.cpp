//===- Timeline.cpp - The memory timeline page ----------------------------===//
//
// Layout: step s spans [x(s), x(s+1)) of a panel's plot; at each step the
// live bands are stacked bottom-up by category (parameters first), and
// within a category the bands live over the whole schedule first (their
// height never moves), then the merged thin bands, then the others by
// definition step. A band becomes one <rect> when nothing under it changes
// and one <path> of horizontal and vertical runs otherwise.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Timeline.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace gmopt;

namespace {

// Geometry of one panel, in CSS pixels.
constexpr double kPlotWidth = 680;
constexpr double kPlotHeight = 440;
constexpr double kMarginLeft = 72;
constexpr double kMarginRight = 24;
constexpr double kMarginTop = 76;
constexpr double kMarginBottom = 96;
constexpr double kPanelWidth = kMarginLeft + kPlotWidth + kMarginRight;
constexpr double kPanelHeight = kMarginTop + kPlotHeight + kMarginBottom;
/// The width of a character of a bold label, about.
constexpr double kLabelCharWidth = 7;
/// Bands thinner than this fraction of a pixel are merged per category.
constexpr double kThinPixels = 0.25;

constexpr const char *kColors[kNumMemoryCategories] = {
    "#4e79a7", "#e15759", "#b07aa1", "#59a14f", "#f28e2b", "#9c755f"};

std::string escape(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// \p value with at most \p decimals decimals, trailing zeros dropped.
std::string number(double value, unsigned decimals) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.*f", decimals, value);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0')
      text.pop_back();
    if (text.back() == '.')
      text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

/// A coordinate with one decimal (enough for a screen, short in the file).
std::string coord(double value) { return number(value, 1); }

llvm::StringRef categoryName(unsigned c) {
  return memoryCategoryName(static_cast<MemoryCategory>(c));
}

/// What is stacked: a band, or the thin bands of a category merged.
struct Item {
  unsigned category = 0;
  uint32_t first = 0, last = 0;
  /// Height of a band; unused for a merged item.
  uint64_t bytes = 0;
  /// A merged item's height at each step (indexed by step).
  const std::vector<uint64_t> *heights = nullptr;
  /// Bottom of the item at each step it is live, run-length encoded:
  /// (first step of the run, bottom).
  std::vector<std::pair<uint32_t, uint64_t>> bottoms;
  std::string tooltip;
  uint64_t heightAt(uint32_t step) const {
    return heights ? (*heights)[step] : bytes;
  }
};

/// Maps schedule steps and bytes to pixels of one panel.
struct Scale {
  double originX = 0;
  double stepWidth = 1;
  double bytesPerPixel = 1;
  double x(double step) const {
    return originX + kMarginLeft + step * stepWidth;
  }
  double y(double bytes) const {
    return kMarginTop + kPlotHeight - bytes / bytesPerPixel;
  }
};

std::string stepRange(const TimelinePanel &panel, uint32_t first,
                      uint32_t last) {
  auto label = [&](uint32_t step) {
    return step < panel.steps.size() ? panel.steps[step] : std::string();
  };
  if (first == last)
    return llvm::formatv("step {0} ({1})", first, label(first)).str();
  return llvm::formatv("steps {0}-{1} ({2} ... {3})", first, last, label(first),
                       label(last))
      .str();
}

/// The stacking order and the merged thin bands of one panel.
struct Stack {
  std::vector<Item> items;
  /// Per category, the merged thin bands' height at each step.
  std::vector<std::vector<uint64_t>> thinHeights;
};

Stack buildStack(const TimelinePanel &panel, uint32_t numSteps,
                 uint64_t thinBytes) {
  Stack stack;
  stack.thinHeights.assign(kNumMemoryCategories, {});
  std::vector<unsigned> thinCount(kNumMemoryCategories, 0);
  std::vector<uint64_t> thinLargest(kNumMemoryCategories, 0);
  std::vector<std::pair<uint64_t, size_t>> order; // (key, band index)
  for (size_t i = 0; i != panel.bands.size(); ++i) {
    const TimelineBand &band = panel.bands[i];
    if (!band.bytes || band.firstStep >= numSteps)
      continue;
    unsigned c = static_cast<unsigned>(band.category);
    uint32_t last = std::min(band.lastStep, numSteps - 1);
    if (band.bytes < thinBytes) {
      std::vector<uint64_t> &heights = stack.thinHeights[c];
      if (heights.empty())
        heights.assign(numSteps + 1, 0);
      // A difference array, summed below.
      heights[band.firstStep] += band.bytes;
      heights[last + 1] -= band.bytes;
      ++thinCount[c];
      thinLargest[c] = std::max(thinLargest[c], band.bytes);
      continue;
    }
    bool whole = band.firstStep == 0 && last + 1 == numSteps;
    // Category, then whole-schedule bands, then merged (slot 1), then by
    // definition step.
    uint64_t key =
        (uint64_t(c) << 56) | (whole ? 0 : (uint64_t(2 + band.firstStep) << 8));
    order.push_back({key, i});
  }
  for (unsigned c = 0; c != kNumMemoryCategories; ++c) {
    std::vector<uint64_t> &heights = stack.thinHeights[c];
    if (heights.empty())
      continue;
    uint64_t running = 0, most = 0;
    for (uint64_t &h : heights) {
      running += h;
      h = running;
      most = std::max(most, running);
    }
    order.push_back(
        {(uint64_t(c) << 56) | (uint64_t(1) << 8), panel.bands.size() + c});
    Item item;
    item.category = c;
    item.first = 0;
    item.last = numSteps - 1;
    item.heights = &heights;
    item.tooltip =
        llvm::formatv("{0} smaller {1} tensors (each at most {2}), {3} "
                      "together at most",
                      thinCount[c], categoryName(c),
                      formatTimelineBytes(thinLargest[c]),
                      formatTimelineBytes(most))
            .str();
    stack.items.push_back(std::move(item));
  }
  // Stable: bands of equal key keep their input order.
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<Item> merged = std::move(stack.items);
  stack.items.clear();
  for (const auto &[key, index] : order) {
    (void)key;
    if (index >= panel.bands.size()) {
      unsigned c = index - panel.bands.size();
      for (Item &item : merged)
        if (item.category == c)
          stack.items.push_back(std::move(item));
      continue;
    }
    const TimelineBand &band = panel.bands[index];
    Item item;
    item.category = static_cast<unsigned>(band.category);
    item.first = band.firstStep;
    item.last = std::min(band.lastStep, numSteps - 1);
    item.bytes = band.bytes;
    item.tooltip =
        llvm::formatv("'{0}': {1} ({2} bytes), {3}\nproduced by {4}\nlive at "
                      "{5}",
                      band.tensor, formatTimelineBytes(band.bytes), band.bytes,
                      categoryName(item.category), band.producer,
                      stepRange(panel, item.first, item.last))
            .str();
    stack.items.push_back(std::move(item));
  }
  return stack;
}

/// Fills every item's bottoms: a sweep over the steps with the live items
/// kept in stacking order.
void layOut(std::vector<Item> &items, uint32_t numSteps) {
  std::vector<std::vector<size_t>> bornAt(numSteps);
  for (size_t i = 0; i != items.size(); ++i)
    bornAt[items[i].first].push_back(i);
  std::set<size_t> live;
  for (uint32_t step = 0; step != numSteps; ++step) {
    for (size_t i : bornAt[step])
      live.insert(i);
    uint64_t cumulative = 0;
    for (auto it = live.begin(); it != live.end();) {
      Item &item = items[*it];
      if (item.bottoms.empty() || item.bottoms.back().second != cumulative)
        item.bottoms.push_back({step, cumulative});
      cumulative += item.heightAt(step);
      it = item.last == step ? live.erase(it) : std::next(it);
    }
  }
}

/// One item as SVG: a rect when its bottom and height never change.
void emitItem(llvm::raw_ostream &os, const Item &item, const Scale &scale) {
  std::string cls = llvm::formatv("band {0}", categoryName(item.category));
  bool flat = item.bottoms.size() == 1 && !item.heights;
  if (flat) {
    uint64_t bottom = item.bottoms.front().second;
    double top = scale.y(double(bottom + item.bytes));
    os << "<rect class=\"" << cls << "\" x=\"" << coord(scale.x(item.first))
       << "\" y=\"" << coord(top) << "\" width=\""
       << coord(scale.x(item.last + 1) - scale.x(item.first)) << "\" height=\""
       << coord(scale.y(double(bottom)) - top) << "\"><title>"
       << escape(item.tooltip) << "</title></rect>\n";
    return;
  }
  // The outline: the top edge left to right, the bottom edge back.
  auto bottomAt = [&](uint32_t step) {
    auto it = std::upper_bound(
        item.bottoms.begin(), item.bottoms.end(), step,
        [](uint32_t s, const auto &run) { return s < run.first; });
    return std::prev(it)->second;
  };
  std::vector<std::pair<uint32_t, std::string>> top, bottom;
  for (uint32_t step = item.first; step <= item.last; ++step) {
    uint64_t low = bottomAt(step);
    std::string high = coord(scale.y(double(low + item.heightAt(step))));
    std::string base = coord(scale.y(double(low)));
    if (top.empty() || top.back().second != high)
      top.push_back({step, high});
    if (bottom.empty() || bottom.back().second != base)
      bottom.push_back({step, base});
  }
  os << "<path class=\"" << cls << "\" d=\"M" << coord(scale.x(item.first))
     << ',' << top.front().second;
  for (size_t i = 1; i != top.size(); ++i)
    os << 'H' << coord(scale.x(top[i].first)) << 'V' << top[i].second;
  os << 'H' << coord(scale.x(item.last + 1)) << 'V' << bottom.back().second;
  for (size_t i = bottom.size(); i-- > 1;)
    os << 'H' << coord(scale.x(bottom[i].first)) << 'V' << bottom[i - 1].second;
  os << 'H' << coord(scale.x(item.first)) << "Z\"><title>"
     << escape(item.tooltip) << "</title></path>\n";
}

/// A tick spacing near \p span / \p count from 1, 2, 5 times a power of 10.
double niceStep(double span, unsigned count) {
  double raw = std::max(span / count, 1e-12);
  double power = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

void emitAxes(llvm::raw_ostream &os, const Scale &scale, uint32_t numSteps,
              uint64_t maxBytes) {
  const double left = scale.x(0), right = scale.x(numSteps);
  const double bottom = scale.y(0), top = kMarginTop;
  // Bytes in the unit of the largest figure.
  double unit = 1;
  const char *unitName = "B";
  for (auto [size, name] : {std::pair<double, const char *>{1024.0, "KiB"},
                            {1024.0 * 1024, "MiB"},
                            {1024.0 * 1024 * 1024, "GiB"}})
    if (double(maxBytes) >= 2 * size) {
      unit = size;
      unitName = name;
    }
  double tick = niceStep(double(maxBytes) / unit, 5);
  os << "<g class=\"axis\">\n";
  for (double v = 0; v * unit <= double(maxBytes) * 1.0001; v += tick) {
    double y = scale.y(v * unit);
    os << "<line class=\"grid\" x1=\"" << coord(left) << "\" x2=\""
       << coord(right) << "\" y1=\"" << coord(y) << "\" y2=\"" << coord(y)
       << "\"/><text x=\"" << coord(left - 6) << "\" y=\"" << coord(y + 4)
       << "\" text-anchor=\"end\">" << number(v, 3) << ' ' << unitName
       << "</text>\n";
  }
  double stepTick = std::max(1.0, std::round(niceStep(numSteps, 8)));
  for (double s = 0; s <= numSteps; s += stepTick)
    os << "<text x=\"" << coord(scale.x(s)) << "\" y=\"" << coord(bottom + 16)
       << "\" text-anchor=\"middle\">" << number(s, 0) << "</text>\n";
  os << "<text x=\"" << coord((left + right) / 2) << "\" y=\""
     << coord(bottom + 34) << "\" text-anchor=\"middle\">schedule step ("
     << numSteps << " nodes)</text>\n";
  os << "<rect class=\"frame\" x=\"" << coord(left) << "\" y=\"" << coord(top)
     << "\" width=\"" << coord(right - left) << "\" height=\""
     << coord(bottom - top) << "\"/>\n</g>\n";
}

void emitRecompute(llvm::raw_ostream &os, const TimelinePanel &panel,
                   const Scale &scale, uint32_t numSteps) {
  for (uint32_t step = 0;
       step < std::min<size_t>(numSteps, panel.recompute.size());) {
    if (!panel.recompute[step]) {
      ++step;
      continue;
    }
    uint32_t end = step;
    while (end + 1 < panel.recompute.size() && end + 1 < numSteps &&
           panel.recompute[end + 1])
      ++end;
    double x = scale.x(step), width = scale.x(end + 1) - x;
    std::string what = "recompute: " + stepRange(panel, step, end) + ", " +
                       std::to_string(end - step + 1) + " node" +
                       (end == step ? "" : "s");
    // The hatching lies over the bands (letting their tooltips through);
    // the bar above the plot carries the region's own.
    os << "<rect class=\"recompute\" x=\"" << coord(x) << "\" y=\""
       << coord(kMarginTop) << "\" width=\"" << coord(width) << "\" height=\""
       << coord(kPlotHeight) << "\"/>\n<rect class=\"recompute-bar\" x=\""
       << coord(x) << "\" y=\"" << coord(kMarginTop - 8) << "\" width=\""
       << coord(std::max(width, 1.0)) << "\" height=\"6\"><title>"
       << escape(what) << "</title></rect>\n";
    step = end + 1;
  }
}

void emitPanel(llvm::raw_ostream &os, const TimelinePanel &panel,
               unsigned index, uint64_t maxBytes) {
  uint32_t numSteps = std::max<size_t>(panel.steps.size(), 1);
  Scale scale;
  scale.originX = index * kPanelWidth;
  scale.stepWidth = kPlotWidth / numSteps;
  scale.bytesPerPixel = std::max(1.0, double(maxBytes) / kPlotHeight);
  TimelinePeak peak = timelinePeak(panel);
  Stack stack =
      buildStack(panel, numSteps, uint64_t(scale.bytesPerPixel * kThinPixels));
  layOut(stack.items, numSteps);

  os << "<g class=\"panel\" id=\"panel-" << index << "\">\n";
  os << "<text class=\"panel-title\" x=\"" << coord(scale.x(0))
     << "\" y=\"24\">" << escape(panel.title) << "</text>\n";
  emitAxes(os, scale, numSteps, maxBytes);
  // Where a step is narrower than two pixels, outlines would wash the
  // colours out: dense panels draw none (but on hover).
  os << "<g class=\"bands" << (scale.stepWidth < 2 ? " dense" : "") << "\">\n";
  for (const Item &item : stack.items)
    emitItem(os, item, scale);
  os << "</g>\n";
  emitRecompute(os, panel, scale, numSteps);
  if (panel.reservedBytes) {
    double y = scale.y(double(*panel.reservedBytes));
    os << "<g class=\"reserved\"><title>the plan reserves "
       << formatTimelineBytes(*panel.reservedBytes)
       << " (arena + persistent)</title><line x1=\"" << coord(scale.x(0))
       << "\" x2=\"" << coord(scale.x(numSteps)) << "\" y1=\"" << coord(y)
       << "\" y2=\"" << coord(y) << "\"/><text x=\""
       << coord(scale.x(numSteps) - 4) << "\" y=\"" << coord(y - 4)
       << "\" text-anchor=\"end\">reserved "
       << formatTimelineBytes(*panel.reservedBytes) << "</text></g>\n";
  }
  // The peak: a marker at the step, labelled with the node there.
  std::string node =
      peak.step < panel.steps.size() ? panel.steps[peak.step] : std::string();
  std::string label =
      llvm::formatv("peak {0} at step {1}: {2}",
                    formatTimelineBytes(peak.bytes), peak.step, node)
          .str();
  std::string exact = llvm::formatv("peak {0} ({1} bytes) at step {2}: {3}",
                                    formatTimelineBytes(peak.bytes), peak.bytes,
                                    peak.step, node)
                          .str();
  double px = scale.x(peak.step + 0.5), py = scale.y(double(peak.bytes));
  // The visible label fits the plot (about 7 px a character in bold 12 px
  // text), as near the marker as it can; the tooltip has it whole.
  size_t fits = size_t(kPlotWidth / kLabelCharWidth);
  if (label.size() > fits)
    label = label.substr(0, fits - 3) + "...";
  double width = label.size() * kLabelCharWidth;
  double tx = std::clamp(px - width / 2, scale.x(0), scale.x(numSteps) - width);
  os << "<g class=\"peak\"><title>" << escape(exact) << "</title><line x1=\""
     << coord(px) << "\" x2=\"" << coord(px) << "\" y1=\"" << coord(py - 10)
     << "\" y2=\"" << coord(scale.y(0)) << "\"/><circle cx=\"" << coord(px)
     << "\" cy=\"" << coord(py) << "\" r=\"4\"/><text x=\"" << coord(tx)
     << "\" y=\"" << coord(kMarginTop - 14) << "\">" << escape(label)
     << "</text></g>\n";
  // The legend: each category's bytes at the peak.
  double lx = scale.x(0), ly = scale.y(0) + 56;
  os << "<g class=\"legend\">\n";
  for (unsigned c = 0; c != kNumMemoryCategories; ++c) {
    double x = lx + (c % 3) * 228, y = ly + (c / 3) * 18;
    os << "<rect class=\"band " << categoryName(c) << "\" x=\"" << coord(x)
       << "\" y=\"" << coord(y - 10) << "\" width=\"12\" height=\"12\"/>"
       << "<text x=\"" << coord(x + 17) << "\" y=\"" << coord(y) << "\">"
       << categoryName(c) << ' ' << formatTimelineBytes(peak.byCategory[c])
       << "</text>\n";
  }
  os << "</g>\n</g>\n";
}

} // namespace

std::string gmopt::formatTimelineBytes(uint64_t bytes) {
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  double value = double(bytes);
  const char *unit = "B";
  for (const char *name : {"KiB", "MiB", "GiB", "TiB"}) {
    if (value < 1024)
      break;
    value /= 1024;
    unit = name;
  }
  return llvm::formatv(value < 10 ? "{0:f2} {1}" : "{0:f1} {1}", value, unit)
      .str();
}

std::vector<uint64_t> gmopt::timelineLiveBytes(const TimelinePanel &panel) {
  size_t numSteps = std::max<size_t>(panel.steps.size(), 1);
  std::vector<int64_t> delta(numSteps + 1, 0);
  for (const TimelineBand &band : panel.bands) {
    if (band.firstStep >= numSteps)
      continue;
    size_t last = std::min<size_t>(band.lastStep, numSteps - 1);
    delta[band.firstStep] += int64_t(band.bytes);
    delta[last + 1] -= int64_t(band.bytes);
  }
  std::vector<uint64_t> live(numSteps);
  int64_t running = 0;
  for (size_t step = 0; step != numSteps; ++step)
    live[step] = uint64_t(running += delta[step]);
  return live;
}

TimelinePeak gmopt::timelinePeak(const TimelinePanel &panel) {
  std::vector<uint64_t> live = timelineLiveBytes(panel);
  TimelinePeak peak;
  for (uint32_t step = 0; step != live.size(); ++step)
    if (live[step] > peak.bytes) {
      peak.bytes = live[step];
      peak.step = step;
    }
  for (const TimelineBand &band : panel.bands)
    if (band.firstStep <= peak.step && peak.step <= band.lastStep)
      peak.byCategory[static_cast<unsigned>(band.category)] += band.bytes;
  return peak;
}

std::string gmopt::renderTimelineHtml(llvm::StringRef title,
                                      llvm::ArrayRef<TimelinePanel> panels) {
  uint64_t maxBytes = 1;
  std::vector<TimelinePeak> peaks;
  for (const TimelinePanel &panel : panels) {
    peaks.push_back(timelinePeak(panel));
    maxBytes = std::max(maxBytes, peaks.back().bytes);
    if (panel.reservedBytes)
      maxBytes = std::max(maxBytes, *panel.reservedBytes);
  }
  maxBytes += maxBytes / 20; // headroom for the peak marker

  std::string html;
  llvm::raw_string_ostream os(html);
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
        "charset=\"utf-8\">\n"
     << "<title>" << escape(title) << "</title>\n<style>\n"
     << "body{font:14px system-ui,sans-serif;margin:16px;color:#222}\n"
     << "h1{font-size:18px;margin:0 0 6px}\np{margin:2px 0}\n"
     << "svg text{font-size:12px;fill:#333}\n"
     << ".panel-title{font-size:15px;font-weight:600}\n"
     << ".band{stroke:#fff;stroke-width:0.3}\n"
     << ".dense .band{stroke:none}\n"
     << ".band:hover{stroke:#000;stroke-width:1.2}\n"
     << ".grid{stroke:#ddd}\n.frame{fill:none;stroke:#999}\n"
     << ".recompute{fill:url(#hatch);pointer-events:none}\n"
     << ".recompute-bar{fill:#d4a000}\n"
     << ".reserved line{stroke:#555;stroke-dasharray:5 4}\n"
     << ".peak line{stroke:#000;stroke-dasharray:2 2}\n"
     << ".peak circle{fill:#000}\n.peak text{font-weight:600}\n";
  for (unsigned c = 0; c != kNumMemoryCategories; ++c)
    os << "." << categoryName(c) << "{fill:" << kColors[c] << "}\n";
  os << "</style>\n</head>\n<body>\n<h1>" << escape(title) << "</h1>\n";
  for (size_t i = 0; i != panels.size(); ++i)
    os << "<p>" << escape(panels[i].title) << ": peak "
       << formatTimelineBytes(peaks[i].bytes) << " at step " << peaks[i].step
       << " of " << panels[i].steps.size() << "</p>\n";
  if (panels.size() == 2 && peaks[0].bytes)
    os << llvm::formatv(
        "<p>peak reduction: {0:f1}%</p>\n",
        100.0 * (1.0 - double(peaks[1].bytes) / double(peaks[0].bytes)));
  os << "<p>Live bytes over the schedule, stacked by category, on one scale. "
        "Hover a band for its tensor; hatching marks recomputed nodes.</p>\n";
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
     << coord(kPanelWidth * std::max<size_t>(panels.size(), 1))
     << "\" height=\"" << coord(kPanelHeight) << "\">\n"
     << "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" "
        "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
        "<rect width=\"6\" height=\"6\" fill=\"#ffe680\" "
        "fill-opacity=\"0.25\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#b08000\" "
        "stroke-width=\"2\" stroke-opacity=\"0.55\"/></pattern></defs>\n";
  for (size_t i = 0; i != panels.size(); ++i)
    emitPanel(os, panels[i], i, maxBytes);
  os << "</svg>\n</body>\n</html>\n";
  return html;
}
