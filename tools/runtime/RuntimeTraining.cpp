//===- RuntimeTraining.cpp - The training loop ----------------------------===//
//
// Runs a compiled module's training steps on a backend: gradient
// accumulation over micro-batches (planAccumulation), the optimizer step,
// per-step losses and timings, and the final parameters and gradients that
// the comparisons read.
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/Runtime.h"

#include "tools/driver/ToolSupport.h"
#include "tools/runtime/RuntimeSupport.h"

#include "backend/cuda/CudaDevice.h"
#include "ir/OpRegistry.h"
#include "ir/Optimizer.h"
#include "ir/OptimizerOps.h"
#include "ir/SizeLimits.h"
#include "ir/ZeroSharding.h"
#include "ir/ops/ShapeValue.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/OnnxTensor.h"
#include "passes/PassManager.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>

using namespace gmopt;
using namespace gmopt::runtime;

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

unsigned gmopt::warmupMicroSteps(size_t microSteps) {
  return microSteps > 1 ? 1 : 0;
}

double gmopt::medianAfterWarmup(llvm::ArrayRef<double> milliseconds,
                                unsigned warmup) {
  if (warmup < milliseconds.size())
    milliseconds = milliseconds.drop_front(warmup);
  if (milliseconds.empty())
    return 0;
  std::vector<double> sorted(milliseconds.begin(), milliseconds.end());
  llvm::sort(sorted);
  size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

double TrainingResult::medianStepMilliseconds() const {
  return medianAfterWarmup(microStepMilliseconds, getWarmupMicroSteps());
}

namespace {

/// Multiplies every element of \p data (f32 or f64) by \p factor; false,
/// leaving it unchanged, for other element types.
template <typename T>
void scaleElements(std::vector<uint8_t> &bytes, double factor) {
  for (size_t offset = 0; offset + sizeof(T) <= bytes.size();
       offset += sizeof(T)) {
    T element;
    std::memcpy(&element, bytes.data() + offset, sizeof(T));
    element = static_cast<T>(element * factor);
    std::memcpy(bytes.data() + offset, &element, sizeof(T));
  }
}

bool scaleFloats(TensorData &data, double factor) {
  DType dtype = data.getType().getDType();
  if (dtype != DType::F32 && dtype != DType::F64)
    return false;
  std::vector<uint8_t> bytes(data.getBytes().begin(), data.getBytes().end());
  if (dtype == DType::F32)
    scaleElements<float>(bytes, factor);
  else
    scaleElements<double>(bytes, factor);
  data = TensorData(data.getType(), std::move(bytes));
  return true;
}

} // namespace

llvm::Expected<AccumulationPlan> gmopt::planAccumulation(const Module &module,
                                                         unsigned microSteps) {
  const TrainingSignature &signature = module.getSignature();
  AccumulationPlan plan;
  for (const ParamInfo &param : signature.getParams()) {
    if (!param.trainable || !param.accumulator)
      continue;
    if (!signature.getLazyResetGrad())
      plan.buffersToZero.push_back(param.accumulator);
    const Node *node = param.accumulateNode;
    if (node && node->isa(kMsDomain, "InPlaceAccumulator")) {
      const Value *sum = node->getResult(0);
      if (!sum || !sum->isGraphOutput())
        return makeError("the accumulated gradient of " + quoted(param.param) +
                         " (the result of InPlaceAccumulator " +
                         node->describe() + ") is not a graph output");
      plan.feedBack.emplace_back(sum, param.accumulator);
    }
  }
  // ZeRO stage 2's per-bucket gradient shards (ir/ZeroSharding.h).
  if (!signature.getLazyResetGrad())
    if (std::optional<ZeroShardingRecord> zero = readZeroSharding(module))
      for (const ZeroBucketRecord &bucket : zero->buckets)
        if (!bucket.gradientShard.empty())
          if (const Value *shard =
                  module.getGraph().lookupValue(bucket.gradientShard))
            plan.buffersToZero.push_back(shard);
  if (microSteps <= 1)
    return plan;
  // The mean over micro-batches: the loss-gradient seed is scaled by 1/K,
  // so every gradient (linear in the seed) is the mean-reduced gradient of
  // the concatenated batch.
  const Value *seed = signature.getLossGradSeed();
  if (seed && (seed->isInitializer() || seed->isGraphInput()) &&
      seed->hasData() && seed->getType().hasStaticShape()) {
    TensorData scaled = seed->getData();
    if (scaleFloats(scaled, 1.0 / microSteps)) {
      plan.scaledSeed = std::move(scaled);
      return plan;
    }
  }
  return makeError(
      "--accumulate " + llvm::Twine(microSteps) +
      " averages gradients by scaling the loss-gradient seed, but this "
      "graph has no constant f32/f64 seed (a value named `<loss>_grad`)");
}

llvm::Expected<TrainingResult>
gmopt::trainModule(const Module &module, llvm::ArrayRef<BoundInput> inputs,
                   const TrainingOptions &options, llvm::raw_ostream *log) {
  const TrainingSignature &signature = module.getSignature();
  std::optional<ZeroShardingRecord> zero = readZeroSharding(module);
  bool gradientsSharded = zero && zero->stage == 2;
  const Value *loss = signature.getLoss();
  if (!loss || !loss->isGraphOutput())
    return makeError("the training graph's loss is not a graph output");
  if (!isFloatingPoint(loss->getType().getDType()) ||
      !loss->getType().hasStaticShape() ||
      loss->getType().getNumElements() != 1)
    return makeError("the loss " + quoted(loss) + " is " +
                     loss->getType().str() + ", not a float scalar");
  if (options.steps == 0 || options.accumulate == 0)
    return makeError("--steps and --accumulate must be at least 1");
  const Value *lazyReset = signature.getLazyResetGrad();
  if (options.accumulate > 1) {
    for (const ParamInfo &param : signature.getParams())
      if (param.trainable && !param.accumulator)
        return makeError("--accumulate needs gradient accumulation buffers; "
                         "parameter " +
                         quoted(param.param) + " has none");
  }

  // The in-graph optimizer's step inputs and flag.
  const Node *optimizer = findOptimizerNode(module);
  const Value *rateInput = nullptr, *stepInput = nullptr,
              *signalInput = nullptr, *flag = nullptr;
  if (optimizer) {
    // The learning rate and step count the runtime feeds are the
    // signature's; the optimizer must read those.
    OptimizerOperands layout(*optimizer);
    rateInput = signature.getStepSlot(StepSlot::LearningRate);
    stepInput =
        layout.getStep() ? signature.getStepSlot(StepSlot::StepCount) : nullptr;
    signalInput = findFedUpdateSignal(*optimizer);
    flag = optimizer->getResult(0);
    for (auto [read, slot] :
         {std::pair{layout.getLearningRate(), StepSlot::LearningRate},
          std::pair{layout.getStep(), StepSlot::StepCount}})
      if (read && read != signature.getStepSlot(slot))
        return makeError("the optimizer " + optimizer->describe() + " reads " +
                         quoted(read) +
                         ", which is not the training signature's " +
                         stepSlotName(slot).str() + " input the runtime feeds");
    if (layout.getUpdateSignal() && !signalInput)
      return makeError("the optimizer " + optimizer->describe() + " reads " +
                       quoted(layout.getUpdateSignal()) +
                       ", which is not a graph input the runtime can feed");
    if (!signalInput && options.accumulate > 1)
      return makeError("--accumulate needs the optimizer's update signal "
                       "input (" +
                       optimizer->describe() + " has none)");
    if (!signalInput && !options.update)
      return makeError("the optimizer " + optimizer->describe() +
                       " has no update signal input, so its update cannot "
                       "be skipped");
    if (!flag || !flag->isGraphOutput())
      return makeError("the optimizer's flag is not a graph output");
  }

  auto executable = prepareExecutable(module, options.backend, options.executor,
                                      options.allowTf32);
  if (!executable)
    return executable.takeError();
  Executable &exe = **executable;
  int64_t updatesBefore = 0;
  for (const BoundInput &binding : inputs) {
    if (llvm::Error err = exe.setInput(binding.input, binding.data))
      return err;
    if (binding.input == stepInput)
      updatesBefore = static_cast<int64_t>(binding.data.getFloatElement(0));
  }
  TensorData resetTrue, resetFalse, signalTrue, signalFalse, rate;
  if (lazyReset) {
    auto trueValue = filledTensor(lazyReset->getType(), 1);
    if (!trueValue)
      return trueValue.takeError();
    auto falseValue = filledTensor(lazyReset->getType(), 0);
    if (!falseValue)
      return falseValue.takeError();
    resetTrue = std::move(*trueValue);
    resetFalse = std::move(*falseValue);
  }
  if (signalInput) {
    auto trueValue = filledTensor(signalInput->getType(), 1);
    if (!trueValue)
      return trueValue.takeError();
    auto falseValue = filledTensor(signalInput->getType(), 0);
    if (!falseValue)
      return falseValue.takeError();
    signalTrue = std::move(*trueValue);
    signalFalse = std::move(*falseValue);
  }
  if (rateInput)
    rate = valueTensor(rateInput->getType(), options.learningRate);
  auto stepTensor = [&](int64_t value) {
    return valueTensor(stepInput->getType(), static_cast<double>(value));
  };
  auto accumulation = planAccumulation(module, options.accumulate);
  if (!accumulation)
    return accumulation.takeError();
  if (accumulation->scaledSeed)
    if (llvm::Error err = exe.writeValue(signature.getLossGradSeed(),
                                         *accumulation->scaledSeed))
      return err;
  // Zeros for the accumulation buffers the runtime clears before each step
  // (graphs without lazy_reset_grad), allocated once.
  std::vector<TensorData> zeroBuffers;
  for (const Value *buffer : accumulation->buffersToZero) {
    auto zeros = filledTensor(buffer->getType(), 0);
    if (!zeros)
      return zeros.takeError();
    zeroBuffers.push_back(std::move(*zeros));
  }

  TrainingResult result;
  result.lossName = loss->getName().str();
  uint64_t microStep = 0;
  int64_t updates = updatesBefore;
  auto runStart = std::chrono::steady_clock::now();
  for (unsigned step = 1; step <= options.steps; ++step) {
    if (rateInput)
      if (llvm::Error err = exe.setInput(rateInput, rate))
        return err;
    if (stepInput)
      if (llvm::Error err = exe.setInput(stepInput, stepTensor(updates + 1)))
        return err;
    double lossSum = 0;
    double stepMilliseconds = 0;
    for (unsigned micro = 0; micro != options.accumulate; ++micro) {
      if (lazyReset)
        if (llvm::Error err =
                exe.setInput(lazyReset, micro == 0 ? resetTrue : resetFalse))
          return err;
      bool last = micro + 1 == options.accumulate;
      if (signalInput)
        if (llvm::Error err = exe.setInput(
                signalInput, last && options.update ? signalTrue : signalFalse))
          return err;
      // Without lazy_reset_grad the runtime starts each step from zero.
      if (micro == 0)
        for (size_t i = 0; i != zeroBuffers.size(); ++i)
          if (llvm::Error err =
                  exe.setInput(accumulation->buffersToZero[i], zeroBuffers[i]))
            return err;
      if (!options.batches.empty())
        for (const BoundInput &binding :
             options.batches[microStep % options.batches.size()])
          if (llvm::Error err = exe.setInput(binding.input, binding.data))
            return err;
      std::clock_t cpuStart = std::clock();
      double startMilliseconds =
          std::chrono::duration<double, std::milli>(
              std::chrono::steady_clock::now() - runStart)
              .count();
      if (llvm::Error err = exe.runStep(microStep++))
        return err;
      if (options.executor.profile)
        result.trace.push_back(
            MicroStepTrace{startMilliseconds, exe.getLastStepNodeTimings()});
      result.microStepCpuMilliseconds.push_back(
          1e3 * static_cast<double>(std::clock() - cpuStart) / CLOCKS_PER_SEC);
      // InPlaceAccumulator (V1) returns the sum; it becomes the buffer.
      for (const auto &[sum, buffer] : accumulation->feedBack) {
        auto value = exe.readValue(sum);
        if (!value)
          return value.takeError();
        if (llvm::Error err = exe.setInput(buffer, *value))
          return err;
      }
      result.microStepMilliseconds.push_back(exe.getLastStepMilliseconds());
      stepMilliseconds += result.microStepMilliseconds.back();
      auto lossValue = exe.readValue(loss);
      if (!lossValue)
        return lossValue.takeError();
      double value = lossValue->getFloatElement(0);
      if (!std::isfinite(value)) {
        std::string where = llvm::formatv("step {0}", step);
        if (options.accumulate > 1)
          where += llvm::formatv(" (micro-step {0} of {1})", micro + 1,
                                 options.accumulate);
        return llvm::make_error<NumericalError>(
            "loss is " +
            std::string(std::isnan(value) ? "NaN"
                        : value > 0       ? "+inf"
                                          : "-inf") +
            " at " + where);
      }
      lossSum += value;
      if (microStep == 1)
        result.firstLoss = *lossValue;
    }
    // The gradients of the step: the accumulation buffers (the in-graph
    // optimizer reads them and leaves them as they are).
    // ZeRO stage 2 keeps no whole gradient after the step (only this
    // rank's shard of each bucket): there are none to read.
    auto readGradients =
        [&](std::vector<std::pair<std::string, TensorData>> &into)
        -> llvm::Error {
      into.clear();
      if (gradientsSharded)
        return llvm::Error::success();
      for (const ParamInfo &param : signature.getParams()) {
        if (!param.trainable)
          continue;
        auto gradient = exe.readGradient(param);
        if (!gradient)
          return gradient.takeError();
        into.emplace_back(param.param->getName().str(), std::move(*gradient));
      }
      return llvm::Error::success();
    };
    if (step == 1)
      if (llvm::Error err = readGradients(result.firstGradients))
        return err;
    if (step == options.steps)
      if (llvm::Error err = readGradients(result.lastGradients))
        return err;
    bool skippedThisStep = false;
    if (flag) {
      auto updated = exe.readValue(flag);
      if (!updated)
        return updated.takeError();
      if (updated->getFloatElement(0) != 0)
        ++updates;
      else if (options.update)
        // Asked for and not done: mixed precision's overflow check (the
        // only other input of the update signal) found a non-finite
        // gradient.
        skippedThisStep = true;
    }
    // Between steps the step count holds the updates done, as a
    // checkpoint saves it.
    if (stepInput)
      if (llvm::Error err = exe.setInput(stepInput, stepTensor(updates)))
        return err;
    double stepLoss = lossSum / options.accumulate;
    if (options.reduceLoss) {
      auto reduced = options.reduceLoss(stepLoss);
      if (!reduced)
        return reduced.takeError();
      stepLoss = *reduced;
    }
    result.losses.push_back(stepLoss);
    result.skippedUpdates += skippedThisStep;
    if (log) {
      *log << llvm::formatv("step {0}: loss {1:f6} ({2:f3} ms", step,
                            result.losses.back(),
                            result.microStepMilliseconds.back());
      if (options.accumulate > 1)
        *log << llvm::formatv(" per micro-step, {0} micro-steps",
                              options.accumulate);
      *log << ")";
      if (skippedThisStep)
        *log << ", update skipped (non-finite gradients)";
      *log << "\n";
    }
    if (options.onStep)
      options.onStep(StepProgress{step, options.steps, result.losses.back(),
                                  stepMilliseconds});
  }
  result.updates = static_cast<uint64_t>(updates - updatesBefore);

  // The persistent state: parameters, then optimizer state and the step.
  auto keep = [&](const Value *value) -> llvm::Error {
    auto data = exe.readValue(value);
    if (!data)
      return data.takeError();
    NamedTensor tensor;
    tensor.name = value->getName().str();
    tensor.source = "final state";
    tensor.data = std::move(*data);
    result.finalState.push_back(std::move(tensor));
    return llvm::Error::success();
  };
  // A ZeRO shard made whole: every rank's shards gathered, then cut into
  // the tensors the unsharded step names.
  llvm::StringMap<TensorData> wholeTensors;
  llvm::StringSet<> gatheredShards;
  if (zero && options.gatherShards) {
    auto groups = getZeroShardGroups(*zero);
    if (!groups)
      return groups.takeError();
    for (const ZeroShardGroup &group : *groups) {
      const Value *shard = module.getGraph().lookupValue(group.shard);
      if (!shard)
        return makeError("the ZeRO record names a shard '" + group.shard +
                         "' the graph does not have");
      auto data = exe.readValue(shard);
      if (!data)
        return data.takeError();
      llvm::ArrayRef<uint8_t> bytes = data->getBytes();
      auto gathered = options.gatherShards(
          llvm::ArrayRef<float>(reinterpret_cast<const float *>(bytes.data()),
                                bytes.size() / sizeof(float)));
      if (!gathered)
        return gathered.takeError();
      auto whole = assembleZeroWhole(group, zero->ranks, *gathered);
      if (!whole)
        return whole.takeError();
      for (size_t i = 0, e = group.whole.size(); i != e; ++i)
        wholeTensors[group.whole[i]] = TensorData::fromValues(
            DType::F32, group.shapes[i], llvm::ArrayRef<float>((*whole)[i]));
      gatheredShards.insert(group.shard);
    }
  }
  auto keepWhole = [&](llvm::StringRef name) {
    NamedTensor tensor;
    tensor.name = name.str();
    tensor.source = "final state";
    tensor.data = wholeTensors.lookup(name);
    result.finalState.push_back(std::move(tensor));
  };
  // Where a bucket's whole states go: after each of its parameters', in
  // the unsharded order (a parameter's moments one after the other).
  llvm::StringMap<std::vector<std::string>> wholeStatesOf;
  if (!gatheredShards.empty())
    for (const ZeroBucketRecord &bucket : zero->buckets)
      for (size_t i = 0, e = bucket.params.size(); i != e; ++i)
        for (const std::vector<std::string> &names : bucket.wholeStates)
          if (i < names.size() && wholeTensors.count(names[i]))
            wholeStatesOf[bucket.params[i]].push_back(names[i]);
  for (const ParamInfo &param : signature.getParams()) {
    if (wholeTensors.count(param.param->getName()))
      keepWhole(param.param->getName());
    else if (llvm::Error err = keep(param.param))
      return err;
  }
  for (const ParamInfo &param : signature.getParams()) {
    for (const Value *state : param.optimizerState)
      if (!gatheredShards.count(state->getName()))
        if (llvm::Error err = keep(state))
          return err;
    auto whole = wholeStatesOf.find(param.param->getName());
    if (whole != wholeStatesOf.end())
      for (const std::string &name : whole->second)
        keepWhole(name);
  }
  if (stepInput)
    if (llvm::Error err = keep(stepInput))
      return err;
  for (StepSlot slot : {StepSlot::LossScale, StepSlot::LossScaleGoodSteps})
    if (const Value *state = signature.getStepSlot(slot))
      if (llvm::Error err = keep(state))
        return err;

  result.memory = exe.getMemoryReport();
  // On CUDA, the device's own figures next to the counted ones.
  result.cudaMemory = getCudaMemoryMeasurement(exe);
  if (log && result.cudaMemory)
    *log << describeCudaMemoryMeasurement(*result.cudaMemory) << "\n";
  result.arenaBytes = exe.getArenaBytes();
  result.hostArenaBytes = exe.getHostArenaBytes();
  result.unplannedScratchBytes = exe.getUnplannedScratchBytes();
  result.profile = exe.getProfile();
  return result;
}
