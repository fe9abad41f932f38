//===- OptimizerStateMap.cpp - Checkpoint state onto a module's slots -----===//
//
// The layout of a module's checkpoint, the adoption of an ONNX Runtime
// checkpoint's optimizer group into the module's state inputs, and the ONNX
// Runtime checkpoint of a run's final state (OptimizerStateMap.h).
//
//===----------------------------------------------------------------------===//

#include "tools/runtime/OptimizerStateMap.h"

#include "tools/runtime/RuntimeSupport.h"

#include "ir/Optimizer.h"
#include "ir/ZeroSharding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace gmopt;
using namespace gmopt::runtime;

namespace {

/// `'a', 'b', 'c'` (at most \p limit names, then `and N more`).
std::string quotedList(llvm::ArrayRef<std::string> names, size_t limit = 4) {
  std::string text;
  for (size_t i = 0; i != names.size() && i != limit; ++i)
    text += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > limit)
    text += llvm::formatv(" and {0} more", names.size() - limit).str();
  return text;
}

/// `momentum0, momentum1` (the distinct state names of \p group, in order
/// of first appearance) and how many parameters hold state.
std::string describeGroupState(const OptimizerGroup &group) {
  std::vector<std::string> names;
  size_t holders = 0;
  for (const ParameterOptimizerState &state : group.params) {
    holders += !state.momentums.empty();
    for (const NamedTensor &tensor : state.momentums)
      if (!llvm::is_contained(names, tensor.name))
        names.push_back(tensor.name);
  }
  std::string list;
  for (const std::string &name : names)
    list += (list.empty() ? "" : ", ") + name;
  return llvm::formatv("{0} of {1} parameter{2}, step {3}, in group '{4}'",
                       list, holders, holders == 1 ? "" : "s", group.step,
                       group.name)
      .str();
}

/// \p rate as `%g` prints it (0.001, not formatv's 0.00).
std::string formatRate(float rate) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%g", rate);
  return text;
}

/// Appends \p data to \p weights as \p name, refusing a name the file
/// already uses.
llvm::Error addTensor(WeightSet &weights, llvm::StringRef name,
                      std::string source, TensorData data) {
  if (weights.lookup(name))
    return makeError(weights.path + ": holds a tensor named '" + name +
                     "' and optimizer state that the module keeps under "
                     "that name");
  NamedTensor tensor;
  tensor.name = name.str();
  tensor.source = std::move(source);
  tensor.data = std::move(data);
  weights.tensors.push_back(std::move(tensor));
  return llvm::Error::success();
}

/// The tensor of \p slotValue's type holding \p value (the step count and
/// loss scale are f32 or i64).
llvm::Expected<TensorData> scalarFor(const Value *slotValue, double value,
                                     llvm::StringRef what) {
  const TensorType &type = slotValue->getType();
  DType dtype = type.getDType();
  if (!type.hasStaticShape() || (dtype != DType::F32 && dtype != DType::I64))
    return makeError("the module's " + what + " input " + quoted(slotValue) +
                     " is " + type.str() + ", not an f32 or i64 tensor");
  return valueTensor(type, value);
}

} // namespace

bool CheckpointLayout::hasState() const {
  return llvm::any_of(
      params, [](const Parameter &param) { return !param.state.empty(); });
}

std::string gmopt::ortStateName(size_t index) {
  return "momentum" + std::to_string(index);
}

std::string gmopt::lossScalePropertyName(StepSlot slot) {
  return ("gmopt." + stepSlotName(slot)).str();
}

