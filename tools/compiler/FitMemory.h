//===- FitMemory.h - Fit a training step into a memory limit ----*- C++ -*-===//
//
// gmopt-compile --memory-limit: among the levers the user enables - the
// recompute budget, `amp` (only with --allow-amp: it changes numerics) and
// gradient accumulation (the batch split into K micro-batches with the same
// effective batch) - the combination whose planned peak fits the limit at
// the least predicted step time (passes/planning/StepCost.h). Every candidate
// is compiled and planned: the peak it is judged by is the plan's, the one the
// CPU backend measures byte for byte.
//
// With --ranks N every candidate is one rank's plan (the data-parallel or
// zero-shard pass first) and the ZeRO stage is a lever too (stages 1 and 2
// need the optimizer in the graph): the search runs once per stage, and
// the collectives' network bytes are in the predicted time.
//
// The search, per ZeRO stage and amp setting (fp32 first): for K = 1, 2, ...
// (divisors of the batch dimension), the pipeline with no recompute; if it
// fits, larger K only adds per-micro-step work, so the search stops there; if
// not, the same pipeline with `recompute{mode=budget,memory-limit=LIMIT}`,
// which returns the least recompute FLOPs it finds that fit or the smallest
// peak it reaches - and, while they fit, the budget at 0.9 and 0.8 of the
// limit: the budget's search is a heuristic whose FLOPs do not always fall as
// its limit rises, and a plan that fits a tighter limit fits this one. The
// choice is the fitting candidate with the least predicted time (then fewer
// extra FLOPs, then the lower ZeRO stage, then fp32, then the smaller K).
//
// --max-batch=DIM: the largest value of DIM (and the dimensions bound in
// proportion to it, such as batch_x_seq) at which some candidate fits one
// micro-step (accumulation is off: it would make every batch fit), by
// doubling and bisection; a size fits when the cheapest of its candidates
// fits. A size too large for gmopt to represent (ir/SizeLimits.h) stops
// the doubling like one that does not fit, so a limit beyond every
// representable step gives the largest representable size, not an error
// about a shape the user never wrote.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_TOOLS_COMPILER_FITMEMORY_H
#define GMOPT_TOOLS_COMPILER_FITMEMORY_H

#include "ir/Types.h"
#include "passes/planning/MemoryLimit.h"
#include "passes/planning/StepCost.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace gmopt {

class Module;

using DimMap = std::map<std::string, int64_t>;

/// What compiling one candidate gave: the planned module, or (when the
/// recompute budget could not meet the limit) the smallest peak it reached.
struct CompiledCandidate {
  std::unique_ptr<Module> module;
  uint64_t smallestPeak = 0;
};

/// Imports the model with \p dims bound, merges the optimizer and runs
/// \p pipeline. A pipeline that fails only because the recompute budget
/// cannot meet its limit is a result (null module), not an error.
using CandidateCompiler = llvm::function_ref<llvm::Expected<CompiledCandidate>(
    const DimMap &dims, llvm::StringRef pipeline)>;

/// What the search minimises among the candidates that fit.
enum class FitObjective {
  /// Predicted step time (then extra FLOPs): the fastest step that fits.
  Time,
  /// Predicted extra FLOPs (then time): the least added work, so the
  /// choice's extra FLOPs never fall as the limit falls (the feasible set
  /// only shrinks), while a slower accumulation may be preferred to a
  /// faster recompute.
  Flops,
};

/// What the user asked for.
struct FitRequest {
  /// The planned-peak limit: bytes, or a fraction of the unrewritten
  /// step's planned peak.
  MemoryLimit limit;
  /// --allow-amp: the 16-bit type amp may use (F16, BF16); none: fp32 only.
  std::optional<DType> allowAmp;
  /// Whether accumulation may split the batch.
  bool allowAccumulate = true;
  /// The batch dimension accumulation splits, and the bindings; every
  /// bound dimension whose name contains the batch dimension's is split
  /// with it (batch_x_seq with batch).
  std::string batchDim = "batch";
  DimMap dims;
  /// The pipeline the levers are added to: amp and recompute go before its
  /// first `schedule`. Recompute is the search's lever, so makeFitRequest
  /// drops any recompute pass the given pipeline has.
  std::string basePipeline;
  StepThroughput throughput = StepThroughput::cpu();
  FitObjective objective = FitObjective::Time;
  /// Data parallelism (--ranks N): every candidate is one rank's plan,
  /// its pipeline led by the data-parallel pass (ZeRO 0) or zero-shard;
  /// zeroStages are the stages the search may choose (ZeRO as a lever).
  int64_t ranks = 1;
  std::string bucketBytes = "25MiB";
  std::vector<int64_t> zeroStages = {0};
};

