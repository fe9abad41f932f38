//===- FitMemory.cpp - Fit a training step into a memory limit ------------===//

#include "tools/compiler/FitMemory.h"

#include "backend/cuda/CudaDevice.h"
#include "ir/Module.h"
#include "ir/SizeLimits.h"
#include "passes/planning/MemoryLimit.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace gmopt;

namespace {

llvm::Error fitError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The dimensions bound in proportion to \p dim (their names contain it),
/// \p dim first, each with its ratio to \p dim's value.
llvm::Expected<std::vector<std::pair<std::string, int64_t>>>
scaledDims(const DimMap &dims, llvm::StringRef dim, llvm::StringRef flag) {
  auto found = dims.find(dim.str());
  if (found == dims.end() || found->second <= 0)
    return fitError(flag + " needs dimension '" + dim +
                    "', which no --dim binds (bind it, e.g. --dim " + dim +
                    "=8)");
  std::vector<std::pair<std::string, int64_t>> result{{dim.str(), 1}};
  for (const auto &[name, value] : dims) {
    if (name == dim || !llvm::StringRef(name).contains(dim))
      continue;
    if (value % found->second != 0)
      return fitError(flag + ": dimension '" + name + "' (" +
                      llvm::Twine(value) + ") is not a multiple of '" + dim +
                      "' (" + llvm::Twine(found->second) +
                      "), so it cannot be scaled with it");
    result.emplace_back(name, value / found->second);
  }
  return result;
}

/// \p dims with the batch dimension (and those in proportion) at \p value.
DimMap withBatch(const DimMap &dims,
                 llvm::ArrayRef<std::pair<std::string, int64_t>> scaled,
                 int64_t value) {
  DimMap result = dims;
  for (const auto &[name, ratio] : scaled)
    result[name] = value * ratio;
  return result;
}

/// The top-level passes of \p pipeline (options sit in braces; a comma
/// outside them separates passes).
llvm::SmallVector<llvm::StringRef> pipelineParts(llvm::StringRef pipeline) {
  llvm::SmallVector<llvm::StringRef> parts;
  unsigned depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= pipeline.size(); ++i) {
    if (i == pipeline.size() || (pipeline[i] == ',' && depth == 0)) {
      llvm::StringRef part = pipeline.slice(begin, i).trim();
      if (!part.empty())
        parts.push_back(part);
      begin = i + 1;
    } else if (pipeline[i] == '{') {
      ++depth;
    } else if (pipeline[i] == '}' && depth) {
      --depth;
    }
  }
  return parts;
}

bool isPass(llvm::StringRef part, llvm::StringRef name) {
  return part == name || (part.starts_with(name) &&
                          part.drop_front(name.size()).starts_with("{"));
}

/// \p pipeline with \p levers inserted before its first `schedule` (or at
/// the end when it has none).
std::string leverPipeline(llvm::StringRef pipeline,
                          llvm::ArrayRef<std::string> levers) {
  if (levers.empty())
    return pipeline.str();
  std::string inserted = llvm::join(levers, ",");
  std::string result;
  bool placed = false;
  for (llvm::StringRef part : pipelineParts(pipeline)) {
    if (!placed && isPass(part, "schedule")) {
      result += (result.empty() ? "" : ",") + inserted;
      placed = true;
    }
    result += (result.empty() ? "" : ",") + part.str();
  }
  if (!placed)
    result += (result.empty() ? "" : ",") + inserted;
  return result;
}

/// \p pipeline led by the collective pass of ZeRO stage \p stage over
/// the request's ranks (unchanged for one rank).
std::string withZero(const FitRequest &request, int64_t stage,
                     llvm::StringRef pipeline) {
  if (request.ranks <= 1)
    return pipeline.str();
  std::string pass =
      (stage == 0 ? "data-parallel{ranks=" + std::to_string(request.ranks)
                  : "zero-shard{stage=" + std::to_string(stage) +
                        ",ranks=" + std::to_string(request.ranks)) +
      ",bucket-bytes=" + request.bucketBytes + "}";
  return pipeline.empty() ? pass : pass + "," + pipeline.str();
}

