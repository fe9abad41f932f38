//===- Progress.h - gmopt-run's updating progress line ----------*- C++ -*-===//
//
// On a terminal, a run that takes more than a second shows one line on
// stderr that each step rewrites (`\r`): the step, its loss, the step time
// and the time left. The line is erased when training ends and, when
// stdout is the same screen, before each line printed there
// (ProgressClearingStream), so it never mixes with the step lines and pipes
// or logs never see it. gmopt-run shows it only when stderr is a terminal
// and --quiet is not given.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_DRIVER_PROGRESS_H
#define GMOPT_TOOLS_DRIVER_PROGRESS_H

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>

namespace gmopt {

/// \p seconds for people: `0.4 s`, `12 s`, `3m05s`, `2h07m`.
std::string formatProgressDuration(double seconds);

/// The progress line's text: `step 3/10  loss 2.301234  412.5 ms/step  ETA
/// 2.9 s` (no ETA after the last step).
std::string formatProgressLine(unsigned step, unsigned steps, double loss,
                               double stepMilliseconds, double etaSeconds);

/// The updating line.
class ProgressLine {
public:
  /// Seconds on a monotonic clock.
  using Clock = std::function<double()>;
  /// Writes to \p os when \p enabled, once \p delaySeconds have passed
  /// since construction (by \p clock; a steady clock when null).
  ProgressLine(llvm::raw_ostream &os, bool enabled, double delaySeconds = 1.0,
               Clock clock = nullptr);
  ~ProgressLine();

  /// Step \p step of \p steps is done with \p loss in \p stepMilliseconds:
  /// redraws the line (the ETA from the mean time per step so far), at most
  /// every tenth of a second while it is shown.
  void update(unsigned step, unsigned steps, double loss,
              double stepMilliseconds);
  /// Erases the line if it is shown.
  void clear();
  /// True while the line is on the screen.
  bool isShown() const { return shown; }

private:
  llvm::raw_ostream &os;
  bool enabled;
  double delaySeconds;
  Clock clock;
  double startSeconds;
  double lastDrawSeconds = 0;
  bool shown = false;
};

/// An unbuffered stream that erases \p progress's line before every write
/// to \p target (so a step's stdout line is never drawn over it).
class ProgressClearingStream : public llvm::raw_ostream {
public:
  ProgressClearingStream(llvm::raw_ostream &target, ProgressLine &progress);
  ~ProgressClearingStream() override;

private:
  void write_impl(const char *ptr, size_t size) override;
  uint64_t current_pos() const override { return position; }

  llvm::raw_ostream &target;
  ProgressLine &progress;
  uint64_t position = 0;
};

} // namespace gmopt

#endif // GMOPT_TOOLS_DRIVER_PROGRESS_H
