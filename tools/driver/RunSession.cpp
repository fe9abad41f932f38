//===- RunSession.cpp - One gmopt-run invocation, as a library call -------===//
//
// The order of a gmopt-run invocation: validate the options, pick the
// backend, read every input file (so a bad file is reported before any
// work), load the model (`auto` on a CUDA device falls back to the CPU, and
// loads again, when a node has no CUDA kernel), make sure it has a plan,
// bind the inputs, print the notices (only now, so a run that fails before
// this prints one error line), train, compare, run the baseline, write the JSON
// report, and only then return a numerical failure so the report is there to
// look at.
//
//===----------------------------------------------------------------------===//

#include "tools/driver/RunSession.h"
#include "tools/compiler/FitMemory.h"
#include "tools/driver/DataParallelRun.h"
#include "tools/driver/GradientDump.h"

#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/PlanTimeline.h"
#include "tools/driver/Progress.h"
#include "tools/driver/RunReport.h"
#include "tools/driver/ToolSupport.h"
#include "tools/driver/TraceWriter.h"
#include "tools/runtime/OptimizerStateMap.h"

#include "backend/cpu/Mpi.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaGraphCapture.h"
#include "ir/Collectives.h"
#include "ir/ZeroSharding.h"
#include "ir/serialization/FileIO.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace gmopt;

namespace {

constexpr llvm::StringLiteral kTool = "gmopt-run";

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The --check or --sgd-reference verdict as an error (success if all
/// passed).
llvm::Error verdict(llvm::StringRef what, llvm::StringRef file,
                    llvm::ArrayRef<TensorComparison> comparisons) {
  const TensorComparison *worst = nullptr;
  unsigned failures = 0;
  for (const TensorComparison &comparison : comparisons) {
    if (comparison.ok)
      continue;
    ++failures;
    if (!worst || !(comparison.maxRelError <= worst->maxRelError))
      worst = &comparison;
  }
  if (!failures)
    return llvm::Error::success();
  std::string detail =
      worst->problem.empty()
          ? llvm::formatv("max relative error {0:e2}", worst->maxRelError).str()
          : worst->problem;
  return llvm::make_error<NumericalError>(
      llvm::formatv("{0}: {1} failed: {2} of {3} beyond tolerance (worst "
                    "'{4}': {5})",
                    file, what, failures, comparisons.size(), worst->name,
                    detail)
          .str());
}

/// Fails unless every collective of \p module was placed for this run's
/// world size (1 outside mpirun): a mismatched launch is refused before
/// any step instead of failing, or hanging, inside one.
llvm::Error checkWorldSize(const Module &module) {
  int world = cpu::getMpiWorldSize();
  for (const Node &node : module.getGraph().getNodes()) {
    if (!isCommunicatingCollective(node))
      continue;
    int64_t ranks = node.getIntAttr("ranks", 1);
    if (ranks == world)
      continue;
    std::string launch =
        cpu::isMpiBuilt()
            ? llvm::formatv("launch it with `mpirun -np {0} gmopt-run ...`, "
                            "or as {0} processes with RANK, WORLD_SIZE={0}, "
                            "MASTER_ADDR and MASTER_PORT set",
                            ranks)
                  .str()
            : llvm::formatv("launch it as {0} processes with RANK, "
                            "WORLD_SIZE={0}, MASTER_ADDR and MASTER_PORT set "
                            "(this gmopt was built without MPI, so mpirun "
                            "cannot start it)",
                            ranks)
                  .str();
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("compiled for {0} data-parallel ranks but this run has "
                      "{1} (node {2}); {3}",
                      ranks, world, node.getName(), launch));
  }
  return llvm::Error::success();
}

/// Keeps this rank's share of \p batches (see runSession); a no-op outside
/// a data-parallel world. Several sets (a folder of test_data_set_N) are
/// dealt round-robin: rank r takes sets r, r + N, ..., so their count must
/// be a multiple of the world size N for every rank to feed as many
/// micro-steps from the same step's sets. One set is the global batch:
/// each rank takes its 1/N slice along axis 0 (\p accumulate is the
/// micro-steps per step; the rank's part is split again into them).
llvm::Error takeRankShare(std::vector<TestDataSet> &batches,
                          const Module &compiled, unsigned accumulate) {
  int world = cpu::getMpiWorldSize(), rank = cpu::getMpiRank();
  if (world <= 1 || batches.empty())
    return llvm::Error::success();
  if (batches.size() > 1) {
    if (batches.size() % size_t(world) != 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--inputs holds {0} test_data_set folders for {1} "
                        "ranks: a folder of sets must hold a multiple of the "
                        "world size (rank r takes sets r, r + {1}, ..., one "
                        "per micro-step), or one set of the global batch, "
                        "which the ranks split",
                        batches.size(), world));
    std::vector<TestDataSet> mine;
    for (size_t i = rank; i < batches.size(); i += world)
      mine.push_back(std::move(batches[i]));
    batches = std::move(mine);
    return llvm::Error::success();
  }
  auto split = splitTestDataSet(
      batches.front(), unsigned(world),
      [&](llvm::StringRef name)
          -> std::optional<llvm::SmallVector<int64_t, 4>> {
        for (const Value *input : compiled.getSignature().getDataInputs())
          if (input->getName() == name && input->getType().hasStaticShape()) {
            llvm::SmallVector<int64_t, 4> shape(
                input->getType().getStaticShape());
            if (!shape.empty())
              shape[0] *= accumulate;
            return shape;
          }
        return std::nullopt;
      });
  if (!split)
    return split.takeError();
  if (split->empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("--inputs is one batch of the compiled per-rank shape; "
                      "{0} ranks need the global batch ({0} times the "
                      "compiled batch) or one test_data_set folder per rank",
                      world));
  TestDataSet share = std::move((*split)[rank]);
  batches.clear();
  batches.push_back(std::move(share));
  return llvm::Error::success();
}