/// Compiles and prices one lever setting; \p module, when it is given,
/// is that setting already compiled, and is the compiled module after.
llvm::Expected<std::optional<FitCandidate>>
evaluate(const FitRequest &request, const FitResult &base,
         std::optional<DType> amp, int64_t stage, unsigned accumulate,
         bool recompute, const DimMap &dims, uint64_t limit,
         CandidateCompiler compile, std::unique_ptr<Module> &module) {
  std::vector<std::string> levers;
  if (amp)
    levers.push_back("amp{dtype=" + ampLabel(amp) + "}");
  if (recompute)
    levers.push_back(
        "recompute{mode=budget,memory-limit=" + std::to_string(limit) + "}");
  FitCandidate candidate;
  candidate.amp = amp;
  candidate.zeroStage = stage;
  candidate.accumulate = accumulate;
  candidate.recompute = recompute;
  candidate.budgetLimit = recompute ? limit : 0;
  candidate.dims = dims;
  candidate.pipeline =
      withZero(request, stage, leverPipeline(request.basePipeline, levers));
  if (!module) {
    llvm::Expected<CompiledCandidate> compiled =
        compile(dims, candidate.pipeline);
    if (!compiled)
      return compiled.takeError();
    if (!compiled->module) {
      candidate.planned = false;
      candidate.peak = compiled->smallestPeak;
      return candidate;
    }
    module = std::move(compiled->module);
  }
  if (module->plan.empty())
    return fitError("the pipeline '" + candidate.pipeline +
                    "' plans no buffers: --memory-limit needs plan-buffers "
                    "in it");
  candidate.peak = module->plan.figures.plannedBytes();
  StepCost cost = estimateStepCost(*module, request.throughput);
  candidate.recomputeFlops = cost.flops[unsigned(Phase::Recompute)];
  candidate.extraFlops =
      int64_t(cost.accumulatedFlops(accumulate)) - int64_t(base.baseFlops);
  candidate.seconds = cost.accumulatedSeconds(accumulate);
  return candidate;
}

/// Whether \p a is a better choice than \p b.
bool better(const FitCandidate &a, const FitCandidate &b,
            FitObjective objective) {
  if (objective == FitObjective::Flops && a.extraFlops != b.extraFlops)
    return a.extraFlops < b.extraFlops;
  if (a.seconds != b.seconds)
    return a.seconds < b.seconds;
  if (a.extraFlops != b.extraFlops)
    return a.extraFlops < b.extraFlops;
  if (a.zeroStage != b.zeroStage)
    return a.zeroStage < b.zeroStage;
  if (a.amp.has_value() != b.amp.has_value())
    return !a.amp.has_value();
  return a.accumulate < b.accumulate;
}

/// The search at fixed bindings; \p base already holds the unrewritten
/// step's figures and the limit.
llvm::Error search(const FitRequest &request, FitResult &result,
                   CandidateCompiler compile) {
  std::vector<std::optional<DType>> amps{std::nullopt};
  if (request.allowAmp)
    amps.push_back(request.allowAmp);
  std::vector<unsigned> splits{1};
  std::vector<std::pair<std::string, int64_t>> scaled;
  int64_t batch = 1;
  if (request.allowAccumulate) {
    auto found = scaledDims(request.dims, request.batchDim, "accumulation");
    if (!found)
      return found.takeError();
    scaled = std::move(*found);
    batch = request.dims.at(request.batchDim);
    for (int64_t k = 2; k <= batch; ++k)
      if (batch % k == 0)
        splits.push_back(unsigned(k));
  }
  for (int64_t stage : request.zeroStages) {
    for (std::optional<DType> amp : amps) {
      for (unsigned k : splits) {
        DimMap dims =
            k == 1 ? request.dims : withBatch(request.dims, scaled, batch / k);
        bool plainFits = false;
        // The budget's search is a heuristic whose FLOPs need not fall as
        // its limit rises, so it also runs at a ladder of tighter limits
        // (each plan that fits one fits the limit), while they still fit.
        for (double rung : {0.0, 1.0, 0.9, 0.8}) {
          bool recompute = rung > 0;
          uint64_t budget = uint64_t(std::floor(rung * double(result.limit)));
          std::unique_ptr<Module> module;
          if (!amp && k == 1 && !recompute && stage == request.zeroStages[0])
            module = std::move(result.baseModule);
          auto candidate = evaluate(request, result, amp, stage, k, recompute,
                                    dims, budget, compile, module);
          if (!candidate)
            return candidate.takeError();
          (*candidate)->fits =
              (*candidate)->planned && (*candidate)->peak <= result.limit;
          result.candidates.push_back(std::move(**candidate));
          const FitCandidate &added = result.candidates.back();
          if (added.fits && (!result.chosen ||
                             better(added, result.candidates[*result.chosen],
                                    request.objective))) {
            result.chosen = result.candidates.size() - 1;
            result.chosenModule = std::move(module);
          }
          if (added.fits && !recompute) {
            plainFits = true;
            break;
          }
          if (recompute && !added.fits)
            break;
        }
        // More micro-steps only add work once the step fits without
        // recompute.
        if (plainFits)
          break;
      }
    }
  }
  return llvm::Error::success();
}

