//===- RuntimeReference.cpp - Checks against a reference ------------------===//
//
// Compares what a training run produced with a reference (ONNX Runtime's,
// from testdata): tensors within a tolerance, the loss curve, the final
// parameters after an AdamW or SGD run, and the gradient agreement of two
// runs.
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
#include "ir/ops/ShapeValue.h"
#include "ir/serialization/FileIO.h"
#include "ir/serialization/GmFile.h"
#include "ir/serialization/Onnx.h"
#include "ir/serialization/OnnxTensor.h"
#include "passes/PassManager.h"
#include "tools/driver/PassManagerCLOptions.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
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
// Comparisons
//===----------------------------------------------------------------------===//

TensorComparison gmopt::compareTensors(llvm::StringRef name,
                                       const TensorData &got,
                                       const TensorData &reference,
                                       const Tolerance &tolerance) {
  TensorComparison comparison;
  comparison.name = name.str();
  const TensorType &gotType = got.getType(), &refType = reference.getType();
  if (!isFloatingPoint(gotType.getDType()) ||
      !isFloatingPoint(refType.getDType()) || !gotType.hasStaticShape() ||
      !refType.hasStaticShape() ||
      gotType.getStaticShape() != refType.getStaticShape()) {
    comparison.problem =
        "got " + gotType.str() + " but the reference is " + refType.str();
    comparison.maxAbsError = comparison.maxRelError =
        std::numeric_limits<double>::infinity();
    return comparison;
  }
  uint64_t n = got.getNumElements();
  bool finite = true;
  for (uint64_t i = 0; i != n; ++i) {
    double g = got.getFloatElement(i), r = reference.getFloatElement(i);
    if (!std::isfinite(g) || !std::isfinite(r)) {
      finite = false;
      continue;
    }
    comparison.maxAbsError = std::max(comparison.maxAbsError, std::abs(g - r));
    comparison.referenceMagnitude =
        std::max(comparison.referenceMagnitude, std::abs(r));
  }
  if (comparison.referenceMagnitude > 0)
    comparison.maxRelError =
        comparison.maxAbsError / comparison.referenceMagnitude;
  else
    comparison.maxRelError = comparison.maxAbsError > 0
                                 ? std::numeric_limits<double>::infinity()
                                 : 0;
  if (!finite) {
    comparison.problem = "non-finite values";
    comparison.maxAbsError = comparison.maxRelError =
        std::numeric_limits<double>::quiet_NaN();
    return comparison;
  }
  comparison.ok =
      comparison.maxAbsError <=
      std::max(tolerance.rtol * comparison.referenceMagnitude, tolerance.atol);
  return comparison;
}

llvm::Expected<std::vector<TensorComparison>>
gmopt::compareWithReference(const TrainingResult &result,
                            const TestDataSet &expected,
                            const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  const NamedTensor *lossReference = expected.findOutput(result.lossName);
  if (!lossReference)
    lossReference = expected.findOutputByIndex(0);
  if (!lossReference)
    return makeError(expected.directory +
                     ": no reference loss (expected an "
                     "output named '" +
                     result.lossName + "' or output_0.pb)");
  comparisons.push_back(
      compareTensors("loss", result.firstLoss, lossReference->data, tolerance));
  for (const auto &[param, gradient] : result.firstGradients) {
    std::string name = param + "_grad";
    const NamedTensor *reference = expected.findOutput(name);
    if (!reference)
      return makeError(expected.directory +
                       ": no reference for the gradient of '" + param +
                       "' (expected an output named '" + name + "')");
    comparisons.push_back(
        compareTensors(name, gradient, reference->data, tolerance));
  }
  return comparisons;
}

