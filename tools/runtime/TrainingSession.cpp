//===- TrainingSession.cpp - ONNX Runtime's training API over gmopt -------===//
//
// A TrainingSession compiles the training graph once its dimensions are
// known (gmopt-run's loader: the default pipeline, the optimizer of
// optimizer_model.onnx merged in), binds the checkpoint's parameters and
// optimizer state, and drives the compiled step as ONNX Runtime's Module and
// Optimizer do: lazy_reset_grad, the update signal, the learning rate and
// the step count are inputs of the one training graph. An optimizer step on
// its own re-runs the step with a zero loss-gradient seed and the update
// signal set, so the optimizer sees exactly the gradients accumulated so
// far; trainStepAndUpdate does both in one run.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/SessionImpl.h"

#include "tools/runtime/HostTensorData.h"

#include "tools/compiler/Compiler.h"
#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"
#include "tools/runtime/OptimizerStateMap.h"
#include "tools/runtime/RuntimeSupport.h"

#include "ir/OptimizerOps.h"
#include "passes/DefaultPipeline.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>

using namespace gmopt;
using runtime::filledTensor;
using runtime::makeError;
using runtime::valueTensor;

namespace {

bool isGmFile(llvm::StringRef path) {
  return path.ends_with_insensitive(".gm");
}

/// ONNX Runtime's classification of training-graph inputs and outputs by
/// name: gradient buffers, the reset flag and gradient outputs are the
/// runtime's, not the user's.
bool isRuntimeInput(llvm::StringRef name) {
  return name.ends_with(".accumulation.buffer") || name == "lazy_reset_grad";
}
bool isRuntimeOutput(llvm::StringRef name) {
  return name.ends_with(".accumulation.out") || name.ends_with("_grad");
}

BackendKind toBackendKind(SessionBackend backend) {
  switch (backend) {
  case SessionBackend::Auto:
    return BackendKind::Auto;
  case SessionBackend::Cpu:
    return BackendKind::Cpu;
  case SessionBackend::Cuda:
    return BackendKind::Cuda;
  }
  llvm_unreachable("unknown backend");
}

ExecutorOptions executorOptions(const TrainingSessionOptions &options) {
  ExecutorOptions executor;
  executor.mode =
      options.planned ? AllocationMode::Planned : AllocationMode::Eager;
  executor.seed = options.seed;
  executor.threads = options.threads;
  return executor;
}

/// A graph input of \p module named \p name, or null.
const Value *findGraphInput(const Module &module, llvm::StringRef name) {
  const Value *value = module.getGraph().lookupValue(name);
  return value && value->isGraphInput() ? value : nullptr;
}

} // namespace

float LinearSchedule::at(int64_t step) const {
  float factor;
  if (step < warmupSteps)
    factor = static_cast<float>(step) /
             std::max(1.0f, static_cast<float>(warmupSteps));
  else
    factor = std::max(
        0.0f, static_cast<float>(totalSteps - step) /
                  std::max(1.0f, static_cast<float>(totalSteps - warmupSteps)));
  return initialLearningRate * factor;
}

TrainingArtifacts TrainingArtifacts::fromDirectory(llvm::StringRef directory) {
  auto file = [&](llvm::StringRef name) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };
  TrainingArtifacts artifacts;
  artifacts.trainingModel = file("training_model.onnx");
  for (auto [member, name] :
       {std::pair{&artifacts.evalModel, "eval_model.onnx"},
        std::pair{&artifacts.optimizerModel, "optimizer_model.onnx"}})
    if (llvm::sys::fs::exists(file(name)))
      *member = file(name);
  return artifacts;
}

//===----------------------------------------------------------------------===//
// Opening and compiling
//===----------------------------------------------------------------------===//

TrainingSession::TrainingSession(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}

TrainingSession::~TrainingSession() {
  if (impl && impl->state.getImpl().session == this) {
    // The state keeps the last values once the session is gone.
    auto snapshot = impl->snapshot(true);
    if (snapshot) {
      PropertyBag properties =
          std::move(impl->state.getImpl().checkpoint.properties);
      impl->state.getImpl().checkpoint = std::move(*snapshot);
      impl->state.getImpl().checkpoint.properties = std::move(properties);
    } else {
      llvm::consumeError(snapshot.takeError());
    }
    impl->state.getImpl().session = nullptr;
  }
}