llvm::Expected<CheckpointLayout>
gmopt::getCheckpointLayout(const Module &module) {
  const TrainingSignature &signature = module.getSignature();
  CheckpointLayout layout;
  if (const Node *optimizer = findOptimizerNode(module))
    layout.optimizer = readOptimizerSpec(*optimizer).kind;
  layout.step = signature.getStepSlot(StepSlot::StepCount);
  for (StepSlot slot : {StepSlot::LossScale, StepSlot::LossScaleGoodSteps})
    if (const Value *value = signature.getStepSlot(slot))
      layout.lossScale.emplace_back(slot, value);

  // ZeRO: the moments are flat shards; a checkpoint holds them whole, under
  // the names the record gives each parameter's state.
  llvm::StringSet<> shards;
  llvm::StringMap<std::vector<std::string>> wholeStates;
  if (std::optional<ZeroShardingRecord> zero = readZeroSharding(module)) {
    for (const ZeroBucketRecord &bucket : zero->buckets) {
      for (const std::string &shard : bucket.stateShards)
        shards.insert(shard);
      if (bucket.wholeStates.size() != bucket.stateShards.size())
        return makeError("the ZeRO record does not name the whole optimizer "
                         "state of every bucket");
      for (size_t i = 0, e = bucket.params.size(); i != e; ++i)
        for (const std::vector<std::string> &names : bucket.wholeStates) {
          if (i >= names.size())
            return makeError("the ZeRO record does not name the whole "
                             "optimizer state of every parameter");
          wholeStates[bucket.params[i]].push_back(names[i]);
        }
    }
  }
  for (const ParamInfo &info : signature.getParams()) {
    CheckpointLayout::Parameter param;
    param.name = info.param->getName().str();
    param.trainable = info.trainable;
    auto whole = wholeStates.find(param.name);
    if (whole != wholeStates.end())
      param.state = whole->second;
    else
      for (const Value *state : info.optimizerState)
        if (!shards.contains(state->getName()))
          param.state.push_back(state->getName().str());
    layout.params.push_back(std::move(param));
  }
  return layout;
}

