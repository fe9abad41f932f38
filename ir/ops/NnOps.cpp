//===- NnOps.cpp - ai.onnx neural-network operator schemas ----------------===//
//
// Convolution and pooling (output sizes from the window parameters),
// BatchNormalization in its opset-9 and opset-14/15 forms (training-mode
// outputs), LayerNormalization (opset 17) and RMSNormalization (opset 23;
// their axis split is ir/ops/NormRows.h's), Softmax/LogSoftmax (axis default
// 1 before opset 13, -1 since), Dropout (random, opset 12/13) and the losses
// (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss). Norms, softmax and
// losses run in fp32 under mixed precision; convolution is the canonical
// AmpClass::Allow op.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/LossReduction.h"
#include "ir/ops/NormRows.h"
#include "ir/ops/OpDefs.h"

#include "llvm/Support/FormatVariadic.h"

using namespace gmopt;
using namespace gmopt::ops;

namespace {

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

llvm::Error inferConv(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  const TensorType &x = ctx.getInputType(0), &w = ctx.getInputType(1);
  int64_t group = ctx.getIntAttr("group", 1);
  if (group < 1)
    return ctx.error(llvm::formatv("group must be >= 1, got {0}", group));
  if (x.hasRank() && x.getRank() < 3)
    return ctx.error("input must have rank >= 3 (N, C, spatial...), got " +
                     x.str());
  if (x.hasRank() && w.hasRank() && w.getRank() != x.getRank())
    return ctx.error("weights " + w.str() + " and input " + x.str() +
                     " must have the same rank");
  Dim outChannels = w.hasRank() ? w.getDim(0) : Dim::unknown();
  if (ctx.hasInput(2)) {
    const TensorType &b = ctx.getInputType(2);
    if (b.hasRank()) {
      if (b.getRank() != 1)
        return ctx.error("bias must have rank 1, got " + b.str());
      std::optional<Dim> merged = unifyDims(outChannels, b.getDim(0));
      if (!merged)
        return ctx.error("bias " + b.str() + " does not match the " +
                         shapeString(outChannels) + " output channels");
      outChannels = *merged;
    }
  }
  if (!x.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(*dtype));
    return llvm::Error::success();
  }
  unsigned numSpatial = x.getRank() - 2;
  if (w.hasRank()) {
    const Dim &inChannels = x.getDim(1), &perGroup = w.getDim(1);
    std::optional<int64_t> expected =
        perGroup.isStatic() ? checkedMul(perGroup.getExtent(), group)
                            : std::nullopt;
    if (inChannels.isStatic() && perGroup.isStatic() &&
        (!expected || inChannels.getExtent() != *expected))
      return ctx.error(llvm::formatv(
          "input has {0} channels but weights {1} with group {2} expect {3}",
          inChannels.getExtent(), w.str(), group,
          expected ? std::to_string(*expected) : std::string("more")));
    if (outChannels.isStatic() && outChannels.getExtent() % group != 0)
      return ctx.error(llvm::formatv("{0} output channels are not divisible "
                                     "by group {1}",
                                     outChannels.getExtent(), group));
  }
  llvm::ArrayRef<Dim> weightSpatial =
      w.hasRank() ? w.getDims().drop_front(2) : llvm::ArrayRef<Dim>();
  std::vector<int64_t> kernelAttr = ctx.getIntsAttr("kernel_shape");
  if (!kernelAttr.empty() && kernelAttr.size() == weightSpatial.size())
    for (unsigned i = 0; i != numSpatial; ++i)
      if (weightSpatial[i].isStatic() &&
          weightSpatial[i].getExtent() != kernelAttr[i])
        return ctx.error("kernel_shape does not match the weights " + w.str());
  DimVector out = {x.getDim(0), outChannels};
  bool kernelKnown =
      !kernelAttr.empty() ||
      (weightSpatial.size() == numSpatial &&
       llvm::all_of(weightSpatial, [](const Dim &d) { return d.isStatic(); }));
  if (!kernelKnown) {
    out.append(numSpatial, Dim::unknown());
    setOutput(ctx, 0, TensorType(*dtype, out));
    return llvm::Error::success();
  }
  auto params = readWindowParams(ctx, numSpatial, weightSpatial);
  if (!params)
    return params.takeError();
  auto spatial = windowOutputDims(ctx, x.getDims().drop_front(2), *params);
  if (!spatial)
    return spatial.takeError();
  out.append(spatial->begin(), spatial->end());
  setOutput(ctx, 0, TensorType(*dtype, out));
  return llvm::Error::success();
}

