//===- Progress.cpp - gmopt-run's updating progress line ------------------===//

#include "tools/driver/Progress.h"

#include "llvm/Support/FormatVariadic.h"

#include <chrono>
#include <cmath>

using namespace gmopt;

namespace {

/// ANSI: erase from the cursor to the end of the line.
constexpr llvm::StringLiteral kEraseToEnd = "\x1b[K";

double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

std::string gmopt::formatProgressDuration(double seconds) {
  if (!(seconds >= 0))
    seconds = 0;
  if (seconds < 10)
    return llvm::formatv("{0:f1} s", seconds).str();
  auto whole = static_cast<uint64_t>(std::llround(seconds));
  if (whole < 60)
    return llvm::formatv("{0} s", whole).str();
  if (whole < 3600)
    return llvm::formatv("{0}m{1:d2}s", whole / 60, whole % 60).str();
  return llvm::formatv("{0}h{1:d2}m", whole / 3600, whole / 60 % 60).str();
}

std::string gmopt::formatProgressLine(unsigned step, unsigned steps,
                                      double loss, double stepMilliseconds,
                                      double etaSeconds) {
  std::string line = llvm::formatv("step {0}/{1}  loss {2:f6}  {3:f1} ms/step",
                                   step, steps, loss, stepMilliseconds)
                         .str();
  if (step < steps)
    line += "  ETA " + formatProgressDuration(etaSeconds);
  return line;
}

ProgressLine::ProgressLine(llvm::raw_ostream &os, bool enabled,
                           double delaySeconds, Clock clock)
    : os(os), enabled(enabled), delaySeconds(delaySeconds),
      clock(clock ? std::move(clock) : Clock(steadySeconds)),
      startSeconds(this->clock()) {}

ProgressLine::~ProgressLine() { clear(); }

void ProgressLine::update(unsigned step, unsigned steps, double loss,
                          double stepMilliseconds) {
  if (!enabled || step == 0)
    return;
  double elapsed = clock() - startSeconds;
  if (elapsed < delaySeconds)
    return;
  // At most ten redraws a second while the line is up.
  if (shown && elapsed - lastDrawSeconds < 0.1)
    return;
  lastDrawSeconds = elapsed;
  double eta = elapsed / step * (steps > step ? steps - step : 0);
  os << '\r' << formatProgressLine(step, steps, loss, stepMilliseconds, eta)
     << kEraseToEnd;
  os.flush();
  shown = true;
}

void ProgressLine::clear() {
  if (!shown)
    return;
  os << '\r' << kEraseToEnd;
  os.flush();
  shown = false;
}

ProgressClearingStream::ProgressClearingStream(llvm::raw_ostream &target,
                                               ProgressLine &progress)
    : target(target), progress(progress) {
  SetUnbuffered();
}

ProgressClearingStream::~ProgressClearingStream() { flush(); }

void ProgressClearingStream::write_impl(const char *ptr, size_t size) {
  progress.clear();
  target.write(ptr, size);
  target.flush();
  position += size;
}
