//===- SessionState.cpp - Parameters, checkpoints and eval of a session ---===//
//
// The parts of TrainingSession that read and write its state: inputs and
// outputs by name, parameters one by one and as ONNX Runtime's contiguous
// buffer, checkpoints (ONNX Runtime's format, through OptimizerStateMap),
// the eval model and the inference export.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/SessionImpl.h"

#include "tools/runtime/HostTensorData.h"

#include "tools/driver/PassManagerCLOptions.h"
#include "tools/driver/ToolSupport.h"
#include "tools/runtime/OptimizerStateMap.h"
#include "tools/runtime/RuntimeSupport.h"

#include "passes/PassManager.h"

#include "llvm/ADT/STLExtras.h"

#include <cstring>

using namespace gmopt;
using runtime::makeError;

namespace {

/// The graph input of \p module named \p name, or null.
const Value *findGraphInputByName(const Module &module, llvm::StringRef name) {
  const Value *value = module.getGraph().lookupValue(name);
  return value && value->isGraphInput() ? value : nullptr;
}

ExecutorOptions evalExecutorOptions(const TrainingSessionOptions &options) {
  ExecutorOptions executor;
  executor.mode =
      options.planned ? AllocationMode::Planned : AllocationMode::Eager;
  executor.seed = options.seed;
  executor.threads = options.threads;
  return executor;
}

} // namespace

//===----------------------------------------------------------------------===//
// Names and parameters
//===----------------------------------------------------------------------===//

std::vector<std::string> TrainingSession::inputNames(bool training) const {
  return training ? impl->trainInputs : impl->evalInputs;
}

std::vector<std::string> TrainingSession::outputNames(bool training) const {
  return training ? impl->trainOutputs : impl->evalOutputs;
}

std::vector<std::string>
TrainingSession::parameterNames(bool trainableOnly) const {
  std::vector<std::string> names;
  for (const std::string &name : impl->parameters)
    if (!trainableOnly || impl->trainable.count(name))
      names.push_back(name);
  return names;
}

llvm::Expected<TensorData>
TrainingSession::Impl::readParameter(llvm::StringRef name) const {
  if (!llvm::is_contained(parameters, name))
    return makeError("no parameter '" + name + "'");
  if (exe) {
    const Value *value = model->module->getGraph().lookupValue(name);
    if (!value || !value->isGraphInput())
      return makeError("parameter '" + name +
                       "' is not an input of the compiled step");
    return exe->readValue(value);
  }
  NamedTensor *tensor = state.getImpl().lookupParameter(name, nullptr);
  if (!tensor)
    return makeError("parameter '" + name +
                     "' has no value until the step is compiled");
  return tensor->data;
}

llvm::Error TrainingSession::Impl::writeParameter(llvm::StringRef name,
                                                  const TensorData &value) {
  auto current = readParameter(name);
  if (!current)
    return current.takeError();
  if (current->getType() != value.getType())
    return makeError("parameter '" + name + "' is " + current->getType().str() +
                     ", not " + value.getType().str());
  if (exe)
    return exe->setInput(model->module->getGraph().lookupValue(name), value);
  state.getImpl().lookupParameter(name, nullptr)->data = value;
  return llvm::Error::success();
}

llvm::Expected<HostTensor>
TrainingSession::getParameter(llvm::StringRef name) const {
  auto value = impl->readParameter(name);
  if (!value)
    return value.takeError();
  return toHostTensor(*value);
}

llvm::Error TrainingSession::setParameter(llvm::StringRef name,
                                          const HostTensor &value) {
  // A copy: the executable keeps its own storage, the state may keep this.
  return impl->writeParameter(name, toTensorData(value.clone()));
}

llvm::Expected<HostTensor>
TrainingSession::getGradient(llvm::StringRef name) const {
  if (!impl->exe || !impl->trained)
    return makeError("no gradient yet: run a training step first");
  for (const ParamInfo &param : impl->model->module->getSignature().getParams())
    if (param.trainable && param.param->getName() == name) {
      auto gradient = impl->exe->readGradient(param);
      if (!gradient)
        return gradient.takeError();
      return toHostTensor(*gradient);
    }
  return makeError("no trainable parameter '" + name + "'");
}