llvm::Expected<OptimizerStateAdoption>
gmopt::adoptOrtOptimizerState(WeightSet &weights, const Module &module,
                              const OptimizerStateOptions &options) {
  OptimizerStateAdoption adoption;
  if (weights.kind != WeightFileKind::OrtCheckpoint)
    return adoption;
  auto layout = getCheckpointLayout(module);
  if (!layout)
    return layout.takeError();
  const std::string &file = weights.path;

  // gmopt's loss scale, if the file carries it.
  for (StepSlot slot : {StepSlot::LossScale, StepSlot::LossScaleGoodSteps}) {
    std::string property = lossScalePropertyName(slot);
    std::optional<float> value = weights.properties.lookupFloat(property);
    if (!value)
      continue;
    auto found = llvm::find_if(layout->lossScale, [&](const auto &entry) {
      return entry.first == slot;
    });
    if (found == layout->lossScale.end()) {
      adoption.notes.push_back(file + ": its property '" + property +
                               "' is not used: the module has no mixed-"
                               "precision loss scaling");
      continue;
    }
    auto data = scalarFor(found->second, *value, stepSlotName(slot));
    if (!data)
      return withFile(file, data.takeError());
    if (llvm::Error err =
            addTensor(weights, found->second->getName(),
                      file + ": property '" + property + "'", *data))
      return err;
  }

  if (weights.optimizerGroups.empty())
    return adoption;
  if (weights.optimizerGroups.size() > 1) {
    std::vector<std::string> names;
    for (const OptimizerGroup &group : weights.optimizerGroups)
      names.push_back(group.name);
    return makeError(file +
                     llvm::formatv(": holds {0} optimizer groups ({1}); the "
                                   "module's optimizer updates every "
                                   "parameter as one group",
                                   names.size(), quotedList(names))
                         .str());
  }
  const OptimizerGroup &group = weights.optimizerGroups.front();
  bool hasMoments = llvm::any_of(
      group.params, [](const auto &state) { return !state.momentums.empty(); });
  std::string optimizerName =
      layout->optimizer
          ? (*layout->optimizer == OptimizerKind::AdamW ? "AdamW" : "SGD")
          : "none";

  if (options.ignore) {
    if (hasMoments || group.step)
      adoption.notes.push_back(
          file + ": --ignore-optimizer-state: its optimizer state (" +
          describeGroupState(group) + ") is not loaded; the " + optimizerName +
          " optimizer starts afresh");
    return adoption;
  }
  if (!layout->hasState()) {
    // Nowhere to put moments: harmless when nothing is updated or they are
    // all zero (ONNX Runtime's SGD keeps a zero momentum0 it never reads), a
    // different training run otherwise.
    if (!hasMoments)
      return adoption;
    bool allZero = llvm::all_of(group.params, [](const auto &state) {
      return llvm::all_of(state.momentums, [](const NamedTensor &tensor) {
        return llvm::all_of(tensor.data.getBytes(),
                            [](uint8_t byte) { return byte == 0; });
      });
    });
    if (!layout->optimizer || !options.updates || allZero) {
      std::string why = !layout->optimizer ? "the module has no optimizer"
                        : !options.updates
                            ? "the run updates no parameters"
                            : "it is all zeros, and the module's " +
                                  optimizerName + " optimizer keeps none";
      adoption.notes.push_back(file + ": its optimizer state (" +
                               describeGroupState(group) +
                               ") is not used: " + why);
      return adoption;
    }
    return makeError(
        file + ": holds optimizer state (" + describeGroupState(group) +
        "), but the module's " + optimizerName +
        " optimizer keeps none: resuming would drop it and train differently "
        "from the run that saved it (compile or run with that run's "
        "optimizer, --optimizer-model its optimizer_model.onnx or "
        "--optimizer=adamw, or pass --ignore-optimizer-state to start the "
        "optimizer afresh)");
  }

  // The module keeps state: each trainable parameter's comes from the
  // group, by ONNX Runtime's names. A group without any per-parameter state
  // starts the moments at zero (ONNX Runtime does the same) but keeps its
  // step.
  llvm::StringSet<> placed;
  std::vector<std::string> missing;
  for (const CheckpointLayout::Parameter &param : layout->params) {
    if (param.state.empty())
      continue;
    placed.insert(param.name);
    const ParameterOptimizerState *state = group.lookup(param.name);
    if (!state || state->momentums.empty()) {
      if (!group.params.empty())
        missing.push_back(param.name);
      continue;
    }
    std::string wanted;
    for (size_t k = 0; k != param.state.size(); ++k)
      wanted += (k ? ", " : "") + ortStateName(k);
    for (const NamedTensor &tensor : state->momentums) {
      bool known = false;
      for (size_t k = 0; k != param.state.size() && !known; ++k)
        known = tensor.name == ortStateName(k);
      if (!known)
        return makeError(tensor.source + ": the module's " + optimizerName +
                         " optimizer keeps " + wanted +
                         " per parameter, not '" + tensor.name + "'");
    }
    for (size_t k = 0; k != param.state.size(); ++k) {
      const NamedTensor *tensor = state->lookup(ortStateName(k));
      if (!tensor)
        return makeError(file + ": the optimizer state of '" + param.name +
                         "' in group '" + group.name + "' has no '" +
                         ortStateName(k) + "' (the module's " + optimizerName +
                         " optimizer keeps " + wanted + ")");
      if (llvm::Error err =
              addTensor(weights, param.state[k], tensor->source, tensor->data))
        return err;
    }
  }
  if (!missing.empty() && !options.allowMissing)
    return makeError(
        file + llvm::formatv(
                   ": group '{0}' holds no optimizer state for trainable "
                   "parameter{1} {2} (pass --allow-missing-weights to start "
                   "{3} moments at zero)",
                   group.name, missing.size() == 1 ? "" : "s",
                   quotedList(missing), missing.size() == 1 ? "its" : "their")
                   .str());
  if (group.step < 0)
    return makeError(file + llvm::formatv(": group '{0}' has step {1}; a step "
                                          "count is never negative",
                                          group.name, group.step)
                                .str());
  if (layout->step) {
    auto data =
        scalarFor(layout->step, static_cast<double>(group.step), "step count");
    if (!data)
      return withFile(file, data.takeError());
    if (llvm::Error err =
            addTensor(weights, layout->step->getName(),
                      file + ": the step of group '" + group.name + "'", *data))
      return err;
  }
  adoption.group = &group;

  std::string note =
      llvm::formatv("{0}: resuming ONNX Runtime's optimizer state: {1}; the "
                    "next update is step {2}",
                    file, describeGroupState(group), group.step + 1)
          .str();
  if (!missing.empty())
    note += llvm::formatv("; zero moments for {0} (--allow-missing-weights)",
                          quotedList(missing))
                .str();
  if (group.initialLearningRate != options.learningRate)
    note += "; the run's learning rate " + formatRate(options.learningRate) +
            ", not the group's initial_learning_rate " +
            formatRate(group.initialLearningRate) +
            " (a scheduler's base, which ONNX Runtime does not resume from "
            "either)";
  adoption.notes.push_back(std::move(note));

  std::vector<std::string> unused;
  for (const ParameterOptimizerState &state : group.params)
    if (!state.momentums.empty() && !placed.contains(state.param))
      unused.push_back(state.param);
  if (!unused.empty())
    adoption.notes.push_back(
        file +
        llvm::formatv(": the optimizer state of {0} parameter{1} the module "
                      "does not train is not used: {2}",
                      unused.size(), unused.size() == 1 ? "" : "s",
                      quotedList(unused))
            .str());
  return adoption;
}