llvm::Expected<std::unique_ptr<TrainingSession>>
TrainingSession::open(const TrainingArtifacts &artifacts,
                      const CheckpointState &state,
                      const TrainingSessionOptions &options) {
  if (state.getSession())
    return makeError("the checkpoint state is already attached to a session");
  auto impl = std::make_unique<Impl>();
  impl->artifacts = artifacts;
  impl->options = options;
  impl->state = state;
  impl->fromGm = isGmFile(artifacts.trainingModel);
  if (impl->fromGm && (!options.pipeline.empty() || options.memoryLimitBytes))
    return makeError(artifacts.trainingModel +
                     ": a .gm file is already compiled; it takes no pipeline "
                     "and no memory limit");
  if (options.memoryLimitBytes && !options.pipeline.empty())
    return makeError("a memory limit chooses the pipeline; give one or the "
                     "other");
  std::string notice;
  auto backend = selectBackend(toBackendKind(options.backend), notice);
  if (!backend)
    return backend.takeError();
  impl->backend = *backend;
  if (!artifacts.optimizerModel.empty()) {
    auto spec = importOptimizerModelFile(artifacts.optimizerModel);
    if (!spec)
      return spec.takeError();
    impl->optimizer = std::move(*spec);
  }
  const OrtCheckpoint &checkpoint = state.getImpl().checkpoint;
  // The updates done, until the compiled step's step count says so.
  if (impl->optimizer && !checkpoint.optimizerGroups.empty())
    impl->updates = checkpoint.optimizerGroups.front().step;
  for (const NamedTensor &tensor : checkpoint.trainable)
    impl->trainable.insert(tensor.name);
  auto isParameter = [&](llvm::StringRef name) {
    return impl->trainable.count(name.str()) ||
           llvm::any_of(checkpoint.frozen, [&](const NamedTensor &tensor) {
             return tensor.name == name;
           });
  };
  if (!impl->fromGm) {
    auto names = readGraphNames(artifacts.trainingModel);
    if (!names)
      return names.takeError();
    for (const std::string &name : names->inputs) {
      if (isParameter(name))
        impl->parameters.push_back(name);
      else if (!isRuntimeInput(name))
        impl->trainInputs.push_back(name);
    }
    for (const std::string &name : names->outputs)
      if (!isRuntimeOutput(name))
        impl->trainOutputs.push_back(name);
  }
  if (!artifacts.evalModel.empty()) {
    auto names = readGraphNames(artifacts.evalModel);
    if (!names)
      return names.takeError();
    for (const std::string &name : names->inputs)
      if (!isParameter(name))
        impl->evalInputs.push_back(name);
    impl->evalOutputs = names->outputs;
  }
  std::unique_ptr<TrainingSession> session(
      new TrainingSession(std::move(impl)));
  // A `.gm` file is compiled for its dimensions; an ONNX graph is compiled
  // now when the options bind every dimension, else at the first step.
  if (session->impl->fromGm || !options.dims.empty()) {
    if (llvm::Error err = session->impl->compile({}))
      return err;
  }
  session->impl->state.getImpl().session = session.get();
  return session;
}

llvm::Expected<std::unique_ptr<TrainingSession>>
TrainingSession::open(llvm::StringRef model,
                      const TrainingSessionOptions &options) {
  TrainingArtifacts artifacts;
  artifacts.trainingModel = model.str();
  return open(artifacts, CheckpointState(), options);
}