/// One lever setting and what it gave.
struct FitCandidate {
  std::optional<DType> amp;
  /// The ZeRO stage (0 without data parallelism).
  int64_t zeroStage = 0;
  unsigned accumulate = 1;
  bool recompute = false;
  /// The recompute budget's own limit: the memory limit, or a rung of the
  /// ladder below it.
  uint64_t budgetLimit = 0;
  /// Micro-step bindings and the pipeline compiled.
  DimMap dims;
  std::string pipeline;
  bool fits = false;
  /// The planned peak (or, when the budget failed, the smallest it reached).
  uint64_t peak = 0;
  /// Predicted step FLOPs above the unrewritten step's (recompute, casts,
  /// accumulation's additions), and the predicted step time.
  int64_t extraFlops = 0;
  uint64_t recomputeFlops = 0;
  double seconds = 0;
  /// Whether the recompute budget reached a plan (false: the peak is the
  /// smallest it reached).
  bool planned = true;
};

struct FitResult {
  uint64_t limit = 0;
  /// The world size each candidate was planned for (1: one process).
  int64_t ranks = 1;
  /// What the choice minimised.
  FitObjective objective = FitObjective::Time;
  /// The unrewritten step at the full batch.
  uint64_t basePeak = 0;
  uint64_t baseFlops = 0;
  double baseSeconds = 0;
  std::vector<FitCandidate> candidates;
  /// Index of the choice in candidates, if any fits.
  std::optional<size_t> chosen;
  /// The chosen candidate's module (planned).
  std::unique_ptr<Module> chosenModule;
  /// The unrewritten step's module until the search takes it as its first
  /// candidate (fp32, one micro-step, no recompute: the same compile).
  std::unique_ptr<Module> baseModule;

  /// The smallest peak any candidate reached, and which.
  size_t smallestCandidate() const;
};

/// The label of \p amp: fp32, fp16 or bf16.
std::string ampLabel(std::optional<DType> amp);

/// The request gmopt-compile's flags describe: \p limit as
/// passes/planning/MemoryLimit.h's parseMemoryLimit takes it or `device` (the
/// CUDA device's memory), \p amp empty or fp16/bf16, \p costModel empty (cuda
/// where a device is present, else cpu), cpu or cuda, \p objective time or
/// flops.
llvm::Expected<FitRequest>
makeFitRequest(llvm::StringRef limit, llvm::StringRef amp, bool accumulate,
               llvm::StringRef batchDim, llvm::StringRef costModel,
               const DimMap &dims, llvm::StringRef basePipeline,
               llvm::StringRef objective = "time");

/// "time" or "flops".
llvm::StringRef fitObjectiveName(FitObjective objective);

/// The metadata key and value a chosen accumulation is recorded under in
/// the module (so the .gm replays it: gmopt-run's default --accumulate).
constexpr llvm::StringLiteral kAccumulateMetadataKey = "gmopt.accumulate";
void recordAccumulation(Module &module, unsigned accumulate);
/// The recorded accumulation, or 0 when none is recorded.
unsigned recordedAccumulation(const Module &module);

/// Runs the search.
llvm::Expected<FitResult> fitMemoryLimit(const FitRequest &request,
                                         CandidateCompiler compile);

/// The table of candidates, the choice marked.
void printFitTable(const FitResult &result, llvm::raw_ostream &os);

/// An error stating the smallest reachable peak and what it takes, for a
/// search where nothing fits.
llvm::Error noFitError(const FitResult &result, const FitRequest &request);

/// The candidates and the choice, for --report-json.
llvm::json::Object fitResultJson(const FitResult &result);

/// --max-batch's answer.
struct MaxBatchResult {
  int64_t value = 0;
  /// The fit at value (its choice) and the smallest peak at value + 1.
  FitResult fit;
  uint64_t nextSmallestPeak = 0;
  /// Whether value + 1 is beyond gmopt's size limits (ir/SizeLimits.h):
  /// then value is the largest size gmopt can represent, and
  /// nextSmallestPeak is not known.
  bool nextBeyondSizeLimit = false;
  /// The smallest size probed that was beyond the size limits (0: none),
  /// and the error it gave.
  int64_t sizeLimitValue = 0;
  std::string sizeLimitMessage;
  /// Every size probed: value, whether it fit, smallest peak (0 for a size
  /// beyond the size limits, which was not planned).
  struct Probe {
    int64_t value;
    bool fits;
    uint64_t peak;
    bool beyondSizeLimit = false;
  };
  std::vector<Probe> probes;
};

/// The largest value of \p dim (with the dimensions bound in proportion to
/// it) whose step fits request's limit; an error when even 1 does not. A
/// size whose compile breaks gmopt's size limits (a tensor beyond 2^50
/// bytes) bounds the search like one that does not fit: with a limit no
/// batch reaches, the answer is the largest size gmopt can represent.
llvm::Expected<MaxBatchResult> findMaxBatch(const FitRequest &request,
                                            llvm::StringRef dim,
                                            CandidateCompiler compile);

/// What bounds a max-batch answer: the chosen plan's peak by category.
void printMaxBatch(const MaxBatchResult &result, llvm::StringRef dim,
                   llvm::raw_ostream &os);
llvm::json::Object maxBatchJson(const MaxBatchResult &result,
                                llvm::StringRef dim);

} // namespace gmopt

#endif // GMOPT_TOOLS_COMPILER_FITMEMORY_H