/// Compiles the unrewritten step at \p dims into \p result's base figures
/// and resolves the limit.
llvm::Error measureBase(const FitRequest &request, const DimMap &dims,
                        FitResult &result, CandidateCompiler compile) {
  llvm::Expected<CompiledCandidate> base = compile(
      dims, withZero(request, request.zeroStages[0], request.basePipeline));
  if (!base)
    return base.takeError();
  if (!base->module || base->module->plan.empty())
    return fitError("the pipeline '" + request.basePipeline +
                    "' plans no buffers: --memory-limit needs plan-buffers "
                    "in it");
  result.basePeak = base->module->plan.figures.plannedBytes();
  StepCost cost = estimateStepCost(*base->module, request.throughput);
  result.baseFlops = cost.totalFlops();
  result.baseSeconds = cost.totalSeconds();
  result.limit = request.limit.resolve(result.basePeak);
  result.baseModule = std::move(base->module);
  return llvm::Error::success();
}

/// Bytes in GiB, or MiB below one GiB.
std::string gib(uint64_t bytes) {
  if (bytes < (uint64_t(1) << 30))
    return llvm::formatv("{0:F2} MiB", bytes / 1048576.0).str();
  return llvm::formatv("{0:F3} GiB", bytes / 1073741824.0).str();
}

/// none, budget (at the limit) or budget@F (at F times the limit).
std::string recomputeLabel(const FitCandidate &candidate, uint64_t limit) {
  if (!candidate.recompute)
    return "none";
  if (candidate.budgetLimit >= limit)
    return "budget";
  return llvm::formatv("budget@{0:F1}", double(candidate.budgetLimit) / limit)
      .str();
}

std::string dimsText(const DimMap &dims) {
  std::string text;
  for (const auto &[name, value] : dims)
    text += (text.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return text;
}

} // namespace

size_t FitResult::smallestCandidate() const {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].peak < candidates[best].peak)
      best = i;
  return best;
}

llvm::StringRef gmopt::fitObjectiveName(FitObjective objective) {
  return objective == FitObjective::Flops ? "flops" : "time";
}

std::string gmopt::ampLabel(std::optional<DType> amp) {
  if (!amp)
    return "fp32";
  return *amp == DType::BF16 ? "bf16" : "fp16";
}