llvm::Error TrainingSession::Impl::compile(llvm::ArrayRef<HostTensor> inputs) {
  TestDataSet data;
  data.directory = "the step's inputs";
  for (size_t i = 0; i != inputs.size() && i != trainInputs.size(); ++i) {
    NamedTensor tensor;
    tensor.name = trainInputs[i];
    tensor.source = "input '" + trainInputs[i] + "'";
    tensor.index = static_cast<int64_t>(i);
    tensor.data = toTensorData(inputs[i]);
    data.inputs.push_back(std::move(tensor));
  }
  auto loaded =
      options.memoryLimitBytes
          ? compileToLimit(inputs)
          : loadRunnableModel(artifacts.trainingModel, options.dims,
                              inputs.empty() ? nullptr : &data,
                              /*wantOriginal=*/false, options.pipeline,
                              optimizer ? &*optimizer : nullptr,
                              options.externalDataDir, backend);
  if (!loaded)
    return loaded.takeError();
  model = std::move(*loaded);
  const Module &module = *model->module;
  const TrainingSignature &signature = module.getSignature();
  if (fromGm) {
    // The training signature names what ONNX Runtime infers from names.
    trainInputs.clear();
    trainOutputs.clear();
    parameters.clear();
    trainable.clear();
    for (const Value *input : signature.getDataInputs())
      trainInputs.push_back(input->getName().str());
    for (const Value *output : module.getGraph().getOutputs())
      if (!isRuntimeOutput(output->getName()) &&
          !llvm::any_of(signature.getParams(), [&](const ParamInfo &param) {
            return param.grad == output;
          }))
        trainOutputs.push_back(output->getName().str());
  }
  if (parameters.empty()) {
    // No checkpoint: the parameters are the signature's.
    for (const auto &input : module.getGraph().getInputs())
      for (const ParamInfo &param : signature.getParams())
        if (param.param == input.get()) {
          parameters.push_back(input->getName().str());
          if (param.trainable)
            trainable.insert(input->getName().str());
        }
  }
  // Parameters, optimizer state and step count from the checkpoint state;
  // data inputs from the step's.
  const OrtCheckpoint &checkpoint = state.getImpl().checkpoint;
  if (llvm::Error err = adoptCheckpoint(checkpoint, "the checkpoint state"))
    return err;
  InputSources sources;
  sources.testData = inputs.empty() ? nullptr : &data;
  bool haveWeights = !boundWeights->tensors.empty();
  sources.weights = haveWeights ? &*boundWeights : nullptr;
  sources.seed = options.seed;
  sources.missingWeightsHint.clear();
  auto bound = bindInputs(module, sources);
  if (!bound)
    return bound.takeError();
  auto prepared = prepareExecutable(module, backend, executorOptions(options),
                                    options.allowTf32);
  if (!prepared)
    return prepared.takeError();
  exe = std::move(*prepared);
  const Value *stepInput = signature.getStepSlot(StepSlot::StepCount);
  for (const BoundInput &binding : *bound) {
    if (llvm::Error err = exe->setInput(binding.input, binding.data))
      return err;
    if (binding.input == stepInput)
      updates = static_cast<int64_t>(binding.data.getFloatElement(0));
  }
  return llvm::Error::success();
}

llvm::Expected<RunnableModel>
TrainingSession::Impl::compileToLimit(llvm::ArrayRef<HostTensor> inputs) {
  // The open dimensions, from the inputs' shapes.
  std::map<std::string, int64_t> dims = options.dims;
  auto probe = loadModule(artifacts.trainingModel, InputFormat::Onnx, {});
  if (!probe)
    return probe.takeError();
  for (size_t i = 0; i != inputs.size() && i != trainInputs.size(); ++i) {
    const Value *input = findGraphInput(**probe, trainInputs[i]);
    if (!input || !input->getType().hasRank() ||
        input->getType().getRank() != inputs[i].getShape().size())
      continue;
    for (unsigned d = 0; d != input->getType().getRank(); ++d)
      if (input->getType().getDim(d).isSymbolic())
        dims.emplace(input->getType().getDim(d).getSymbol().str(),
                     inputs[i].getShape()[d]);
  }
  // The compiler's search: the caller feeds every batch, so no gradient
  // accumulation; no mixed precision unless a pipeline asks for it.
  auto request =
      makeFitRequest(std::to_string(*options.memoryLimitBytes), "",
                     /*accumulate=*/false, "batch", "", dims, kDefaultPipeline);
  if (!request)
    return request.takeError();
  CompileOptions compileOptions;
  compileOptions.inputPath = artifacts.trainingModel;
  compileOptions.dims = dims;
  compileOptions.optimizer = optimizer;
  compileOptions.fit = std::move(*request);
  compileOptions.keepOriginal = false;
  WorkspaceTarget target = backend == BackendKind::Cuda ? WorkspaceTarget::Cuda
                                                        : WorkspaceTarget::Cpu;
  compileOptions.configurePasses = [target](PassManager &passManager) {
    passManager.getContext().setWorkspaceModel(
        getWorkspaceModel(target), workspaceModelName(target).str());
    return llvm::Error::success();
  };
  auto compiled = gmopt::compile(compileOptions);
  if (!compiled)
    return compiled.takeError();
  RunnableModel runnable;
  runnable.module = std::move(compiled->module);
  runnable.pipeline = compiled->pipeline;
  runnable.dims = runnable.module->dimBindings;
  return runnable;
}