llvm::Expected<OrtCheckpoint>
gmopt::makeOrtCheckpoint(const Module &module,
                         llvm::ArrayRef<NamedTensor> finalState,
                         const OptimizerGroup *resumed,
                         const PropertyBag *properties, float learningRate) {
  auto layout = getCheckpointLayout(module);
  if (!layout)
    return layout.takeError();
  llvm::StringMap<const NamedTensor *> byName;
  for (const NamedTensor &tensor : finalState)
    byName.try_emplace(tensor.name, &tensor);
  auto find = [&](llvm::StringRef name) -> llvm::Expected<const NamedTensor *> {
    const NamedTensor *tensor = byName.lookup(name);
    if (!tensor)
      return makeError("the run's final state has no tensor '" + name + "'");
    return tensor;
  };
  auto named = [](llvm::StringRef name, const TensorData &data) {
    NamedTensor tensor;
    tensor.name = name.str();
    tensor.data = data;
    return tensor;
  };

  OrtCheckpoint checkpoint;
  for (const CheckpointLayout::Parameter &param : layout->params) {
    auto tensor = find(param.name);
    if (!tensor)
      return tensor.takeError();
    (param.trainable ? checkpoint.trainable : checkpoint.frozen)
        .push_back(named(param.name, (*tensor)->data));
  }
  if (layout->hasState()) {
    OptimizerGroup group;
    group.name = resumed ? resumed->name : "group0";
    group.initialLearningRate =
        resumed ? resumed->initialLearningRate : learningRate;
    if (layout->step) {
      auto step = find(layout->step->getName());
      if (!step)
        return step.takeError();
      group.step = static_cast<int64_t>((*step)->data.getFloatElement(0));
    }
    for (const CheckpointLayout::Parameter &param : layout->params) {
      if (param.state.empty())
        continue;
      ParameterOptimizerState state;
      state.param = param.name;
      for (size_t k = 0; k != param.state.size(); ++k) {
        auto tensor = find(param.state[k]);
        if (!tensor)
          return tensor.takeError();
        state.momentums.push_back(named(ortStateName(k), (*tensor)->data));
      }
      group.params.push_back(std::move(state));
    }
    checkpoint.optimizerGroups.push_back(std::move(group));
  }
  if (properties)
    checkpoint.properties = *properties;
  for (const auto &[slot, value] : layout->lossScale) {
    auto tensor = find(value->getName());
    if (!tensor)
      return tensor.takeError();
    std::string name = lossScalePropertyName(slot);
    float scale = static_cast<float>((*tensor)->data.getFloatElement(0));
    auto &floats = checkpoint.properties.floats;
    auto existing = llvm::find_if(
        floats, [&](const auto &entry) { return entry.first == name; });
    if (existing != floats.end())
      existing->second = scale;
    else
      floats.emplace_back(name, scale);
  }
  return checkpoint;
}