OpCost convCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  if (node.getResult(0))
    cost.flops =
        convFlops(node.getResult(0)->getType(), node.getOperand(1)->getType());
  return cost;
}

/// MaxPool/AveragePool; \p withIndices adds MaxPool's Indices output.
InferenceFn inferPool(bool withIndices) {
  return [withIndices](InferenceContext &ctx) -> llvm::Error {
    const TensorType &x = ctx.getInputType(0);
    DType dtype = x.getDType();
    if (!x.hasRank()) {
      setOutput(ctx, 0, TensorType::unranked(dtype));
      if (withIndices)
        setOutput(ctx, 1, TensorType::unranked(DType::I64));
      return llvm::Error::success();
    }
    if (x.getRank() < 3)
      return ctx.error("input must have rank >= 3 (N, C, spatial...), got " +
                       x.str());
    auto params = readWindowParams(ctx, x.getRank() - 2);
    if (!params)
      return params.takeError();
    auto spatial = windowOutputDims(ctx, x.getDims().drop_front(2), *params);
    if (!spatial)
      return spatial.takeError();
    DimVector out = {x.getDim(0), x.getDim(1)};
    out.append(spatial->begin(), spatial->end());
    setOutput(ctx, 0, TensorType(dtype, out));
    if (withIndices)
      setOutput(ctx, 1, TensorType(DType::I64, out));
    return llvm::Error::success();
  };
}

/// One flop per window element per output element.
OpCost poolCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  uint64_t window = 1;
  for (int64_t k : node.getIntsAttr("kernel_shape", {}))
    window *= static_cast<uint64_t>(std::max<int64_t>(k, 1));
  if (node.getResult(0))
    cost.flops = window * staticElements(node.getResult(0)->getType());
  return cost;
}

llvm::Error inferGlobalPool(InferenceContext &ctx) {
  const TensorType &x = ctx.getInputType(0);
  if (!x.hasRank()) {
    setOutput(ctx, 0, TensorType::unranked(x.getDType()));
    return llvm::Error::success();
  }
  if (x.getRank() < 3)
    return ctx.error("input must have rank >= 3 (N, C, spatial...), got " +
                     x.str());
  DimVector out = {x.getDim(0), x.getDim(1)};
  out.append(x.getRank() - 2, Dim::fixed(1));
  setOutput(ctx, 0, TensorType(x.getDType(), out));
  return llvm::Error::success();
}

void registerConvAndPool(OpRegistry &registry) {
  SchemaBuilder(kOnnxDomain, "Conv", 1)
      .inputs(2, 3)
      .outputs(1)
      .attrString("auto_pad", "NOTSET")
      .optionalAttr("dilations", Attribute::Kind::Ints)
      .attrInt("group", 1)
      .optionalAttr("kernel_shape", Attribute::Kind::Ints)
      .optionalAttr("pads", Attribute::Kind::Ints)
      .optionalAttr("strides", Attribute::Kind::Ints)
      .amp(AmpClass::Allow)
      .infer(inferConv)
      .cost(convCost)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "MaxPool", 8)
      .inputs(1)
      .outputs(1, 2)
      .attrString("auto_pad", "NOTSET")
      .attrInt("ceil_mode", 0)
      .optionalAttr("dilations", Attribute::Kind::Ints)
      .requiredAttr("kernel_shape", Attribute::Kind::Ints)
      .optionalAttr("pads", Attribute::Kind::Ints)
      .attrInt("storage_order", 0)
      .optionalAttr("strides", Attribute::Kind::Ints)
      .amp(AmpClass::Follow)
      .infer(inferPool(true))
      .cost(poolCost)
      .add(registry);

  SchemaBuilder averagePool(kOnnxDomain, "AveragePool", 7);
  averagePool.inputs(1)
      .outputs(1)
      .attrString("auto_pad", "NOTSET")
      .attrInt("ceil_mode", 0)
      .attrInt("count_include_pad", 0)
      .requiredAttr("kernel_shape", Attribute::Kind::Ints)
      .optionalAttr("pads", Attribute::Kind::Ints)
      .optionalAttr("strides", Attribute::Kind::Ints)
      .amp(AmpClass::Follow)
      .infer(inferPool(false))
      .cost(poolCost);
  averagePool.add(registry);
  averagePool.optionalAttr("dilations", Attribute::Kind::Ints)
      .addAt(registry, 19);

  for (const char *name : {"GlobalAveragePool", "GlobalMaxPool"})
    SchemaBuilder(kOnnxDomain, name, 1)
        .inputs(1)
        .outputs(1)
        .amp(AmpClass::Follow)
        .infer(inferGlobalPool)
        .cost(costPerInputElement(1))
        .add(registry);
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Unifies the channel count of X (dim 1, or 1 for rank-1 X) with dim 0 of
/// each per-channel input in \p perChannel.
llvm::Expected<Dim> unifyChannels(const InferenceContext &ctx,
                                  llvm::ArrayRef<unsigned> perChannel) {
  const TensorType &x = ctx.getInputType(0);
  Dim channels = Dim::unknown();
  if (x.hasRank())
    channels = x.getRank() > 1 ? x.getDim(1) : Dim::fixed(1);
  for (unsigned i : perChannel) {
    if (!ctx.hasInput(i))
      continue;
    const TensorType &type = ctx.getInputType(i);
    if (!type.hasRank())
      continue;
    if (type.getRank() != 1)
      return ctx.error(
          llvm::formatv("input {0} must have rank 1, got {1}", i, type.str()));
    std::optional<Dim> merged = unifyDims(channels, type.getDim(0));
    if (!merged)
      return ctx.error(llvm::formatv("input {0} {1} does not match the {2} "
                                     "channels of X",
                                     i, type.str(), shapeString(channels)));
    channels = *merged;
  }
  return channels;
}