/// Reads the optional --inputs/--check directory \p dir.
llvm::Error readOptionalSet(const std::string &dir,
                            std::optional<TestDataSet> &set) {
  if (dir.empty())
    return llvm::Error::success();
  auto read = readTestDataSet(dir);
  if (!read)
    return read.takeError();
  set = std::move(*read);
  return llvm::Error::success();
}

/// The --trace steps of \p result (which ran with kernel timing): micro-step
/// i is micro-step i % accumulate + 1 of step i / accumulate + 1.
std::vector<TraceStep> traceSteps(const TrainingResult &result,
                                  unsigned accumulate) {
  std::vector<TraceStep> steps;
  for (size_t i = 0; i != result.trace.size(); ++i) {
    const MicroStepTrace &micro = result.trace[i];
    TraceStep step;
    step.step = i / accumulate + 1;
    step.microStep = i % accumulate + 1;
    step.microSteps = accumulate;
    step.startMicros = 1e3 * micro.startMilliseconds;
    step.durationMicros = 1e3 * result.microStepMilliseconds[i];
    for (const NodeTiming &timing : micro.nodes) {
      TraceSlice slice;
      slice.op = timing.node->getOp().str();
      slice.node = timing.node->getName().str();
      slice.phase = phaseName(timing.node->getPhase()).str();
      slice.startMicros = 1e3 * timing.startMilliseconds;
      slice.durationMicros = 1e3 * timing.durationMilliseconds;
      slice.liveBytes = timing.liveBytes;
      step.slices.push_back(std::move(slice));
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

/// Writes the --timeline page (of \p model's plan beside its original run
/// eagerly) and the --trace of \p result, where asked for.
llvm::Error writeTimelineAndTrace(const RunConfig &config,
                                  const RunnableModel &model,
                                  const TrainingResult &result,
                                  unsigned accumulate, OutputFileSet &outputs) {
  if (!config.timelinePath.empty()) {
    if (!model.original)
      return makeError(config.modelPath +
                       ": --timeline needs the original graph, which the "
                       "model does not carry");
    auto page = renderPlanTimeline(*model.module, *model.original,
                                   getWorkspaceModel(WorkspaceTarget::Cpu),
                                   config.modelPath);
    if (!page)
      return makeError(config.modelPath + ": " +
                       llvm::toString(page.takeError()));
    if (llvm::Error err = outputs.write(config.timelinePath, *page))
      return err;
  }
  if (config.tracePath.empty())
    return llvm::Error::success();
  std::string text =
      llvm::formatv("{0}\n", traceJson(traceSteps(result, accumulate),
                                       "gmopt-run " + config.modelPath));
  return outputs.write(config.tracePath, text);
}

} // namespace

namespace {

/// True when \p a and \p b describe the same update (bitwise equal
/// attributes).
bool sameOptimizer(const OptimizerSpec &a, const OptimizerSpec &b) {
  if (a.kind != b.kind)
    return false;
  if (a.kind == OptimizerKind::SGD)
    return true;
  return a.alpha == b.alpha && a.beta == b.beta && a.epsilon == b.epsilon &&
         a.weightDecay == b.weightDecay && a.correctBias == b.correctBias &&
         a.adamMode == b.adamMode;
}

/// A setting shown as \p shown and compared by \p exact, a text that
/// tells every value apart (\p shown when empty).
LaunchSetting makeSetting(llvm::StringRef name, const llvm::Twine &shown,
                          const llvm::Twine &exact = "") {
  LaunchSetting setting;
  setting.name = name.str();
  setting.value = shown.str();
  std::string compared = exact.isTriviallyEmpty() ? setting.value : exact.str();
  setting.hash = hashBytes(llvm::arrayRefFromStringRef(compared));
  return setting;
}

/// \p value with enough digits to tell every float apart (%.9g), or as
/// people write it (%g).
std::string floatText(float value, bool exact) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format(exact ? "%.9g" : "%g", value);
  return text;
}

/// What of a run must be the same on every rank for the ranks to train one
/// model, besides the model file and the initial values: the options that
/// change the training step as \p training runs it (after a loss reference
/// or the .gm's recorded accumulation had their say), and the --inputs
/// every rank reads before taking its share. Not --threads, --mode or the
/// output options, which change no number.
std::vector<LaunchSetting> stepSettings(const RunConfig &config,
                                        const TrainingOptions &training,
                                        const Node *optimizerNode,
                                        llvm::ArrayRef<TestDataSet> inputs) {
  std::vector<LaunchSetting> settings;
  settings.push_back(makeSetting("--steps", llvm::Twine(training.steps)));
  settings.push_back(
      makeSetting("--accumulate", llvm::Twine(training.accumulate)));
  settings.push_back(makeSetting("--lr",
                                 floatText(training.learningRate, false),
                                 floatText(training.learningRate, true)));
  std::string optimizer = "none", exactOptimizer = "none";
  if (training.update && optimizerNode) {
    OptimizerSpec spec = readOptimizerSpec(*optimizerNode);
    optimizer = spec.str();
    exactOptimizer = spec.kindName().str();
    if (spec.kind == OptimizerKind::AdamW)
      for (float value : {spec.alpha, spec.beta, spec.epsilon, spec.weightDecay,
                          float(spec.correctBias), float(spec.adamMode)})
        exactOptimizer += " " + floatText(value, true);
  }
  settings.push_back(makeSetting(
      "optimizer (--optimizer, its hyper-parameters, --optimizer-model)",
      optimizer, exactOptimizer));
  settings.push_back(makeSetting("--seed", llvm::Twine(config.seed)));
  settings.push_back(makeSetting("--backend", backendName(training.backend)));
  settings.push_back(
      makeSetting("--allow-tf32", training.allowTf32 ? "true" : "false"));
  std::string dims;
  for (const auto &[name, size] : config.dims)
    dims += (dims.empty() ? "" : ",") + name + "=" + std::to_string(size);
  settings.push_back(makeSetting("--dim", dims.empty() ? "none" : dims));
  settings.push_back(makeSetting(
      "--passes", config.passes.empty() ? "the default" : config.passes));
  LaunchSetting data;
  data.name = "--inputs";
  data.value = inputs.empty()
                   ? "none"
                   : llvm::formatv("{0} test_data_set folder{1}", inputs.size(),
                                   inputs.size() == 1 ? "" : "s")
                         .str();
  data.hash = inputs.empty() ? 0 : hashTestDataSets(inputs);
  settings.push_back(std::move(data));
  return settings;
}

/// The initial values every rank must share, once bound (\p bindings): the
/// parameters (from --weights, --inputs, the model, or the seeded
/// initialization), and the step state (AdamW's step count, the loss scale)
/// and, unless ZeRO shards it by rank, the optimizer state.
std::vector<LaunchSetting>
initialValueSettings(const Module &module,
                     llvm::ArrayRef<BoundInput> bindings) {
  const TrainingSignature &signature = module.getSignature();
  std::vector<const Value *> params, state;
  bool shardedState = readZeroSharding(module).has_value();
  for (const ParamInfo &info : signature.getParams()) {
    params.push_back(info.param);
    if (!shardedState)
      state.insert(state.end(), info.optimizerState.begin(),
                   info.optimizerState.end());
  }
  for (StepSlot slot :
       {StepSlot::StepCount, StepSlot::LossScale, StepSlot::LossScaleGoodSteps})
    if (const Value *value = signature.getStepSlot(slot))
      state.push_back(value);
  std::vector<LaunchSetting> settings(2);
  settings[0].name = "parameter initialization (--weights, --seed, the "
                     "model's initializers)";
  settings[0].hash = hashInitialValues(params, bindings);
  settings[1].name = "initial optimizer state (--weights: moments, step "
                     "count, loss scale)";
  settings[1].hash = hashInitialValues(state, bindings);
  return settings;
}

} // namespace

llvm::Expected<std::string>
gmopt::cudaFallbackNotice(const RunnableModel &model) {
  llvm::Error missing = checkCudaModule(*model.module);
  if (!missing && model.original)
    missing = checkCudaModule(*model.original);
  if (!missing)
    return std::string();
  std::string reason = llvm::toString(std::move(missing));
  const ExecutionPlan &plan = model.module->plan;
  if (model.fromGmFile && !plan.empty() &&
      plan.workspaceModel == kCudaWorkspaceModelName)
    return makeError(reason +
                     "; the CPU backend cannot run the file "
                     "instead, since its plan was made for the '" +
                     plan.workspaceModel +
                     "' workspace model: compile again with "
                     "--workspace=cpu to run it on the CPU");
  return reason + "; using the CPU backend";
}

llvm::Error gmopt::runSession(const RunConfig &config,
                              llvm::raw_ostream &rankOut,
                              llvm::raw_ostream &rankNotices) {
  // Data-parallel runs: rank 0 speaks for the world (its losses are the
  // global ones); the others print only their errors, unless --verbose.
  bool quietRank =
      isDataParallelRun() && cpu::getMpiRank() != 0 && !config.verbose;
  llvm::raw_ostream &out = quietRank ? llvm::nulls() : rankOut;
  llvm::raw_ostream &notices = quietRank ? llvm::nulls() : rankNotices;
  if (config.modelPath.empty())
    return makeError("no input file (expected a .gm file or an ONNX training "
                     "graph)");
  // `!(x >= 0)` also catches NaN, which would make every comparison fail
  // (or, negated, pass).
  for (auto [name, value] :
       {std::pair<const char *, double>{"--rtol", config.tolerance.rtol},
        {"--atol", config.tolerance.atol}})
    if (!(value >= 0) || std::isinf(value)) {
      std::string text;
      llvm::raw_string_ostream(text) << llvm::format("%g", value);
      return makeError(llvm::Twine(name) +
                       " must be a finite non-negative number, not " + text);
    }
  if (config.steps == 0 || config.accumulate == 0)
    return makeError("--steps and --accumulate must be at least 1");

  // The fallback notice waits until the run proceeds: a run that fails
  // before training prints its error line only.
  std::string notice;
  auto backend = selectBackend(config.backend, notice);
  if (!backend)
    return backend.takeError();

  // --save-weights in a data-parallel run: rank 0 writes a path the ranks
  // share, each rank its own per-rank path; the state is whole either way
  // (ZeRO shards gathered).
  auto savePath =
      resolveRankOutputPath(config.saveWeightsPath, "--save-weights");
  if (!savePath)
    return savePath.takeError();
  // --dump-gradients likewise (a directory).
  auto dumpPath =
      resolveRankOutputPath(config.dumpGradientsDir, "--dump-gradients");
  if (!dumpPath)
    return dumpPath.takeError();

  TrainingOptions training;
  training.backend = *backend;
  training.allowTf32 = config.allowTf32;
  training.executor = config.executor;
  training.steps = config.steps;
  training.accumulate = config.accumulate;
  training.learningRate = config.learningRate;
  // The trace is made of the kernel timings.
  training.executor.profile |= !config.tracePath.empty();
  // Refused before the model loads; its nodes are checked when prepared.
  if (training.executor.cudaGraph)
    if (llvm::Error err =
            checkCudaGraphOptions(training.executor, backendName(*backend)))
      return err;
  std::optional<OptimizerSpec> optimizer = config.optimizerSpec;
  bool wantUpdates =
      config.optimizer != OptimizerChoice::None || config.optimizerSpecExplicit;

  std::optional<LossReference> lossReference;
  if (!config.lossReferencePath.empty()) {
    auto reference = readLossReference(config.lossReferencePath);
    if (!reference)
      return reference.takeError();
    if ((config.optimizerGiven || config.optimizerSpecExplicit) &&
        !(optimizer && sameOptimizer(*optimizer, reference->optimizer)))
      return makeError("--loss-reference " + config.lossReferencePath +
                       " was made with " + reference->optimizer.str() +
                       "; it cannot be combined with --optimizer" +
                       (optimizer ? "=" + optimizer->str() : "=none"));
    if (config.accumulate != 1)
      return makeError("--loss-reference needs --accumulate=1");
    if (config.learningRateGiven &&
        config.learningRate != static_cast<float>(reference->learningRate))
      return makeError("--loss-reference " + config.lossReferencePath +
                       " was made with learning rate " +
                       llvm::formatv("{0}", reference->learningRate).str() +
                       "; do not pass another --lr");
    optimizer = reference->optimizer;
    wantUpdates = true;
    training.learningRate = static_cast<float>(reference->learningRate);
    if (!config.stepsGiven)
      training.steps = reference->losses.size();
    lossReference = std::move(*reference);
  }
  training.update = wantUpdates;
  // The dump is one step's gradients, before its update: the gradients of
  // later steps would also depend on the updates between. Without updates
  // (--optimizer=none) every step starts from the same parameters and the
  // dump is the last step's (with --cuda-graph, a replayed step's).
  if (!config.dumpGradientsDir.empty() && training.steps != 1 &&
      training.update)
    return makeError(
        llvm::formatv("--dump-gradients writes the gradients of one step; "
                      "this run has {0} steps{1} (use --steps 1)",
                      training.steps,
                      lossReference && !config.stepsGiven
                          ? " (one per loss of --loss-reference)"
                          : "")
            .str());

  // --inputs: one test-data set, or a folder of test_data_set_N folders
  // fed round-robin (the first also binds dimensions and the other inputs).
  std::optional<TestDataSet> inputs, references;
  std::vector<TestDataSet> inputBatches;
  if (!config.inputsDir.empty()) {
    auto sets = readTestDataSets(config.inputsDir);
    if (!sets)
      return sets.takeError();
    inputBatches = std::move(*sets);
    inputs = inputBatches.front();
  }
  std::optional<WeightSet> weights;
  if (!config.weightsPath.empty()) {
    auto read = readWeightFile(config.weightsPath);
    if (!read)
      return read.takeError();
    weights = std::move(*read);
  }
  if (llvm::Error err = readOptionalSet(config.checkDir, references))
    return err;

  // The report may overwrite none of the files the run reads; it is
  // reserved now so that a bad path fails before the run, and it replaces
  // its target only once written in full.
  OutputFileSet outputs;
  bool writesFiles = !config.reportJsonPath.empty() || !savePath->empty() ||
                     !dumpPath->empty() || !config.timelinePath.empty() ||
                     !config.tracePath.empty();
  // The --dump-gradients directory is made ready now (a bad path fails
  // before the run); one this run created is removed again if the run
  // fails, with the temporary files of every output.
  std::optional<GradientDump> gradientDump;
  bool committed = false;
  auto removeUncommittedDump = llvm::make_scope_exit([&] {
    if (gradientDump && !committed) {
      outputs.discard();
      gradientDump->removeIfCreatedAndEmpty();
    }
  });
  if (writesFiles) {
    outputs.addInput(config.modelPath, "the model");
    outputs.addInput(config.lossReferencePath, "the --loss-reference file");
    if (weights) {
      outputs.addInput(weights->path, "the --weights file");
      llvm::SmallString<256> sequence(weights->path);
      llvm::sys::path::append(sequence, "tensors.pbseq");
      outputs.addInput(sequence, "the --weights file");
    }
    for (const std::optional<TestDataSet> *set : {&inputs, &references})
      if (*set)
        for (const auto *tensors : {&(*set)->inputs, &(*set)->outputs})
          for (const NamedTensor &tensor : *tensors)
            outputs.addInput(tensor.source, set == &inputs ? "an --inputs file"
                                                           : "a --check file");
    if (!config.reportJsonPath.empty())
      if (llvm::Error err =
              outputs.reserve(config.reportJsonPath, "--report-json"))
        return err;
    if (!savePath->empty())
      if (llvm::Error err = outputs.reserve(*savePath, "--save-weights"))
        return err;
    for (auto [path, option] : {std::pair<const std::string &, const char *>{
                                    config.timelinePath, "--timeline"},
                                {config.tracePath, "--trace"}})
      if (!path.empty())
        if (llvm::Error err = outputs.reserve(path, option))
          return err;
    if (!dumpPath->empty()) {
      auto opened = GradientDump::open(*dumpPath);
      if (!opened)
        return opened.takeError();
      gradientDump = std::move(*opened);
    }
  }

  auto model = loadRunnableModel(
      config.modelPath, config.dims, inputs ? &*inputs : nullptr,
      config.baseline || !config.timelinePath.empty(), config.passes,
      optimizer ? &*optimizer : nullptr, config.externalDataDir, *backend);
  if (!model)
    return model.takeError();
  // A device but a node without a CUDA kernel: `auto` runs on the CPU (an
  // ONNX graph is loaded again, planned for the CPU kernels' workspace);
  // `--backend=cuda` fails at prepare, naming the node.
  if (config.backend == BackendKind::Auto && *backend == BackendKind::Cuda) {
    auto fallback = cudaFallbackNotice(*model);
    if (!fallback)
      return makeError(config.modelPath + ": " +
                       llvm::toString(fallback.takeError()));
    if (!fallback->empty()) {
      notice = std::move(*fallback);
      *backend = BackendKind::Cpu;
      training.backend = BackendKind::Cpu;
      if (!model->fromGmFile) {
        model = loadRunnableModel(
            config.modelPath, config.dims, inputs ? &*inputs : nullptr,
            config.baseline || !config.timelinePath.empty(), config.passes,
            optimizer ? &*optimizer : nullptr, config.externalDataDir,
            BackendKind::Cpu);
        if (!model)
          return model.takeError();
      }
    }
  }
  // gmopt-compile --memory-limit recorded the micro-steps its plan fits
  // with; they are the default. A loss reference is one whole batch per
  // step: it needs --inputs, which are split into the micro-steps.
  if (unsigned recorded = recordedAccumulation(*model->module);
      recorded > 1 && !config.accumulateGiven) {
    if (lossReference && !inputs)
      return makeError(config.modelPath + " was compiled for " +
                       llvm::Twine(recorded) +
                       " micro-steps per step; --loss-reference needs the "
                       "whole batch as --inputs (or --accumulate=1)");
    training.accumulate = recorded;
  }
  // A compiled-in optimizer is what runs: it must be the one asked for.
  const Node *optimizerNode = findOptimizerNode(*model->module);
  std::string optimizerName = "none";
  if (optimizerNode) {
    OptimizerSpec compiled = readOptimizerSpec(*optimizerNode);
    bool asked =
        lossReference || config.optimizerGiven || config.optimizerSpecExplicit;
    if (asked && optimizer && !sameOptimizer(compiled, *optimizer))
      return makeError(config.modelPath + ": the module's optimizer is " +
                       compiled.str() + ", not the " + optimizer->str() +
                       (lossReference ? " of " + config.lossReferencePath
                                      : std::string(" asked for")));
    optimizerName = wantUpdates ? compiled.str() : "none";
  }

  // Prefixes errors with the model file, keeping their kind (numerical or
  // not); messages about a tensor or weights file already start with it.
  auto prefixModel = [&](llvm::Error err) -> llvm::Error {
    bool numerical = err.isA<NumericalError>();
    std::string message = llvm::toString(std::move(err));
    if (!llvm::StringRef(message).contains(".pb: ") &&
        !(weights && llvm::StringRef(message).starts_with(weights->path)))
      message = config.modelPath + ": " + message;
    if (numerical)
      return llvm::make_error<NumericalError>(message);
    return makeError(message);
  };
  // Every rank checks (a rank that does not write refuses alike).
  if (!config.dumpGradientsDir.empty())
    if (llvm::Error err = GradientDump::checkDumpable(*model->module))
      return prefixModel(std::move(err));
  if (gradientDump)
    if (llvm::Error err = gradientDump->reserve(*model->module, outputs))
      return err;
  // The executor would fall back to the trivial plan anyway; making it here
  // lets the report show the figures of the plan that really runs.
  auto planSource = ensurePlan(*model->module);
  if (!planSource)
    return prefixModel(planSource.takeError());

  // Data-parallel runs (mpirun): each rank takes its share of --inputs, a
  // folder of sets dealt round-robin, or one set's batch split along axis 0
  // so that the ranks together see the global batch.
  if (llvm::Error err = checkWorldSize(*model->module))
    return prefixModel(std::move(err));
  if (llvm::Error err =
          checkDataParallelLaunch(config.modelPath, *model->module))
    return prefixModel(std::move(err));
  if (llvm::Error err = checkSameOnEveryRank(
          stepSettings(config, training, optimizerNode, inputBatches),
          "the start-up check of the training settings"))
    return prefixModel(std::move(err));
  if (isDataParallelRun()) {
    training.reduceLoss = [](double loss) {
      return cpu::averageOverRanks(loss, "the step loss's mean");
    };
    // Every rank gathers (a collective), whichever of them writes.
    if (!config.saveWeightsPath.empty() && readZeroSharding(*model->module))
      training.gatherShards = [](llvm::ArrayRef<float> shard)
          -> llvm::Expected<std::vector<float>> {
        std::vector<float> gathered(shard.size() *
                                    size_t(cpu::getMpiWorldSize()));
        if (llvm::Error err =
                cpu::allGatherF32(shard.data(), gathered.data(), shard.size()))
          return err;
        return gathered;
      };
  }
  if (llvm::Error err =
          takeRankShare(inputBatches, *model->module, training.accumulate))
    return err;
  if (!inputBatches.empty())
    inputs = inputBatches.front();

  // A module compiled at the micro-batch takes the whole batch's inputs
  // split into its micro-steps, so that a step sees the same examples.
  if (training.accumulate > 1 && inputBatches.size() == 1) {
    const Module &compiled = *model->module;
    auto split = splitTestDataSet(
        *inputs, training.accumulate,
        [&](llvm::StringRef name)
            -> std::optional<llvm::SmallVector<int64_t, 4>> {
          for (const Value *input : compiled.getSignature().getDataInputs())
            if (input->getName() == name && input->getType().hasStaticShape())
              return input->getType().getStaticShape();
          return std::nullopt;
        });
    if (!split)
      return split.takeError();
    if (!split->empty()) {
      inputBatches = std::move(*split);
      inputs = inputBatches.front();
    }
  }
  // An ONNX Runtime checkpoint's optimizer state goes into the module's
  // state inputs (under the module's names, which bindInputs then finds).
  OptimizerStateAdoption adoption;
  if (weights) {
    OptimizerStateOptions stateOptions;
    stateOptions.updates = optimizerNode && training.update;
    stateOptions.ignore = config.ignoreOptimizerState;
    stateOptions.allowMissing = config.allowMissingWeights;
    stateOptions.learningRate = training.learningRate;
    auto adopted =
        adoptOrtOptimizerState(*weights, *model->module, stateOptions);
    if (!adopted)
      return prefixModel(adopted.takeError());
    adoption = std::move(*adopted);
  }
  InputSources sources;
  sources.testData = inputs ? &*inputs : nullptr;
  sources.weights = weights ? &*weights : nullptr;
  sources.allowMissingWeights = config.allowMissingWeights;
  sources.seed = config.seed;
  sources.rank = isDataParallelRun() ? cpu::getMpiRank() : 0;
  auto bound = bindInputs(*model->module, sources);
  if (!bound)
    return prefixModel(bound.takeError());
  if (llvm::Error err =
          checkSameOnEveryRank(initialValueSettings(*model->module, *bound),
                               "the start-up check of the initial values"))
    return prefixModel(std::move(err));
  if (inputBatches.size() > 1) {
    llvm::ArrayRef<Value *> dataInputs =
        model->module->getSignature().getDataInputs();
    for (const TestDataSet &batch : inputBatches) {
      InputSources batchSources = sources;
      batchSources.testData = &batch;
      auto batchBound = bindInputs(*model->module, batchSources);
      if (!batchBound)
        return prefixModel(batchBound.takeError());
      std::vector<BoundInput> dataBindings;
      for (BoundInput &binding : *batchBound)
        if (llvm::is_contained(dataInputs, binding.input))
          dataBindings.push_back(std::move(binding));
      training.batches.push_back(std::move(dataBindings));
    }
    notices << llvm::formatv("{0}: {1} input batches from {2}, one per "
                             "micro-step, round-robin\n",
                             kTool, inputBatches.size(), config.inputsDir);
  }

  if (!notice.empty())
    notices << kTool << ": " << notice << "\n";
  for (const std::string &note : adoption.notes)
    notices << kTool << ": note: " << note << "\n";
  // Synthetic data only ever stands in when no --inputs was given; say so
  // once, naming what it replaced.
  // (Parameters seeded the same way are initial weights, not data.)
  const TrainingSignature &signature = model->module->getSignature();
  std::string synthetic;
  unsigned syntheticCount = 0;
  for (const BoundInput &binding : *bound) {
    bool isParam = llvm::any_of(signature.getParams(), [&](const ParamInfo &p) {
      return p.param == binding.input;
    });
    if (binding.origin != InputOrigin::Synthetic || isParam)
      continue;
    synthetic +=
        (syntheticCount++ ? ", '" : "'") + binding.input->getName().str() + "'";
  }
  if (syntheticCount)
    notices << kTool << ": note: no --inputs given; data input"
            << (syntheticCount > 1 ? "s " : " ") << synthetic
            << (syntheticCount > 1 ? " get" : " gets")
            << " seeded synthetic values\n";

  out << llvm::formatv("{0}: training {1} on {2} ({3}, {4} step{5} x {6} "
                       "micro-step{7}, pipeline '{8}')\n",
                       kTool, config.modelPath, backendName(*backend),
                       allocationModeName(training.executor.mode),
                       training.steps, training.steps == 1 ? "" : "s",
                       training.accumulate, training.accumulate == 1 ? "" : "s",
                       model->pipeline);
  if (std::string world = describeDataParallelWorld(); !world.empty())
    out << world << "\n";
  if (optimizerNode)
    out << "optimizer: " << optimizerName << " in the graph, learning rate "
        << llvm::format("%g", training.learningRate) << "\n";
  else
    out << "optimizer: none (the module has no optimizer node)\n";
  // The progress line (on a terminal) is erased when training ends, and
  // before each line the steps print when they go to the same screen.
  ProgressLine progress(notices, config.progress);
  ProgressClearingStream stepLog(out, progress);
  bool sharedScreen = config.progress && out.is_displayed();
  training.onStep = [&](const StepProgress &done) {
    cpu::setCollectiveStep(done.step + 1);
    progress.update(done.step, done.steps, done.loss, done.milliseconds);
  };
  auto result = trainModule(*model->module, *bound, training,
                            sharedScreen ? &stepLog : &out);
  progress.clear();
  if (!result)
    return prefixModel(result.takeError());

  RunSummary summary;
  summary.backend = backendName(*backend).str();
  if (*backend == BackendKind::Cuda) {
    auto device = probeCudaDevice();
    if (device)
      summary.device = device->name;
    else
      llvm::consumeError(device.takeError());
  }
  summary.mode = allocationModeName(training.executor.mode).str();
  summary.steps = training.steps;
  summary.accumulate = training.accumulate;
  summary.optimizer = optimizerName;
  summary.pipeline = model->pipeline;
  summary.tolerance = config.tolerance;

  DataParallelLayout layout = getDataParallelLayout(*model->module);
  if (layout.ranks > 1)
    out << "data parallel: rank " << cpu::getMpiRank() << " of " << layout.ranks
        << ", ZeRO stage " << layout.stage
        << "; the figures below are this rank's\n";
  out << "memory (" << summary.mode << "):\n";
  result->memory.print(out);
  if (result->unplannedScratchBytes)
    out << "note: " << result->unplannedScratchBytes
        << " bytes of kernel scratch were allocated outside the plan's "
           "workspace slices (the plan was made without the CPU workspace "
           "model, or a kernel has none); the measured peak can exceed the "
           "planned one\n";
  if (config.executor.profile)
    printProfile(out, *result);

  llvm::Error failure = llvm::Error::success();
  auto noteFailure = [&](llvm::Error err) {
    if (!failure)
      failure = std::move(err);
    else
      llvm::consumeError(std::move(err));
  };
  // On CUDA the device's own figures must agree with the accounting; a
  // mismatch fails the run once everything is reported.
  if (result->cudaMemory)
    if (llvm::Error err =
            checkDeviceMemoryAgreement(*result->cudaMemory, "the run"))
      noteFailure(prefixModel(std::move(err)));
  if (references) {
    auto comparisons =
        compareWithReference(*result, *references, summary.tolerance);
    if (!comparisons) {
      llvm::consumeError(std::move(failure));
      return comparisons.takeError();
    }
    printComparisons(out, "check against " + config.checkDir, *comparisons,
                     summary.tolerance);
    noteFailure(verdict("check", config.checkDir, *comparisons));
    summary.check = std::move(*comparisons);
  }
  if (lossReference) {
    std::vector<TensorComparison> comparisons =
        compareLossCurve(result->losses, *lossReference, summary.tolerance);
    auto finals =
        compareFinalParameters(*result, *lossReference, summary.tolerance);
    if (!finals) {
      llvm::consumeError(std::move(failure));
      return prefixModel(finals.takeError());
    }
    comparisons.insert(comparisons.end(), finals->begin(), finals->end());
    printComparisons(out,
                     (lossReference->optimizer.kind == OptimizerKind::AdamW
                          ? "AdamW"
                          : "SGD") +
                         std::string(" losses") +
                         (finals->empty() ? "" : " and final parameters") +
                         " against " + config.lossReferencePath,
                     comparisons, summary.tolerance);
    noteFailure(
        verdict("loss curve check", config.lossReferencePath, comparisons));
    summary.sgdReference = std::move(comparisons);
  }
  if (!savePath->empty()) {
    // `*.pbseq`: gmopt's TensorProto sequence; any other name: ONNX
    // Runtime's checkpoint, its optimizer state where ONNX Runtime keeps it.
    bool asSequence = llvm::StringRef(*savePath).ends_with(".pbseq");
    std::string bytes;
    if (asSequence) {
      bytes = writeTensorSequence(result->finalState);
    } else {
      auto checkpoint = makeOrtCheckpoint(
          *model->module, result->finalState, adoption.group,
          weights && weights->kind == WeightFileKind::OrtCheckpoint
              ? &weights->properties
              : nullptr,
          training.learningRate);
      if (!checkpoint) {
        llvm::consumeError(std::move(failure));
        return prefixModel(checkpoint.takeError());
      }
      bytes = writeOrtCheckpoint(*checkpoint);
    }
    if (llvm::Error err = outputs.write(*savePath, bytes)) {
      llvm::consumeError(std::move(failure));
      return err;
    }
    out << "saved " << result->finalState.size() << " tensors (parameters, "
        << "optimizer state, step count) to " << *savePath
        << (asSequence ? "" : " as an ONNX Runtime checkpoint");
    if (training.gatherShards)
      out << " (whole: every rank's ZeRO shards gathered)";
    out << "\n";
  }
  if (gradientDump) {
    GradientDumpRun run;
    run.model = config.modelPath;
    run.backend = backendName(*backend).str();
    run.pipeline = model->pipeline;
    run.microSteps = training.accumulate;
    run.loss = result->losses.back();
    if (llvm::Error err =
            gradientDump->write(result->lastGradients, run, outputs)) {
      llvm::consumeError(std::move(failure));
      return err;
    }
    out << "dumped the gradients of " << gradientDump->size()
        << " parameters to " << gradientDump->getDirectory() << "\n";
  }
  summary.optimized = std::move(*result);

  if (config.baseline) {
    // The original graph, eager, on the same inputs and for the same steps.
    auto baselineInputs = bindInputs(*model->original, sources);
    TrainingOptions baselineTraining = training;
    baselineTraining.executor.mode = AllocationMode::Eager;
    // Eager steps allocate as they go: the baseline is never captured.
    baselineTraining.executor.cudaGraph = false;
    auto baseline =
        baselineInputs
            ? trainModule(*model->original, *baselineInputs, baselineTraining)
            : llvm::Expected<TrainingResult>(baselineInputs.takeError());
    if (!baseline) {
      llvm::consumeError(std::move(failure));
      return prefixModel(baseline.takeError());
    }
    if (baseline->cudaMemory) {
      out << "baseline " << describeCudaMemoryMeasurement(*baseline->cudaMemory)
          << "\n";
      if (llvm::Error err =
              checkDeviceMemoryAgreement(*baseline->cudaMemory, "the baseline"))
        noteFailure(prefixModel(std::move(err)));
    }
    out << "baseline (original graph, eager, fp32) vs optimized ("
        << summary.mode << "):\n";
    printBaselineTable(out, summary.optimized, *baseline);
    summary.baseline = std::move(*baseline);
  }

  summary.plan = summarizePlan(
      *model->module, *planSource,
      summary.baseline
          ? std::optional<uint64_t>(summary.baseline->memory.peakBytes)
          : std::nullopt);
  if (llvm::Error err = writeTimelineAndTrace(config, *model, summary.optimized,
                                              training.accumulate, outputs)) {
    llvm::consumeError(std::move(failure));
    return err;
  }
  if (!config.reportJsonPath.empty()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::formatv("{0:2}", llvm::json::Value(runReportJson(summary)))
       << "\n";
    if (llvm::Error written = outputs.write(config.reportJsonPath, text)) {
      llvm::consumeError(std::move(failure));
      return written;
    }
  }
  if (writesFiles) {
    if (llvm::Error written = outputs.commit()) {
      llvm::consumeError(std::move(failure));
      return written;
    }
    committed = true;
  }
  return failure;
}