namespace {

/// Reads the AdamW `hyperparameters` object of a loss-reference file.
llvm::Error readAdamWHyperparameters(llvm::StringRef path,
                                     const llvm::json::Object *object,
                                     OptimizerSpec &spec) {
  if (!object)
    return makeError(path + ": an AdamW reference needs \"hyperparameters\"");
  auto number = [&](llvm::StringRef key) -> llvm::Expected<double> {
    std::optional<double> value = object->getNumber(key);
    if (!value)
      return makeError(path + ": missing or invalid hyperparameters." + key);
    return *value;
  };
  struct FloatField {
    const char *key;
    float *field;
  } floats[] = {{"alpha", &spec.alpha},
                {"beta", &spec.beta},
                {"epsilon", &spec.epsilon},
                {"weight_decay", &spec.weightDecay}};
  for (const FloatField &f : floats) {
    auto value = number(f.key);
    if (!value)
      return value.takeError();
    *f.field = static_cast<float>(*value);
  }
  struct IntField {
    const char *key;
    int64_t *field;
  } ints[] = {{"correct_bias", &spec.correctBias},
              {"adam_mode", &spec.adamMode}};
  for (const IntField &f : ints) {
    auto value = number(f.key);
    if (!value)
      return value.takeError();
    *f.field = static_cast<int64_t>(*value);
  }
  if (llvm::Error err = spec.validate())
    return makeError(path + ": " + llvm::toString(std::move(err)));
  return llvm::Error::success();
}

/// Reads `final_parameters` (directory relative to \p path).
llvm::Error readFinalParameters(llvm::StringRef path,
                                const llvm::json::Object &object,
                                LossReference &reference) {
  std::optional<llvm::StringRef> directory = object.getString("directory");
  const llvm::json::Array *params = object.getArray("params");
  if (!directory || !params)
    return makeError(path + ": final_parameters needs \"directory\" and "
                            "\"params\"");
  llvm::SmallString<256> base = llvm::sys::path::parent_path(path);
  llvm::sys::path::append(base, *directory);
  for (const llvm::json::Value &entry : *params) {
    const llvm::json::Object *param = entry.getAsObject();
    std::optional<llvm::StringRef> name =
        param ? param->getString("name") : std::nullopt;
    std::optional<llvm::StringRef> file =
        param ? param->getString("file") : std::nullopt;
    const llvm::json::Array *shape = param ? param->getArray("shape") : nullptr;
    std::optional<int64_t> stride =
        param ? param->getInteger("stride") : std::nullopt;
    if (!name || !file || !shape || !stride || *stride < 1)
      return makeError(path + ": every final_parameters.params entry needs "
                              "name, file, shape and a stride >= 1");
    LossReference::FinalParameter final;
    final.name = name->str();
    final.stride = *stride;
    for (const llvm::json::Value &dim : *shape) {
      std::optional<int64_t> extent = dim.getAsInteger();
      if (!extent || *extent < 0)
        return makeError(path + ": invalid shape of final parameter " +
                         final.name);
      final.shape.push_back(*extent);
    }
    llvm::SmallString<256> tensorPath = base;
    llvm::sys::path::append(tensorPath, *file);
    auto tensor = readTensorFile(tensorPath);
    if (!tensor)
      return tensor.takeError();
    final.values = std::move(tensor->data);
    reference.finalParameters.push_back(std::move(final));
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<LossReference> gmopt::readLossReference(llvm::StringRef path) {
  auto buffer = readInputFile(path);
  if (!buffer)
    return buffer.takeError();
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return makeError(path +
                     ": invalid JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return makeError(path + ": expected a JSON object");
  LossReference reference;
  std::optional<double> rate = object->getNumber("learning_rate");
  if (!rate || !(*rate > 0))
    return makeError(path + ": missing or invalid \"learning_rate\"");
  reference.learningRate = *rate;
  const llvm::json::Array *losses = object->getArray("losses");
  if (!losses || losses->empty())
    return makeError(path + ": missing or empty \"losses\" array");
  for (const llvm::json::Value &loss : *losses) {
    std::optional<double> value = loss.getAsNumber();
    if (!value)
      return makeError(path + ": \"losses\" must hold numbers");
    reference.losses.push_back(*value);
  }
  // sgd_losses.json predates the key: no optimizer means plain SGD.
  std::optional<llvm::StringRef> optimizer = object->getString("optimizer");
  if (!optimizer || optimizer->equals_insensitive("sgd")) {
    reference.optimizer.kind = OptimizerKind::SGD;
  } else if (optimizer->equals_insensitive("adamw")) {
    reference.optimizer.kind = OptimizerKind::AdamW;
    if (llvm::Error err = readAdamWHyperparameters(
            path, object->getObject("hyperparameters"), reference.optimizer))
      return err;
  } else {
    return makeError(path + ": unknown optimizer '" + *optimizer +
                     "' (expected AdamW or SGD)");
  }
  if (const llvm::json::Object *final = object->getObject("final_parameters"))
    if (llvm::Error err = readFinalParameters(path, *final, reference))
      return err;
  return reference;
}

llvm::Expected<std::vector<TensorComparison>>
gmopt::compareFinalParameters(const TrainingResult &result,
                              const LossReference &reference,
                              const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  for (const LossReference::FinalParameter &param : reference.finalParameters) {
    const NamedTensor *got = nullptr;
    for (const NamedTensor &tensor : result.finalState)
      if (tensor.name == param.name)
        got = &tensor;
    if (!got)
      return makeError("the reference's final parameter '" + param.name +
                       "' is not a parameter of the module");
    llvm::SmallVector<int64_t, 4> shape = got->data.getType().getStaticShape();
    if (llvm::ArrayRef<int64_t>(shape) != llvm::ArrayRef<int64_t>(param.shape))
      return makeError("final parameter '" + param.name + "' has shape " +
                       got->data.getType().str() + ", not the reference's");
    uint64_t count = param.values.getType().getNumElements();
    uint64_t total = got->data.getType().getNumElements();
    std::vector<float> sampled;
    for (uint64_t k = 0; k != count; ++k) {
      uint64_t index = k * static_cast<uint64_t>(param.stride);
      if (index >= total)
        return makeError("final parameter '" + param.name +
                         "': the reference holds more elements than the "
                         "stride allows");
      sampled.push_back(static_cast<float>(got->data.getFloatElement(index)));
    }
    TensorData gotSample = TensorData::fromValues<float>(
        DType::F32, {static_cast<int64_t>(count)}, sampled);
    TensorData refSample = TensorData::fromValues<float>(
        DType::F32, {static_cast<int64_t>(count)}, [&] {
          std::vector<float> values;
          for (uint64_t k = 0; k != count; ++k)
            values.push_back(
                static_cast<float>(param.values.getFloatElement(k)));
          return values;
        }());
    comparisons.push_back(
        compareTensors("final " + param.name, gotSample, refSample, tolerance));
  }
  return comparisons;
}

std::vector<TensorComparison>
gmopt::compareLossCurve(llvm::ArrayRef<double> losses,
                        const LossReference &reference,
                        const Tolerance &tolerance) {
  std::vector<TensorComparison> comparisons;
  size_t n = std::min(losses.size(), reference.losses.size());
  for (size_t k = 0; k != n; ++k) {
    float got = static_cast<float>(losses[k]);
    float expected = static_cast<float>(reference.losses[k]);
    comparisons.push_back(compareTensors(
        llvm::formatv("loss[{0}]", k).str(),
        TensorData::fromValues<float>(DType::F32, {}, {got}),
        TensorData::fromValues<float>(DType::F32, {}, {expected}), tolerance));
  }
  return comparisons;
}

double gmopt::maxGradientRelativeDifference(const TrainingResult &a,
                                            const TrainingResult &b) {
  double worst = 0;
  for (const auto &[name, gradient] : a.firstGradients) {
    for (const auto &[otherName, other] : b.firstGradients) {
      if (name != otherName)
        continue;
      TensorComparison comparison =
          compareTensors(name, gradient, other, Tolerance());
      double difference = comparison.maxRelError;
      if (std::isnan(difference))
        difference = std::numeric_limits<double>::infinity();
      worst = std::max(worst, difference);
    }
  }
  return worst;
}