llvm::Expected<FitRequest>
gmopt::makeFitRequest(llvm::StringRef limit, llvm::StringRef amp,
                      bool accumulate, llvm::StringRef batchDim,
                      llvm::StringRef costModel, const DimMap &dims,
                      llvm::StringRef basePipeline, llvm::StringRef objective) {
  FitRequest request;
  // Recompute is the search's own lever: a recompute pass in the pipeline
  // (the default one's selective mode, say) gives way to it, and the
  // unrewritten step is the pipeline without it.
  std::string withoutRecompute;
  for (llvm::StringRef part : pipelineParts(basePipeline))
    if (!isPass(part, "recompute"))
      withoutRecompute += (withoutRecompute.empty() ? "" : ",") + part.str();
  if (objective == "time")
    request.objective = FitObjective::Time;
  else if (objective == "flops")
    request.objective = FitObjective::Flops;
  else
    return fitError("--fit-objective: '" + objective +
                    "' is not time or flops");
  request.dims = dims;
  request.basePipeline = withoutRecompute;
  request.allowAccumulate = accumulate;
  request.batchDim = batchDim.str();
  std::optional<uint64_t> deviceBytes;
  if (limit.trim() == "device" || costModel.empty()) {
    llvm::Expected<CudaDeviceInfo> device = probeCudaDevice();
    if (device) {
      deviceBytes = device->totalMemoryBytes;
    } else if (limit.trim() == "device") {
      return fitError(
          "--memory-limit=device: " + llvm::toString(device.takeError()) +
          "; give the limit in bytes instead (e.g. 24GiB)");
    } else {
      llvm::consumeError(device.takeError());
    }
  }
  if (limit.trim() == "device") {
    request.limit.bytes = *deviceBytes;
  } else {
    llvm::Expected<MemoryLimit> parsed =
        parseMemoryLimit(limit, "--memory-limit");
    if (!parsed)
      return parsed.takeError();
    request.limit = *parsed;
  }
  if (!amp.empty()) {
    if (amp == "fp16")
      request.allowAmp = DType::F16;
    else if (amp == "bf16")
      request.allowAmp = DType::BF16;
    else
      return fitError("--allow-amp: '" + amp + "' is not fp16 or bf16");
  }
  llvm::Expected<StepThroughput> throughput = StepThroughput::lookup(
      costModel.empty() ? (deviceBytes ? "cuda" : "cpu") : costModel);
  if (!throughput)
    return fitError("--cost-model: " + llvm::toString(throughput.takeError()));
  request.throughput = std::move(*throughput);
  return request;
}

void gmopt::recordAccumulation(Module &module, unsigned accumulate) {
  for (auto &[key, value] : module.metadata)
    if (key == kAccumulateMetadataKey) {
      value = std::to_string(accumulate);
      return;
    }
  module.metadata.emplace_back(kAccumulateMetadataKey.str(),
                               std::to_string(accumulate));
}

unsigned gmopt::recordedAccumulation(const Module &module) {
  for (const auto &[key, value] : module.metadata) {
    unsigned accumulate = 0;
    if (key == kAccumulateMetadataKey &&
        !llvm::StringRef(value).getAsInteger(10, accumulate))
      return accumulate;
  }
  return 0;
}

llvm::Expected<FitResult> gmopt::fitMemoryLimit(const FitRequest &request,
                                                CandidateCompiler compile) {
  FitResult result;
  result.ranks = request.ranks;
  result.objective = request.objective;
  if (llvm::Error err = measureBase(request, request.dims, result, compile))
    return err;
  if (llvm::Error err = search(request, result, compile))
    return err;
  return result;
}