//===----------------------------------------------------------------------===//
// Steps
//===----------------------------------------------------------------------===//

llvm::Expected<std::vector<HostTensor>>
TrainingSession::Impl::run(llvm::ArrayRef<HostTensor> inputs, bool update,
                           bool zeroSeed) {
  if (!exe)
    if (llvm::Error err = compile(inputs))
      return err;
  const Module &module = *model->module;
  const TrainingSignature &signature = module.getSignature();
  if (!inputs.empty()) {
    if (inputs.size() != trainInputs.size())
      return makeError("the training step takes " +
                       llvm::Twine(trainInputs.size()) + " inputs, not " +
                       llvm::Twine(inputs.size()));
    for (size_t i = 0; i != inputs.size(); ++i) {
      const Value *input = findGraphInput(module, trainInputs[i]);
      if (!input)
        return makeError("the compiled step has no input '" + trainInputs[i] +
                         "'");
      TensorData data = toTensorData(inputs[i]);
      if (data.getType() != input->getType())
        return makeError("input '" + trainInputs[i] + "' is " +
                         input->getType().str() + ", not " +
                         inputs[i].describe());
      if (llvm::Error err = exe->setInput(input, data))
        return err;
    }
  }
  const Node *optimizerNode = findOptimizerNode(module);
  if (update && !optimizerNode)
    return makeError("the session has no optimizer (open it with an "
                     "optimizer model)");
  auto accumulation = planAccumulation(module, 1);
  if (!accumulation)
    return accumulation.takeError();
  // The reset flag: overwrite the buffers on the first step after a reset.
  bool reset = !accumulateGradients;
  if (const Value *lazyReset = signature.getLazyResetGrad()) {
    auto flag = filledTensor(lazyReset->getType(), reset ? 1 : 0);
    if (!flag)
      return flag.takeError();
    if (llvm::Error err = exe->setInput(lazyReset, *flag))
      return err;
  } else if (reset) {
    for (const Value *buffer : accumulation->buffersToZero) {
      auto zeros = filledTensor(buffer->getType(), 0);
      if (!zeros)
        return zeros.takeError();
      if (llvm::Error err = exe->setInput(buffer, *zeros))
        return err;
    }
  }
  const Value *rateInput = signature.getStepSlot(StepSlot::LearningRate);
  const Value *stepInput = signature.getStepSlot(StepSlot::StepCount);
  const Value *signalInput =
      optimizerNode ? findFedUpdateSignal(*optimizerNode) : nullptr;
  if (update && !signalInput)
    return makeError("the optimizer " + optimizerNode->describe() +
                     " has no update signal input to drive");
  if (rateInput)
    if (llvm::Error err = exe->setInput(
            rateInput, valueTensor(rateInput->getType(), learningRate)))
      return err;
  if (stepInput)
    if (llvm::Error err = exe->setInput(
            stepInput, valueTensor(stepInput->getType(),
                                   static_cast<double>(updates + 1))))
      return err;
  if (signalInput) {
    auto signal = filledTensor(signalInput->getType(), update ? 1 : 0);
    if (!signal)
      return signal.takeError();
    if (llvm::Error err = exe->setInput(signalInput, *signal))
      return err;
  }
  const Value *seed = signature.getLossGradSeed();
  if (zeroSeed) {
    if (!seed || !seed->hasData())
      return makeError("the training graph has no constant loss-gradient "
                       "seed, so the optimizer cannot run apart from a "
                       "training step (use trainStepAndUpdate)");
    auto zeros = filledTensor(seed->getType(), 0);
    if (!zeros)
      return zeros.takeError();
    if (llvm::Error err = exe->writeValue(seed, *zeros))
      return err;
  }
  llvm::Error ran = exe->runStep(runs++);
  if (zeroSeed)
    if (llvm::Error err = exe->writeValue(seed, seed->getData()))
      return joinErrors(std::move(ran), std::move(err));
  if (ran)
    return ran;
  for (const auto &pair : accumulation->feedBack) {
    auto value = exe->readValue(pair.first);
    if (!value)
      return value.takeError();
    if (llvm::Error err = exe->setInput(pair.second, *value))
      return err;
  }
  if (update) {
    auto flag = exe->readValue(optimizerNode->getResult(0));
    if (!flag)
      return flag.takeError();
    if (flag->getFloatElement(0) != 0)
      ++updates;
  }
  // Between steps the step count holds the updates done.
  if (stepInput)
    if (llvm::Error err =
            exe->setInput(stepInput, valueTensor(stepInput->getType(),
                                                 static_cast<double>(updates))))
      return err;
  if (zeroSeed)
    return std::vector<HostTensor>();
  accumulateGradients = true;
  trained = true;
  return readHostOutputs(module, *exe, trainOutputs, "the compiled step");
}