int64_t TrainingSession::getParametersSize(bool trainableOnly) const {
  int64_t elements = 0;
  for (const std::string &name : parameterNames(trainableOnly)) {
    auto value = impl->readParameter(name);
    if (!value) {
      llvm::consumeError(value.takeError());
      continue;
    }
    elements += static_cast<int64_t>(value->getNumElements());
  }
  return elements;
}

llvm::Expected<HostTensor>
TrainingSession::getContiguousParameters(bool trainableOnly) const {
  std::vector<TensorData> values;
  int64_t elements = 0;
  for (const std::string &name : parameterNames(trainableOnly)) {
    auto value = impl->readParameter(name);
    if (!value)
      return value.takeError();
    if (value->getType().getDType() != DType::F32)
      return makeError("parameter '" + name + "' is " + value->getType().str() +
                       "; a contiguous buffer holds f32 parameters only");
    elements += static_cast<int64_t>(value->getNumElements());
    values.push_back(std::move(*value));
  }
  auto buffer = HostTensor::allocate(DType::F32, {elements});
  if (!buffer)
    return buffer.takeError();
  uint8_t *out = buffer->getMutableBytes().data();
  for (const TensorData &value : values) {
    llvm::ArrayRef<uint8_t> bytes = value.getBytes();
    if (!bytes.empty())
      std::memcpy(out, bytes.data(), bytes.size());
    out += bytes.size();
  }
  return buffer;
}