void gmopt::printFitTable(const FitResult &result, llvm::raw_ostream &os) {
  os << llvm::formatv("memory limit {0} ({1}); unrewritten step: planned "
                      "peak {2}, {3:F2} GFLOP, predicted {4:F2} ms\n",
                      result.limit, gib(result.limit), gib(result.basePeak),
                      result.baseFlops / 1e9, result.baseSeconds * 1e3);
  // With data parallelism each candidate is one rank's plan at a ZeRO stage.
  bool zero = result.ranks > 1;
  if (zero)
    os << llvm::formatv("one rank of {0} (data parallel): every peak is per "
                        "rank\n",
                        result.ranks);
  os << llvm::formatv("  {0}{1,-6} {2,-4} {3,-10} {4,14} {5,5} {6,13} {7,12}\n",
                      zero ? "ZeRO " : "", "amp", "K", "recompute",
                      "planned peak", "fits", "extra GFLOP", "predicted ms");
  for (size_t i = 0; i != result.candidates.size(); ++i) {
    const FitCandidate &c = result.candidates[i];
    std::string peak = (c.planned ? "" : ">=") + gib(c.peak);
    std::string extra =
        c.planned ? llvm::formatv("{0:F3}", c.extraFlops / 1e9).str() : "-";
    std::string ms =
        c.planned ? llvm::formatv("{0:F2}", c.seconds * 1e3).str() : "-";
    std::string stage =
        zero ? llvm::formatv("{0,-4} ", c.zeroStage).str() : std::string();
    os << llvm::formatv(
        "{0} {8}{1,-6} {2,-4} {3,-10} {4,14} {5,5} {6,13} {7,12}\n",
        result.chosen && *result.chosen == i ? "*" : " ", ampLabel(c.amp),
        c.accumulate, recomputeLabel(c, result.limit), peak,
        c.fits ? "yes" : "no", extra, ms, stage);
  }
  if (result.chosen) {
    const FitCandidate &c = result.candidates[*result.chosen];
    os << "chosen: ";
    if (zero)
      os << "ZeRO " << c.zeroStage << ", ";
    os << ampLabel(c.amp) << ", accumulate " << c.accumulate << " (micro-batch "
       << dimsText(c.dims) << "), recompute " << recomputeLabel(c, result.limit)
       << ": planned peak " << gib(c.peak) << " of " << gib(result.limit)
       << " (least "
       << (result.objective == FitObjective::Flops ? "extra FLOPs"
                                                   : "predicted time")
       << "); pipeline " << c.pipeline << "\n";
  }
}

llvm::Error gmopt::noFitError(const FitResult &result,
                              const FitRequest &request) {
  const FitCandidate &smallest = result.candidates[result.smallestCandidate()];
  std::string take = "a limit of at least " + gib(smallest.peak);
  if (!request.allowAmp)
    take += ", or --allow-amp=bf16|fp16 (16-bit activations)";
  if (!request.allowAccumulate)
    take += ", or gradient accumulation (--allow-accumulate=true)";
  return fitError("--memory-limit " + llvm::Twine(result.limit) + " bytes (" +
                  gib(result.limit) +
                  ") cannot be met: the smallest planned peak "
                  "reachable is " +
                  gib(smallest.peak) + " (" + ampLabel(smallest.amp) +
                  ", accumulate " + llvm::Twine(smallest.accumulate) +
                  ", recompute " + (smallest.recompute ? "budget" : "none") +
                  "; unrewritten " + gib(result.basePeak) +
                  "); it would take " + take);
}

llvm::json::Object gmopt::fitResultJson(const FitResult &result) {
  llvm::json::Array candidates;
  for (const FitCandidate &c : result.candidates) {
    llvm::json::Object dims;
    for (const auto &[name, value] : c.dims)
      dims[name] = value;
    candidates.push_back(
        llvm::json::Object{{"amp", ampLabel(c.amp)},
                           {"zero_stage", c.zeroStage},
                           {"accumulate", int64_t(c.accumulate)},
                           {"recompute", c.recompute ? "budget" : "none"},
                           {"budget_limit_bytes", int64_t(c.budgetLimit)},
                           {"dims", std::move(dims)},
                           {"pipeline", c.pipeline},
                           {"planned", c.planned},
                           {"planned_peak_bytes", int64_t(c.peak)},
                           {"fits", c.fits},
                           {"extra_flops", c.extraFlops},
                           {"recompute_flops", int64_t(c.recomputeFlops)},
                           {"predicted_seconds", c.seconds}});
  }
  llvm::json::Object json{{"limit_bytes", int64_t(result.limit)},
                          {"ranks", result.ranks},
                          {"unrewritten_peak_bytes", int64_t(result.basePeak)},
                          {"unrewritten_flops", int64_t(result.baseFlops)},
                          {"unrewritten_predicted_seconds", result.baseSeconds},
                          {"objective", fitObjectiveName(result.objective)},
                          {"candidates", std::move(candidates)}};
  if (result.chosen)
    json["chosen"] = int64_t(*result.chosen);
  else
    json["chosen"] = nullptr;
  return json;
}