/// BatchNormalization-9 (up to 5 outputs) and -14/15 (up to 3).
llvm::Error inferBatchNorm(InferenceContext &ctx) {
  auto channels = unifyChannels(ctx, {1, 2, 3, 4});
  if (!channels)
    return channels.takeError();
  setOutput(ctx, 0, ctx.getInputType(0));
  DType statsType = inputDType(ctx, 3);
  for (unsigned i = 1; i < ctx.getNumOutputs(); ++i)
    setOutput(ctx, i, TensorType(statsType, {*channels}));
  return llvm::Error::success();
}

llvm::Error inferLayerNorm(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  const TensorType &x = ctx.getInputType(0);
  std::optional<DType> statsType =
      dtypeFromOnnx(ctx.getIntAttr("stash_type", 1));
  if (!statsType || !isFloatingPoint(*statsType))
    return ctx.error("stash_type must be a floating-point element type");
  setOutput(ctx, 0, x);
  if (!x.hasRank()) {
    setOutput(ctx, 1, TensorType::unranked(*statsType));
    setOutput(ctx, 2, TensorType::unranked(*statsType));
    return llvm::Error::success();
  }
  auto axis = norm::getNormAxis(ctx.getNode(), x.getRank());
  if (!axis)
    return ctx.error(llvm::toString(axis.takeError()));
  llvm::ArrayRef<Dim> normalized = x.getDims().drop_front(*axis);
  for (unsigned i : {1u, 2u}) {
    if (!ctx.hasInput(i) || !ctx.getInputType(i).hasRank())
      continue;
    // Unidirectional: the parameter broadcasts to the normalized shape,
    // which it must not widen ([3,1] against [1,4] is an error).
    const TensorType &param = ctx.getInputType(i);
    std::optional<DimVector> merged =
        broadcastShapes(normalized, param.getDims());
    bool fits = merged && param.getRank() <= normalized.size();
    for (unsigned d = 0; fits && d != normalized.size(); ++d)
      fits = unifyDims((*merged)[d], normalized[d]).has_value();
    if (!fits)
      return ctx.error(llvm::formatv("input {0} {1} does not broadcast to "
                                     "the normalized shape {2}",
                                     i, param.str(), shapeString(normalized)));
  }
  DimVector stats(x.getDims().begin(), x.getDims().begin() + *axis);
  stats.append(x.getRank() - *axis, Dim::fixed(1));
  setOutput(ctx, 1, TensorType(*statsType, stats));
  setOutput(ctx, 2, TensorType(*statsType, stats));
  return llvm::Error::success();
}

