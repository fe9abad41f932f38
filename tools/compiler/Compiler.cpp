//===- Compiler.cpp - Import, training step, search, pipeline, plan -------===//
//
// compile(): gmopt-compile's work between reading the input and writing the
// outputs (see Compiler.h). The training step is built the same way for the
// output and for every memory-limit candidate (buildStep), so the search
// measures exactly what is then compiled.
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"

#include "tools/compiler/PhaseTimer.h"
#include "tools/driver/ToolSupport.h"

#include "ir/serialization/Onnx.h"
#include "passes/DefaultPipeline.h"
#include "passes/transforms/Canonicalize.h"
#include "passes/transforms/TieWeights.h"

#include "llvm/Support/MemoryBuffer.h"

using namespace gmopt;

namespace {

llvm::Error fileError(llvm::StringRef file, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 file + ": " + message);
}

void startPhase(const CompileOptions &options, llvm::StringRef name,
                PhaseKind kind) {
  if (options.timer)
    options.timer->start(name, kind);
}

/// Configures \p target to run \p text with the caller's configuration and
/// parameter values.
llvm::Error setUpPasses(const CompileOptions &options, PassManager &target,
                        llvm::StringRef text) {
  if (options.configurePasses)
    if (llvm::Error err = options.configurePasses(target))
      return err;
  if (llvm::Error err = target.addPipeline(text))
    return err;
  if (options.parameterValue)
    installParameterValues(target, options.parameterValue);
  return llvm::Error::success();
}

/// Builds the training step in \p target: autodiff (with canonicalize
/// before and tie-weights after) for a forward model, then the optimizer.
llvm::Error buildStep(const CompileOptions &options, Module &target) {
  if (options.train) {
    // canonicalize folds the forward model's shape arithmetic first, so
    // the gradients see static shapes where the batch is bound. Then
    // tie-weights (auto) merges an exporter's copies of one parameter:
    // torch's constant folding stores a tied LM head's transposed copy
    // as a second initializer (PyTorch issue 108342), which would
    // otherwise train as a weight of its own and drift from the original.
    PassManager trainPasses;
    trainPasses.addPass(std::make_unique<CanonicalizePass>());
    trainPasses.addPass(std::make_unique<AutodiffPass>(options.autodiff));
    TieWeightsPass::Options tieOptions;
    tieOptions.reportUndecided = false;
    trainPasses.addPass(std::make_unique<TieWeightsPass>(tieOptions));
    if (llvm::Error err = trainPasses.run(target))
      return fileError(options.inputPath, llvm::toString(std::move(err)));
  }
  if (!options.optimizer)
    return llvm::Error::success();
  auto node = buildOptimizer(target, *options.optimizer);
  if (!node)
    return fileError(options.inputPath, llvm::toString(node.takeError()));
  return llvm::Error::success();
}

} // namespace

llvm::Error gmopt::checkPipeline(const CompileOptions &options) {
  PassManager check;
  return setUpPasses(options, check,
                     options.pipeline.value_or(kDefaultPipeline.str()));
}