llvm::Expected<MaxBatchResult> gmopt::findMaxBatch(const FitRequest &request,
                                                   llvm::StringRef dim,
                                                   CandidateCompiler compile) {
  auto scaled = scaledDims(request.dims, dim, "--max-batch");
  if (!scaled)
    return scaled.takeError();
  MaxBatchResult answer;
  FitRequest probe = request;
  probe.allowAccumulate = false;
  // A percentage refers to the unrewritten step at the given bindings.
  FitResult reference;
  if (llvm::Error err = measureBase(request, request.dims, reference, compile))
    return err;
  probe.limit.bytes = reference.limit;
  std::map<int64_t, FitResult> fits;
  const int64_t given = request.dims.at(dim.str());
  // A size above the given one may be too large for gmopt to represent (a
  // tensor beyond kMaxTensorBytes, a plan beyond kMaxTotalBytes): the search
  // stops there, as at a size that does not fit, and says so. The given
  // size compiled (the reference above), so a size above it that breaks a
  // size limit breaks it through the batch's growth.
  auto beyondSizeLimit = [&](int64_t value,
                             llvm::Error err) -> llvm::Expected<bool> {
    if (value <= given)
      return err;
    std::string message = llvm::toString(std::move(err));
    if (!isSizeLimitMessage(message))
      return fitError(message);
    answer.probes.push_back({value, false, 0, /*beyondSizeLimit=*/true});
    if (!answer.sizeLimitValue || value < answer.sizeLimitValue) {
      answer.sizeLimitValue = value;
      answer.sizeLimitMessage = message;
    }
    return false;
  };
  auto tryValue = [&](int64_t value) -> llvm::Expected<bool> {
    probe.dims = withBatch(request.dims, *scaled, value);
    FitResult result;
    result.ranks = request.ranks;
    auto compileAndSearch = [&]() -> llvm::Error {
      // The given size's unrewritten step is the reference, compiled once.
      if (value == given && reference.baseModule)
        result = std::move(reference);
      else if (llvm::Error err =
                   measureBase(probe, probe.dims, result, compile))
        return err;
      return search(probe, result, compile);
    };
    if (llvm::Error err = compileAndSearch())
      return beyondSizeLimit(value, std::move(err));
    bool ok = result.chosen.has_value();
    answer.probes.push_back(
        {value, ok,
         ok ? result.candidates[*result.chosen].peak
            : result.candidates[result.smallestCandidate()].peak});
    fits[value] = std::move(result);
    return ok;
  };
  int64_t low = 0, high = 0; // low fits, high does not (0: unknown)
  int64_t value = given;
  while (true) {
    llvm::Expected<bool> ok = tryValue(value);
    if (!ok)
      return ok.takeError();
    if (*ok) {
      low = value;
      if (high)
        break;
      if (value > (int64_t(1) << 40))
        return fitError("--max-batch: '" + dim + "' fits at " +
                        llvm::Twine(value) + " and beyond; nothing bounds it");
      value *= 2;
    } else {
      high = value;
      if (low)
        break;
      if (value == 1)
        break;
      value = std::max<int64_t>(1, value / 2);
    }
  }
  if (!low) {
    // At batch 1 accumulation has nothing to split.
    FitRequest atOne = probe;
    atOne.allowAccumulate = true;
    return noFitError(fits.at(1), atOne);
  }
  while (high - low > 1) {
    int64_t mid = low + (high - low) / 2;
    llvm::Expected<bool> ok = tryValue(mid);
    if (!ok)
      return ok.takeError();
    (*ok ? low : high) = mid;
  }
  answer.value = low;
  answer.fit = std::move(fits.at(low));
  // high either did not fit or is beyond the size limits.
  auto next = fits.find(high);
  if (next != fits.end())
    answer.nextSmallestPeak =
        next->second.candidates[next->second.smallestCandidate()].peak;
  else
    answer.nextBeyondSizeLimit = true;
  return answer;
}