void registerNormalization(OpRegistry &registry) {
  SchemaBuilder batchNorm9(kOnnxDomain, "BatchNormalization", 9);
  batchNorm9.inputs(5)
      .outputs(1, 5)
      .attrFloat("epsilon", 1e-5f)
      .attrFloat("momentum", 0.9f)
      .amp(AmpClass::Deny)
      .infer(inferBatchNorm)
      .cost(costPerInputElement(4));
  batchNorm9.add(registry);
  SchemaBuilder batchNorm14(kOnnxDomain, "BatchNormalization", 14);
  batchNorm14.inputs(5)
      .outputs(1, 3)
      .attrFloat("epsilon", 1e-5f)
      .attrFloat("momentum", 0.9f)
      .attrInt("training_mode", 0)
      .amp(AmpClass::Deny)
      .infer(inferBatchNorm)
      .cost(costPerInputElement(4));
  batchNorm14.add(registry);
  // Opset 15 only widened the statistics' type constraint.
  batchNorm14.addAt(registry, 15);

  // ONNX made LayerNormalization standard in opset 17; ONNX Runtime has
  // registered the same op (same inputs, outputs and attributes) in the
  // default domain since version 1, and its LayerNormFusion writes it into
  // graphs of any opset (an opset-14 export's decomposed LayerNorm becomes
  // one). Both are the same schema here.
  SchemaBuilder layerNorm(kOnnxDomain, "LayerNormalization", 17);
  layerNorm.inputs(2, 3)
      .outputs(1, 3)
      .attrInt("axis", -1)
      .attrFloat("epsilon", 1e-5f)
      .attrInt("stash_type", 1)
      .amp(AmpClass::Fp32Compute)
      .infer(inferLayerNorm)
      .cost(costPerInputElement(8));
  layerNorm.add(registry);
  layerNorm.addAt(registry, 1);

  // RMS norm, standard since opset 23: LayerNormalization without the mean
  // and the bias, and without statistics outputs. ONNX lets X (T) and
  // scale/Y (V) differ in type; gmopt's kernels take one type for all three.
  SchemaBuilder(kOnnxDomain, "RMSNormalization", 23)
      .inputs(2)
      .outputs(1)
      .attrInt("axis", -1)
      .attrFloat("epsilon", 1e-5f)
      .attrInt("stash_type", 1)
      .amp(AmpClass::Fp32Compute)
      .infer(inferLayerNorm)
      .cost(costPerInputElement(6))
      .add(registry);

  SchemaBuilder(kOnnxDomain, "InstanceNormalization", 6)
      .inputs(3)
      .outputs(1)
      .attrFloat("epsilon", 1e-5f)
      .amp(AmpClass::Deny)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        auto channels = unifyChannels(ctx, {1, 2});
        if (!channels)
          return channels.takeError();
        setOutput(ctx, 0, ctx.getInputType(0));
        return llvm::Error::success();
      })
      .cost(costPerInputElement(8))
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Softmax, Dropout, losses
//===----------------------------------------------------------------------===//

llvm::Error inferSoftmax(InferenceContext &ctx) {
  const TensorType &x = ctx.getInputType(0);
  if (auto err = checkSoftmaxAxis(ctx, x))
    return err;
  setOutput(ctx, 0, x);
  return llvm::Error::success();
}

llvm::Error inferDropout(InferenceContext &ctx) {
  static const DType boolOnly[] = {DType::Bool};
  if (auto err = checkDTypeIn(ctx, 1, floatDTypes(), "ratio"))
    return err;
  if (auto err = checkDTypeIn(ctx, 2, boolOnly, "training_mode"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  setOutput(ctx, 0, data);
  TensorType mask = data;
  mask.setDType(DType::Bool);
  setOutput(ctx, 1, std::move(mask));
  return llvm::Error::success();
}

/// Shared checks of the classification losses: scores/input [N, C, d...]
/// against labels/target [N, d...] and per-class weights [C]. Sets result 0
/// (loss: labels' shape for reduction "none", else a scalar) with \p dtype.
} // namespace

llvm::Error ops::inferClassificationLoss(InferenceContext &ctx, DType dtype) {
  if (auto err = checkDTypeIn(ctx, 1, indexDTypes(), "labels"))
    return err;
  auto reduction = getLossReduction(ctx.getNode());
  if (!reduction)
    return ctx.error(llvm::toString(reduction.takeError()));
  const TensorType &scores = ctx.getInputType(0);
  const TensorType &labels = ctx.getInputType(1);
  if (scores.hasRank() && scores.getRank() < 2)
    return ctx.error("scores must have rank >= 2 (N, C, ...), got " +
                     scores.str());
  DimVector lossDims;
  bool lossRanked = labels.hasRank();
  if (labels.hasRank())
    lossDims.assign(labels.getDims().begin(), labels.getDims().end());
  if (scores.hasRank() && labels.hasRank()) {
    if (labels.getRank() + 1 != scores.getRank())
      return ctx.error("labels " + labels.str() +
                       " must have the shape of "
                       "scores " +
                       scores.str() + " without the class axis");
    for (unsigned i = 0, e = labels.getRank(); i != e; ++i) {
      const Dim &scoreDim = scores.getDim(i == 0 ? 0 : i + 1);
      std::optional<Dim> merged = unifyDims(labels.getDim(i), scoreDim);
      if (!merged)
        return ctx.error("labels " + labels.str() + " do not match scores " +
                         scores.str());
      lossDims[i] = *merged;
    }
  } else if (scores.hasRank()) {
    lossRanked = true;
    lossDims.push_back(scores.getDim(0));
    lossDims.append(scores.getDims().begin() + 2, scores.getDims().end());
  }
  if (ctx.hasInput(2) && ctx.getInputType(2).hasRank() && scores.hasRank()) {
    const TensorType &weights = ctx.getInputType(2);
    if (weights.getRank() != 1 ||
        !unifyDims(weights.getDim(0), scores.getDim(1)))
      return ctx.error("weights " + weights.str() +
                       " must be a vector over the classes of " + scores.str());
  }
  if (*reduction == LossReduction::None)
    setOutput(ctx, 0,
              lossRanked ? TensorType(dtype, lossDims)
                         : TensorType::unranked(dtype));
  else
    setOutput(ctx, 0, TensorType::get(dtype, {}));
  return llvm::Error::success();
}

namespace {

llvm::Error inferSoftmaxCrossEntropyLoss(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 2});
  if (!dtype)
    return dtype.takeError();
  if (auto err = inferClassificationLoss(ctx, *dtype))
    return err;
  setOutput(ctx, 1, ctx.getInputType(0));
  return llvm::Error::success();
}