llvm::Error TrainingSession::copyBufferToParameters(const HostTensor &buffer,
                                                    bool trainableOnly) {
  int64_t expected = getParametersSize(trainableOnly);
  if (buffer.getDType() != DType::F32 || buffer.getNumElements() != expected)
    return makeError("the buffer is " + buffer.describe() + "; the " +
                     (trainableOnly ? "trainable " : "") +
                     "parameters take f32[" + llvm::Twine(expected) + "]");
  size_t offset = 0;
  for (const std::string &name : parameterNames(trainableOnly)) {
    auto current = impl->readParameter(name);
    if (!current)
      return current.takeError();
    size_t size = current->getBytes().size();
    std::vector<uint8_t> bytes(buffer.getBytes().begin() + offset,
                               buffer.getBytes().begin() + offset + size);
    offset += size;
    if (llvm::Error err = impl->writeParameter(
            name, TensorData(current->getType(), std::move(bytes))))
      return err;
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

llvm::Expected<OrtCheckpoint>
TrainingSession::Impl::snapshot(bool includeOptimizerState) const {
  const OrtCheckpoint &loaded = state.getImpl().checkpoint;
  if (!exe) {
    OrtCheckpoint checkpoint = loaded;
    if (!includeOptimizerState)
      checkpoint.optimizerGroups.clear();
    return checkpoint;
  }
  const Module &module = *model->module;
  auto layout = getCheckpointLayout(module);
  if (!layout)
    return layout.takeError();
  // The final state as the runtime names it: parameters, then each one's
  // optimizer state, the step count and the loss-scale state.
  std::vector<NamedTensor> finalState;
  auto keep = [&](const Value *value) -> llvm::Error {
    auto data = exe->readValue(value);
    if (!data)
      return data.takeError();
    NamedTensor tensor;
    tensor.name = value->getName().str();
    tensor.source = "the session";
    tensor.data = std::move(*data);
    finalState.push_back(std::move(tensor));
    return llvm::Error::success();
  };
  const TrainingSignature &signature = module.getSignature();
  for (const ParamInfo &param : signature.getParams())
    if (llvm::Error err = keep(param.param))
      return err;
  for (const ParamInfo &param : signature.getParams())
    for (const Value *stateValue : param.optimizerState)
      if (llvm::Error err = keep(stateValue))
        return err;
  if (layout->step)
    if (llvm::Error err = keep(layout->step))
      return err;
  for (const auto &entry : layout->lossScale)
    if (llvm::Error err = keep(entry.second))
      return err;
  float initialRate = schedule ? schedule->initialLearningRate : learningRate;
  auto checkpoint = makeOrtCheckpoint(module, finalState, resumedGroup,
                                      &loaded.properties, initialRate);
  if (!checkpoint)
    return checkpoint.takeError();
  if (!includeOptimizerState)
    checkpoint->optimizerGroups.clear();
  // The properties are the state's, including those added since loading.
  checkpoint->properties = loaded.properties;
  return checkpoint;
}

llvm::Error
TrainingSession::Impl::adoptCheckpoint(const OrtCheckpoint &checkpoint,
                                       llvm::StringRef description) {
  const Module &module = *model->module;
  WeightSet weights;
  weights.path = description.str();
  weights.kind = WeightFileKind::OrtCheckpoint;
  weights.tensors = checkpoint.trainable;
  weights.tensors.insert(weights.tensors.end(), checkpoint.frozen.begin(),
                         checkpoint.frozen.end());
  weights.optimizerGroups = checkpoint.optimizerGroups;
  weights.properties = checkpoint.properties;
  boundWeights = std::move(weights);
  bool hasOptimizer = findOptimizerNode(module) != nullptr;
  OptimizerStateOptions stateOptions;
  stateOptions.updates = hasOptimizer;
  stateOptions.ignore = !hasOptimizer;
  stateOptions.allowMissing = true;
  stateOptions.learningRate = learningRate;
  auto adoption = adoptOrtOptimizerState(*boundWeights, module, stateOptions);
  if (!adoption)
    return adoption.takeError();
  resumedGroup = adoption->group;
  return llvm::Error::success();
}

llvm::Error TrainingSession::Impl::restore(const OrtCheckpoint &checkpoint) {
  OrtCheckpoint &current = state.getImpl().checkpoint;
  current = checkpoint;
  if (!exe)
    return llvm::Error::success();
  // Bind again from the new state, keeping the compiled module.
  const Module &module = *model->module;
  if (llvm::Error err = adoptCheckpoint(checkpoint, "the checkpoint"))
    return err;
  for (const NamedTensor &tensor : boundWeights->tensors) {
    const Value *input = module.getGraph().lookupValue(tensor.name);
    if (!input || !input->isGraphInput())
      continue;
    if (llvm::Error err = exe->setInput(input, tensor.data))
      return err;
    if (input == module.getSignature().getStepSlot(StepSlot::StepCount))
      updates = static_cast<int64_t>(tensor.data.getFloatElement(0));
  }
  if (checkpoint.optimizerGroups.empty())
    updates = 0;
  return llvm::Error::success();
}

CheckpointState &TrainingSession::getCheckpointState() { return impl->state; }

llvm::Error TrainingSession::saveCheckpoint(llvm::StringRef path,
                                            bool includeOptimizerState) const {
  return impl->state.save(path, includeOptimizerState);
}

llvm::Error TrainingSession::loadCheckpoint(llvm::StringRef path) {
  auto loaded = CheckpointState::load(path);
  if (!loaded)
    return loaded.takeError();
  return impl->restore(loaded->getImpl().checkpoint);
}

llvm::Error TrainingSession::addOptimizer(llvm::StringRef optimizerModel) {
  if (impl->optimizer)
    return makeError("the session already has an optimizer");
  auto spec = importOptimizerModelFile(optimizerModel);
  if (!spec)
    return spec.takeError();
  impl->artifacts.optimizerModel = optimizerModel.str();
  impl->optimizer = std::move(*spec);
  if (!impl->exe)
    return llvm::Error::success();
  // Recompile with the optimizer in the step, carrying the parameters and
  // the accumulated gradients over.
  auto snapshot = impl->snapshot(false);
  if (!snapshot)
    return snapshot.takeError();
  std::vector<std::pair<std::string, TensorData>> buffers;
  for (const ParamInfo &param : impl->model->module->getSignature().getParams())
    if (param.accumulator) {
      auto data = impl->exe->readValue(param.accumulator);
      if (!data)
        return data.takeError();
      buffers.emplace_back(param.accumulator->getName().str(), *data);
    }
  PropertyBag properties = impl->state.getImpl().checkpoint.properties;
  impl->state.getImpl().checkpoint = std::move(*snapshot);
  impl->state.getImpl().checkpoint.properties = std::move(properties);
  impl->options.dims = impl->model->dims;
  impl->exe.reset();
  impl->model.reset();
  if (llvm::Error err = impl->compile({}))
    return err;
  for (const auto &entry : buffers)
    if (const Value *buffer =
            impl->model->module->getGraph().lookupValue(entry.first))
      if (llvm::Error err = impl->exe->setInput(buffer, entry.second))
        return err;
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Eval and export
//===----------------------------------------------------------------------===//

llvm::Expected<std::vector<HostTensor>>
TrainingSession::evalStep(llvm::ArrayRef<HostTensor> inputs) {
  if (impl->artifacts.evalModel.empty())
    return makeError("the session has no eval model");
  if (inputs.size() != impl->evalInputs.size())
    return makeError("the eval step takes " +
                     llvm::Twine(impl->evalInputs.size()) + " inputs, not " +
                     llvm::Twine(inputs.size()));
  if (!impl->evalExe) {
    // Bind the eval model's open dimensions from its inputs' shapes.
    std::map<std::string, int64_t> dims = impl->options.dims;
    auto module = loadModule(impl->artifacts.evalModel, InputFormat::Onnx, {});
    if (!module)
      return module.takeError();
    for (size_t i = 0; i != inputs.size(); ++i) {
      const Value *input = findGraphInputByName(**module, impl->evalInputs[i]);
      if (!input || !input->getType().hasRank() ||
          input->getType().getRank() != inputs[i].getShape().size())
        continue;
      for (unsigned d = 0; d != input->getType().getRank(); ++d) {
        const Dim &dim = input->getType().getDim(d);
        if (dim.isSymbolic())
          dims.emplace(dim.getSymbol().str(), inputs[i].getShape()[d]);
      }
    }
    if (llvm::Error err = bindSymbolicDims(**module, dims))
      return err;
    PassManager passManager;
    WorkspaceTarget target = impl->backend == BackendKind::Cuda
                                 ? WorkspaceTarget::Cuda
                                 : WorkspaceTarget::Cpu;
    passManager.getContext().setWorkspaceModel(
        getWorkspaceModel(target), workspaceModelName(target).str());
    if (llvm::Error err = passManager.addPipeline("canonicalize,plan-buffers"))
      return err;
    if (llvm::Error err = passManager.run(**module))
      return err;
    auto prepared = prepareExecutable(**module, impl->backend,
                                      evalExecutorOptions(impl->options),
                                      impl->options.allowTf32);
    if (!prepared)
      return prepared.takeError();
    impl->evalModule = std::move(*module);
    impl->evalExe = std::move(*prepared);
  }
  const Module &module = *impl->evalModule;
  for (const auto &input : module.getGraph().getInputs()) {
    if (!llvm::is_contained(impl->parameters, input->getName()))
      continue;
    auto value = impl->readParameter(input->getName());
    if (!value)
      return value.takeError();
    if (llvm::Error err = impl->evalExe->setInput(input.get(), *value))
      return err;
  }
  for (size_t i = 0; i != inputs.size(); ++i) {
    const Value *input = findGraphInputByName(module, impl->evalInputs[i]);
    if (!input)
      continue; // Folded away: the model does not read it.
    TensorData data = toTensorData(inputs[i]);
    if (data.getType() != input->getType())
      return makeError("eval input '" + impl->evalInputs[i] + "' is " +
                       input->getType().str() + ", not " +
                       inputs[i].describe());
    if (llvm::Error err = impl->evalExe->setInput(input, data))
      return err;
  }
  if (llvm::Error err = impl->evalExe->runStep(impl->runs++))
    return err;
  return readHostOutputs(module, *impl->evalExe, impl->evalOutputs,
                         "the eval model");
}

llvm::Error TrainingSession::exportModelForInferencing(
    llvm::StringRef path, llvm::ArrayRef<std::string> graphOutputNames) const {
  if (impl->artifacts.evalModel.empty())
    return makeError("the session has no eval model to export");
  return writeInferenceModel(
      impl->artifacts.evalModel, path, graphOutputNames,
      [&](llvm::StringRef name) -> llvm::Expected<std::optional<TensorData>> {
        if (!llvm::is_contained(impl->parameters, name))
          return std::nullopt;
        auto value = impl->readParameter(name);
        if (!value)
          return value.takeError();
        return std::optional<TensorData>(std::move(*value));
      });
}