namespace {

/// The chosen plan's peak by part: the arena (activations, temporaries,
/// workspace live together) and each persistent category.
std::vector<std::pair<std::string, uint64_t>> peakParts(const Module &module) {
  const MemoryFigures &figures = module.plan.figures;
  std::vector<std::pair<std::string, uint64_t>> parts{
      {"arena (activations and temporaries)", figures.arenaBytes}};
  static const std::pair<MemoryCategory, const char *> kinds[] = {
      {MemoryCategory::Parameters, "parameters"},
      {MemoryCategory::Gradients, "gradients"},
      {MemoryCategory::OptimizerState, "optimizer state"},
      {MemoryCategory::Activations, "persistent activations and inputs"},
      {MemoryCategory::Temporaries, "persistent temporaries"},
      {MemoryCategory::Workspace, "persistent workspace"}};
  for (const auto &[category, name] : kinds) {
    uint64_t bytes = figures.persistentBytes[unsigned(category)];
    if (bytes)
      parts.emplace_back(name, bytes);
  }
  std::stable_sort(
      parts.begin(), parts.end(),
      [](const auto &a, const auto &b) { return a.second > b.second; });
  return parts;
}

} // namespace

void gmopt::printMaxBatch(const MaxBatchResult &result, llvm::StringRef dim,
                          llvm::raw_ostream &os) {
  os << "max-batch: probes";
  for (const MaxBatchResult::Probe &probe : result.probes)
    os << " " << dim << "=" << probe.value
       << (probe.fits              ? " fits"
           : probe.beyondSizeLimit ? " too-large"
                                   : " no");
  os << "\n";
  printFitTable(result.fit, os);
  os << llvm::formatv("max-batch: {0}={1} fits ({2} of {3}); ", dim,
                      result.value,
                      gib(result.fit.candidates[*result.fit.chosen].peak),
                      gib(result.fit.limit));
  if (result.nextBeyondSizeLimit)
    os << dim << "=" << result.value + 1
       << " cannot be represented (beyond gmopt's size limits)\n";
  else
    os << llvm::formatv("{0}={1} does not (smallest reachable peak {2})\n", dim,
                        result.value + 1, gib(result.nextSmallestPeak));
  if (result.sizeLimitValue)
    os << "max-batch: the search stopped at gmopt's size limits: at " << dim
       << "=" << result.sizeLimitValue << ", " << result.sizeLimitMessage
       << "\n";
  if (!result.fit.chosenModule)
    return;
  std::vector<std::pair<std::string, uint64_t>> parts =
      peakParts(*result.fit.chosenModule);
  uint64_t peak = result.fit.chosenModule->plan.figures.plannedBytes();
  os << "max-batch: at " << dim << "=" << result.value << " the peak is";
  for (size_t i = 0; i != parts.size(); ++i)
    os << (i ? ", " : " ") << parts[i].first << " " << gib(parts[i].second)
       << llvm::formatv(" ({0:F1}%)", 100.0 * parts[i].second / peak);
  os << "; " << parts.front().first << " dominates\n";
}

llvm::json::Object gmopt::maxBatchJson(const MaxBatchResult &result,
                                       llvm::StringRef dim) {
  llvm::json::Array probes;
  for (const MaxBatchResult::Probe &probe : result.probes) {
    llvm::json::Object entry{{"value", probe.value},
                             {"fits", probe.fits},
                             {"peak_bytes", int64_t(probe.peak)}};
    if (probe.beyondSizeLimit)
      entry["beyond_size_limit"] = true;
    probes.push_back(std::move(entry));
  }
  llvm::json::Object parts;
  std::string dominant;
  if (result.fit.chosenModule) {
    auto split = peakParts(*result.fit.chosenModule);
    dominant = split.front().first;
    for (const auto &[name, bytes] : split)
      parts[name] = int64_t(bytes);
  }
  llvm::json::Object json{
      {"dim", dim},
      {"value", result.value},
      {"next_smallest_peak_bytes",
       result.nextBeyondSizeLimit
           ? llvm::json::Value(nullptr)
           : llvm::json::Value(int64_t(result.nextSmallestPeak))},
      {"probes", std::move(probes)},
      {"peak_by_part", std::move(parts)},
      {"dominant", dominant},
      {"fit", fitResultJson(result.fit)}};
  if (result.sizeLimitValue)
    json["size_limit"] =
        llvm::json::Object{{"value", result.sizeLimitValue},
                           {"next_beyond", result.nextBeyondSizeLimit},
                           {"message", result.sizeLimitMessage}};
  return json;
}