llvm::Error inferNllLoss(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 2});
  if (!dtype)
    return dtype.takeError();
  return inferClassificationLoss(ctx, *dtype);
}

void registerSoftmaxDropoutLosses(OpRegistry &registry) {
  for (const char *name : {"Softmax", "LogSoftmax"}) {
    // Softmax's output lies in [0, 1]; log-softmax's is unbounded.
    AmpClass amp = llvm::StringRef(name) == "Softmax" ? AmpClass::Fp32Compute
                                                      : AmpClass::Deny;
    // Before opset 13 the input is coerced to 2D at `axis` (default 1).
    SchemaBuilder(kOnnxDomain, name, 1)
        .inputs(1)
        .outputs(1)
        .attrInt("axis", 1)
        .traits(TraitRowwise)
        .inPlace(0)
        .amp(amp)
        .infer(inferSoftmax)
        .cost(costPerOutputElement(5))
        .add(registry);
    SchemaBuilder(kOnnxDomain, name, 13)
        .inputs(1)
        .outputs(1)
        .attrInt("axis", -1)
        .traits(TraitRowwise)
        .inPlace(0)
        .amp(amp)
        .infer(inferSoftmax)
        .cost(costPerOutputElement(5))
        .add(registry);
  }

  SchemaBuilder dropout(kOnnxDomain, "Dropout", 12);
  dropout.inputs(1, 3)
      .outputs(1, 2)
      .optionalAttr("seed", Attribute::Kind::Int)
      .traits(TraitRandom)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .ampOperands({0}) // The ratio keeps its type (and value).
      .infer(inferDropout)
      .cost(costPerOutputElement(2));
  dropout.add(registry);
  // Opset 13 only added bfloat16.
  dropout.addAt(registry, 13);

  SchemaBuilder(kOnnxDomain, "SoftmaxCrossEntropyLoss", 12)
      .inputs(2, 3)
      .outputs(1, 2)
      .optionalAttr("ignore_index", Attribute::Kind::Int)
      .attrString("reduction", "mean")
      .traits(TraitRowwise)
      .inPlace(0, /*result=*/1)
      .amp(AmpClass::Deny)
      .infer(inferSoftmaxCrossEntropyLoss)
      .cost(costPerInputElement(5))
      .add(registry);
  SchemaBuilder(kOnnxDomain, "NegativeLogLikelihoodLoss", 12)
      .inputs(2, 3)
      .outputs(1)
      .optionalAttr("ignore_index", Attribute::Kind::Int)
      .attrString("reduction", "mean")
      .amp(AmpClass::Deny)
      .infer(inferNllLoss)
      .cost(costPerInputElement(1))
      .add(registry);
}

} // namespace

void ops::registerNnOps(OpRegistry &registry) {
  registerConvAndPool(registry);
  registerNormalization(registry);
  registerSoftmaxDropoutLosses(registry);
}