llvm::Expected<std::vector<HostTensor>>
TrainingSession::trainStep(llvm::ArrayRef<HostTensor> inputs) {
  if (inputs.empty() && !impl->trainInputs.empty())
    return makeError("the training step needs its inputs");
  return impl->run(inputs, /*update=*/false, /*zeroSeed=*/false);
}

llvm::Expected<std::vector<HostTensor>>
TrainingSession::trainStepAndUpdate(llvm::ArrayRef<HostTensor> inputs) {
  if (inputs.empty() && !impl->trainInputs.empty())
    return makeError("the training step needs its inputs");
  return impl->run(inputs, /*update=*/true, /*zeroSeed=*/false);
}

void TrainingSession::lazyResetGrad() { impl->accumulateGradients = false; }

llvm::Error TrainingSession::optimizerStep() {
  if (!impl->trained)
    return makeError("the optimizer steps on accumulated gradients: run a "
                     "training step first");
  // Nothing to reset: the step adds a zero gradient to the accumulated one.
  bool accumulate = impl->accumulateGradients;
  impl->accumulateGradients = true;
  auto ran = impl->run({}, /*update=*/true, /*zeroSeed=*/true);
  impl->accumulateGradients = accumulate;
  return ran.takeError();
}

//===----------------------------------------------------------------------===//
// Learning rate
//===----------------------------------------------------------------------===//

float TrainingSession::getLearningRate() const { return impl->learningRate; }

void TrainingSession::setLearningRate(float learningRate) {
  impl->learningRate = learningRate;
}

llvm::Error
TrainingSession::registerLinearLRScheduler(int64_t warmupStepCount,
                                           int64_t totalStepCount,
                                           float initialLearningRate) {
  if (warmupStepCount < 0 || totalStepCount < 0)
    return makeError("the linear schedule's step counts cannot be negative");
  impl->schedule =
      LinearSchedule{warmupStepCount, totalStepCount, initialLearningRate};
  // As ONNX Runtime's scheduler does when it is made: the rate of the
  // current step (0 during a warm-up that has not started).
  impl->learningRate = impl->schedule->at(impl->updates);
  return llvm::Error::success();
}

llvm::Error TrainingSession::schedulerStep() {
  if (!impl->schedule)
    return makeError("no learning-rate scheduler is registered");
  impl->learningRate = impl->schedule->at(impl->updates);
  return llvm::Error::success();
}

int64_t TrainingSession::getStepCount() const { return impl->updates; }

bool TrainingSession::isCompiled() const { return impl->exe != nullptr; }

llvm::Expected<SessionMemory> TrainingSession::getMemory() const {
  if (!impl->exe)
    return makeError("the training step is not compiled yet: its "
                     "dimensions are bound by the first step's inputs");
  SessionMemory memory;
  memory.planned = impl->model->module->plan.figures;
  memory.measured = impl->exe->getMemoryReport();
  memory.pipeline = impl->model->pipeline;
  return memory;
}