llvm::Expected<CompileResult> gmopt::compile(const CompileOptions &options) {
  llvm::StringRef inputBytes = options.inputBytes;
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  if (!inputBytes.data()) {
    auto read = readInputFile(options.inputPath);
    if (!read)
      return read.takeError();
    buffer = std::move(*read);
    inputBytes = buffer->getBuffer();
  }
  std::map<std::string, int64_t> dims = options.dims;
  std::string pipelineText = options.pipeline.value_or(kDefaultPipeline.str());
  CompileResult result;

  // A memory limit: every candidate is imported and compiled like the
  // output will be; the choice decides the bindings and the pipeline.
  if (options.fit) {
    startPhase(options, "memory-limit search", PhaseKind::Pass);
    auto compileCandidate =
        [&](const DimMap &candidateDims,
            llvm::StringRef text) -> llvm::Expected<CompiledCandidate> {
      auto candidate = loadModuleBytes(inputBytes, options.inputPath,
                                       InputFormat::Onnx, candidateDims);
      if (!candidate)
        return candidate.takeError();
      if (llvm::Error err = buildStep(options, **candidate))
        return err;
      PassManager candidatePasses;
      if (llvm::Error err = setUpPasses(options, candidatePasses, text))
        return err;
      CompiledCandidate compiled;
      if (llvm::Error err = candidatePasses.run(**candidate)) {
        uint64_t smallest = candidatePasses.getContext().getStatistic(
            "recompute", "budget-smallest-peak");
        if (!smallest)
          return fileError(options.inputPath, llvm::toString(std::move(err)));
        llvm::consumeError(std::move(err));
        compiled.smallestPeak = smallest;
        return compiled;
      }
      compiled.module = std::move(*candidate);
      return compiled;
    };
    const FitCandidate *chosen = nullptr;
    std::optional<FitResult> fitResult;
    std::optional<MaxBatchResult> batchResult;
    if (!options.maxBatch.empty()) {
      auto found =
          findMaxBatch(*options.fit, options.maxBatch, compileCandidate);
      if (!found)
        return found.takeError();
      batchResult = std::move(*found);
      if (options.log)
        printMaxBatch(*batchResult, options.maxBatch, *options.log);
      chosen = &batchResult->fit.candidates[*batchResult->fit.chosen];
      result.fitJson = maxBatchJson(*batchResult, options.maxBatch);
    } else {
      auto found = fitMemoryLimit(*options.fit, compileCandidate);
      if (!found)
        return found.takeError();
      fitResult = std::move(*found);
      if (options.log)
        printFitTable(*fitResult, *options.log);
      if (!fitResult->chosen)
        return noFitError(*fitResult, *options.fit);
      chosen = &fitResult->candidates[*fitResult->chosen];
      result.fitJson = fitResultJson(*fitResult);
    }
    dims = chosen->dims;
    pipelineText = chosen->pipeline;
    result.accumulate = chosen->accumulate;
  }
  // The collectives go in before anything schedules or plans, so the plan
  // counts their buckets (a memory-limit choice already has its own).
  if (options.ranks > 1 && !options.fit)
    pipelineText =
        (options.zeroStage == 0
             ? "data-parallel{ranks=" + std::to_string(options.ranks)
             : "zero-shard{stage=" + std::to_string(options.zeroStage) +
                   ",ranks=" + std::to_string(options.ranks)) +
        ",bucket-bytes=" + options.bucketBytes +
        (options.overlap ? ",overlap=true}" : "}") +
        (pipelineText.empty() ? "" : ",") + pipelineText;
  result.passManager = std::make_unique<PassManager>();
  PassManager &passManager = *result.passManager;
  if (llvm::Error err = setUpPasses(options, passManager, pipelineText))
    return err;

  if (options.fit)
    startPhase(options, "import", PhaseKind::Import);
  auto module =
      loadModuleBytes(inputBytes, options.inputPath, InputFormat::Onnx, dims);
  if (!module)
    return module.takeError();
  // A forward model's shape subgraphs fold (canonicalize) before autodiff:
  // its dimensions are checked after.
  if (!options.train)
    if (llvm::Error err = checkDimsBound(**module))
      return fileError(options.inputPath, llvm::toString(std::move(err)));
  if (!options.train && !(*module)->getSignature().hasGradients())
    return fileError(options.inputPath,
                     "no gradients found: this is not a training graph "
                     "(expected ONNX Runtime's training_model.onnx or "
                     "gradients exposed as outputs named X_grad)");
  // The whole step is one module: the optimizer is merged in before any
  // pass runs, so every rewrite and the plan see it.
  startPhase(options,
             options.train ? "autodiff and optimizer" : "merge optimizer",
             PhaseKind::Import);
  if (llvm::Error err = buildStep(options, **module))
    return err;
  if (options.train)
    if (llvm::Error err = checkDimsBound(**module))
      return fileError(options.inputPath, llvm::toString(std::move(err)));
  // The container keeps the model as imported (for gmopt-run --baseline):
  // a second import of the same bytes is the simplest faithful copy.
  if (options.keepOriginal) {
    startPhase(options, "import original (for the container and baseline)",
               PhaseKind::Import);
    auto imported =
        loadModuleBytes(inputBytes, options.inputPath, InputFormat::Onnx, dims);
    if (!imported)
      return imported.takeError();
    result.original = std::move(*imported);
    if (llvm::Error err = buildStep(options, *result.original))
      return err;
  }

  if (options.timer)
    options.timer->stop();
  if (llvm::Error err = passManager.run(**module))
    return fileError(options.inputPath, llvm::toString(std::move(err)));
  if (options.timer)
    options.timer->addPassTimings(passManager);
  result.pipeline = passManager.getPipelineString();
  recordPipeline(**module, result.pipeline);
  if (result.accumulate > 1)
    recordAccumulation(**module, result.accumulate);
  result.module = std::move(*module);
  return result;
}
