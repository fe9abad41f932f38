//===- PhaseTimer.cpp - Wall time of a tool's phases ----------------------===//
//
// A steady clock around each phase the tool runs itself; the pass phases
// are copied from the pass manager's timings, in pipeline order, so the
// times --time-passes prints and the ones here are the same measurements.
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/PhaseTimer.h"

#include "passes/Pass.h"
#include "passes/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cassert>
#include <optional>

using namespace gmopt;

namespace {

constexpr PhaseKind kAllKinds[] = {PhaseKind::Import, PhaseKind::Pass,
                                   PhaseKind::Plan,   PhaseKind::Verify,
                                   PhaseKind::Report, PhaseKind::Write};

} // namespace

llvm::StringRef gmopt::phaseKindName(PhaseKind kind) {
  switch (kind) {
  case PhaseKind::Import:
    return "import";
  case PhaseKind::Pass:
    return "pass";
  case PhaseKind::Plan:
    return "plan";
  case PhaseKind::Verify:
    return "verify";
  case PhaseKind::Report:
    return "report";
  case PhaseKind::Write:
    return "write";
  }
  llvm_unreachable("unknown phase kind");
}

void PhaseTimer::start(llvm::StringRef name, PhaseKind kind) {
  stop();
  runningName = name.str();
  runningKind = kind;
  runningStart = std::chrono::steady_clock::now();
  runningCpuStart = std::clock();
  running = true;
}

void PhaseTimer::stop() {
  if (!running)
    return;
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - runningStart;
  double cpuSeconds =
      static_cast<double>(std::clock() - runningCpuStart) / CLOCKS_PER_SEC;
  phases.push_back(
      {std::move(runningName), runningKind, elapsed.count(), cpuSeconds});
  running = false;
}

void PhaseTimer::addPassTimings(const PassManager &passManager) {
  stop();
  llvm::ArrayRef<std::unique_ptr<Pass>> passes = passManager.getPasses();
  llvm::ArrayRef<PassTiming> timings = passManager.getTimings();
  // One timing per pass that ran, in order, then "(verifier)" when the
  // manager verified after each pass.
  for (auto [index, timing] : llvm::enumerate(timings)) {
    PhaseKind kind = PhaseKind::Verify;
    if (index < passes.size()) {
      assert(passes[index]->getName() == timing.name &&
             "pass timings out of pipeline order");
      kind = passes[index]->writesPlan() ? PhaseKind::Plan : PhaseKind::Pass;
    }
    phases.push_back({timing.name, kind, timing.seconds, timing.cpuSeconds});
  }
}

namespace {

/// The sum of \p field over \p phases, of kind \p kind only when given.
double sumOf(llvm::ArrayRef<PhaseTiming> phases, double PhaseTiming::*field,
             std::optional<PhaseKind> kind = std::nullopt) {
  double seconds = 0;
  for (const PhaseTiming &phase : phases)
    if (!kind || phase.kind == *kind)
      seconds += phase.*field;
  return seconds;
}

} // namespace

double PhaseTimer::getSeconds(PhaseKind kind) const {
  return sumOf(phases, &PhaseTiming::seconds, kind);
}

double PhaseTimer::getCpuSeconds(PhaseKind kind) const {
  return sumOf(phases, &PhaseTiming::cpuSeconds, kind);
}

double PhaseTimer::getTotalSeconds() const {
  return sumOf(phases, &PhaseTiming::seconds);
}

double PhaseTimer::getTotalCpuSeconds() const {
  return sumOf(phases, &PhaseTiming::cpuSeconds);
}

void PhaseTimer::print(llvm::raw_ostream &os) const {
  double total = getTotalSeconds();
  auto row = [&](double seconds, double cpuSeconds, const llvm::Twine &name) {
    os << llvm::format("  %8.4f (%5.1f%%)  %8.4f  ", seconds,
                       total > 0 ? 100.0 * seconds / total : 0.0, cpuSeconds)
       << name << '\n';
  };
  os << "===" << std::string(73, '-') << "===\n"
     << "                      ... Compile phase timing report ...\n"
     << "===" << std::string(73, '-') << "===\n"
     << llvm::format("  Total Wall Time: %.4f seconds (CPU %.4f)\n\n", total,
                     getTotalCpuSeconds())
     << "  ----Wall Time----  --CPU---  ----Kind----  ----Name----\n";
  for (const PhaseTiming &phase : phases) {
    std::string kind = phaseKindName(phase.kind).str();
    kind.resize(12, ' ');
    row(phase.seconds, phase.cpuSeconds, kind + "  " + phase.name);
  }
  os << "  ------------------\n";
  for (PhaseKind kind : kAllKinds)
    row(getSeconds(kind), getCpuSeconds(kind), "all " + phaseKindName(kind));
  row(total, getTotalCpuSeconds(), "Total");
}

llvm::json::Object PhaseTimer::toJson() const {
  llvm::json::Array list;
  for (const PhaseTiming &phase : phases)
    list.push_back(llvm::json::Object{{"name", phase.name},
                                      {"kind", phaseKindName(phase.kind)},
                                      {"seconds", phase.seconds},
                                      {"cpu_seconds", phase.cpuSeconds}});
  llvm::json::Object byKind, cpuByKind;
  for (PhaseKind kind : kAllKinds) {
    byKind[phaseKindName(kind)] = getSeconds(kind);
    cpuByKind[phaseKindName(kind)] = getCpuSeconds(kind);
  }
  return llvm::json::Object{{"phases", std::move(list)},
                            {"seconds_by_kind", std::move(byKind)},
                            {"cpu_seconds_by_kind", std::move(cpuByKind)},
                            {"total_seconds", getTotalSeconds()},
                            {"total_cpu_seconds", getTotalCpuSeconds()}};
}
