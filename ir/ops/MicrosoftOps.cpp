//===- MicrosoftOps.cpp - ONNX Runtime forward and gradient op schemas ----===//
//
// The com.microsoft ops that ONNX Runtime's gradient builder and its fused
// forward kernels put into training graphs: activation gradients (ReluGrad,
// GeluGrad, ...), softmax gradients, the normalization family with its
// gradients (LayerNormalizationGrad, BatchNormInternal, ...), ConvGrad, the
// dropout variants (including BitmaskDropout's packed uint32 mask) and the
// cross-entropy loss internals. Semantics follow ONNX Runtime's
// training_op_defs.cc and contrib_defs.cc. ONNX Runtime also registers a few
// gradient ops in the standard domain (MaxPoolGrad, AveragePoolGrad, an old
// ConvGrad, SimplifiedLayerNormalization); those are registered there with
// since-version 1 so that any opset finds them.
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
// Activations and their gradients
//===----------------------------------------------------------------------===//

/// An elementwise op of ONNX Runtime whose result has the type of input 0.
SchemaBuilder msElementwise(llvm::StringRef name, unsigned minInputs,
                            unsigned maxInputs, AmpClass amp) {
  SchemaBuilder builder(kMsDomain, name, 1);
  builder.inputs(minInputs, maxInputs)
      .outputs(1)
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(amp)
      .allowUnknownAttributes()
      .infer(inferSameAs(0));
  return builder;
}

/// A gradient (dY, X or Y, ...) -> dX whose operands share one shape.
InferenceFn inferElementwiseGrad(unsigned numShaped) {
  return [numShaped](InferenceContext &ctx) -> llvm::Error {
    llvm::SmallVector<unsigned, 4> indices;
    for (unsigned i = 0; i != numShaped; ++i)
      indices.push_back(i);
    auto dtype = checkSameDType(ctx, indices);
    if (!dtype)
      return dtype.takeError();
    const TensorType &dy = ctx.getInputType(0);
    const TensorType &x = ctx.getInputType(1);
    if (dy.hasRank() && x.hasRank()) {
      bool same = dy.getRank() == x.getRank();
      for (unsigned d = 0; same && d != dy.getRank(); ++d)
        same = unifyDims(dy.getDim(d), x.getDim(d)).has_value();
      if (!same)
        return ctx.error("gradient " + dy.str() + " does not match input " +
                         x.str());
    }
    setOutput(ctx, 0, dy.hasRank() || !x.hasRank() ? dy : x);
    return llvm::Error::success();
  };
}

/// BiasGelu-style ops: the bias is a vector over the last axis of X.
llvm::Error checkBias(const InferenceContext &ctx, unsigned xIndex,
                      unsigned biasIndex) {
  if (!ctx.hasInput(biasIndex))
    return llvm::Error::success();
  const TensorType &x = ctx.getInputType(xIndex);
  const TensorType &bias = ctx.getInputType(biasIndex);
  if (!x.hasRank() || !bias.hasRank() || x.getRank() == 0)
    return llvm::Error::success();
  if (bias.getRank() != 1 || !unifyDims(bias.getDim(0), x.getDims().back()))
    return ctx.error("bias " + bias.str() +
                     " must be a vector over the last "
                     "axis of " +
                     x.str());
  return llvm::Error::success();
}

void registerActivations(OpRegistry &registry) {
  msElementwise("Gelu", 1, 1, AmpClass::Follow).add(registry);
  msElementwise("FastGelu", 1, 2, AmpClass::Follow)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        if (auto err = checkBias(ctx, 0, 1))
          return err;
        setOutput(ctx, 0, ctx.getInputType(0));
        return llvm::Error::success();
      })
      .add(registry);
  msElementwise("BiasGelu", 2, 2, AmpClass::Follow)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        auto dtype = checkSameDType(ctx, {0, 1});
        if (!dtype)
          return dtype.takeError();
        if (auto err = checkBias(ctx, 0, 1))
          return err;
        setOutput(ctx, 0, ctx.getInputType(0));
        return llvm::Error::success();
      })
      .add(registry);
  msElementwise("QuickGelu", 1, 1, AmpClass::Follow)
      .attrFloat("alpha", 1.702f)
      .add(registry);

  for (const char *name :
       {"ReluGrad", "GeluGrad", "FastGeluGrad", "SigmoidGrad", "TanhGrad"})
    msElementwise(name, 2, 2, AmpClass::Follow)
        .infer(inferElementwiseGrad(2))
        .add(registry);
  msElementwise("QuickGeluGrad", 2, 2, AmpClass::Follow)
      .attrFloat("alpha", 1.702f)
      .infer(inferElementwiseGrad(2))
      .add(registry);
  for (const char *name : {"BiasGeluGrad_dX", "BiasFastGeluGrad_dX"})
    msElementwise(name, 3, 3, AmpClass::Follow)
        .infer([](InferenceContext &ctx) -> llvm::Error {
          if (auto err = inferElementwiseGrad(2)(ctx))
            return err;
          auto dtype = checkSameDType(ctx, {0, 1, 2});
          if (!dtype)
            return dtype.takeError();
          return checkBias(ctx, 1, 2);
        })
        .add(registry);

  // Softmax gradients read whole rows: not elementwise, but row by row, so
  // dX may overwrite dY.
  auto softmaxGrad = [&](llvm::StringRef name, int64_t defaultAxis) {
    // Log-softmax's output is unbounded: its gradient stays fp32.
    bool bounded = !llvm::StringRef(name).starts_with("Log");
    SchemaBuilder(kMsDomain, name, 1)
        .inputs(2)
        .outputs(1)
        .attrInt("axis", defaultAxis)
        .traits(TraitRowwise)
        .inPlace(0)
        .amp(bounded ? AmpClass::Fp32Compute : AmpClass::Deny)
        .infer([](InferenceContext &ctx) -> llvm::Error {
          if (auto err = inferElementwiseGrad(2)(ctx))
            return err;
          return checkSoftmaxAxis(ctx, ctx.getInputType(0));
        })
        .cost(costPerOutputElement(4))
        .add(registry);
  };
  softmaxGrad("SoftmaxGrad", 1);
  softmaxGrad("SoftmaxGrad_13", -1);
  softmaxGrad("LogSoftmaxGrad", 1);
  softmaxGrad("LogSoftmaxGrad_13", -1);
}

//===----------------------------------------------------------------------===//
// Normalization and its gradients
//===----------------------------------------------------------------------===//

/// Shape of the per-row statistics of a normalization over axes
/// [axis, rank): X's leading dims followed by ones.
llvm::Expected<TensorType> rowStatsType(const InferenceContext &ctx,
                                        const TensorType &x, DType dtype) {
  if (!x.hasRank())
    return TensorType::unranked(dtype);
  auto axis = norm::getNormAxis(ctx.getNode(), x.getRank());
  if (!axis)
    return ctx.error(llvm::toString(axis.takeError()));
  DimVector dims(x.getDims().begin(), x.getDims().begin() + *axis);
  dims.append(x.getRank() - *axis, Dim::fixed(1));
  return TensorType(dtype, dims);
}

llvm::Error inferSimplifiedLayerNorm(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1});
  if (!dtype)
    return dtype.takeError();
  const TensorType &x = ctx.getInputType(0);
  std::optional<DType> statsType =
      dtypeFromOnnx(ctx.getIntAttr("stash_type", 1));
  if (!statsType || !isFloatingPoint(*statsType))
    return ctx.error("stash_type must be a floating-point element type");
  auto stats = rowStatsType(ctx, x, *statsType);
  if (!stats)
    return stats.takeError();
  setOutput(ctx, 0, x);
  setOutput(ctx, 1, *stats);
  return llvm::Error::success();
}

/// Normalization gradients: X_grad takes the type of input \p xIndex, the
/// parameter gradients (results 1 and 2) the type of the scale (input 2).
/// \p rowNorm: a layer-norm gradient, whose `axis` splits X into rows.
InferenceFn inferNormGrad(unsigned xIndex, bool rowNorm) {
  return [xIndex, rowNorm](InferenceContext &ctx) -> llvm::Error {
    const TensorType &dy = ctx.getInputType(0);
    const TensorType &x = ctx.getInputType(xIndex);
    if (dy.hasRank() && x.hasRank() &&
        !broadcastShapes(dy.getDims(), x.getDims()))
      return ctx.error("gradient " + dy.str() + " does not match input " +
                       x.str());
    if (rowNorm && x.hasRank())
      if (auto axis = norm::getNormAxis(ctx.getNode(), x.getRank()); !axis)
        return ctx.error(llvm::toString(axis.takeError()));
    setOutput(ctx, 0, x);
    setOutput(ctx, 1, ctx.getInputType(2));
    setOutput(ctx, 2, ctx.getInputType(2));
    return llvm::Error::success();
  };
}

/// ONNX Runtime's BatchNormInternal: BatchNormalization-14 in training mode
/// plus the saved mean and inverse standard deviation.
llvm::Error inferBatchNormInternal(InferenceContext &ctx) {
  const TensorType &x = ctx.getInputType(0);
  Dim channels = Dim::unknown();
  if (x.hasRank())
    channels = x.getRank() > 1 ? x.getDim(1) : Dim::fixed(1);
  for (unsigned i = 1; i != 5; ++i) {
    const TensorType &param = ctx.getInputType(i);
    if (!param.hasRank())
      continue;
    std::optional<Dim> merged = param.getRank() == 1
                                    ? unifyDims(channels, param.getDim(0))
                                    : std::nullopt;
    if (!merged)
      return ctx.error(llvm::formatv("input {0} {1} does not match the {2} "
                                     "channels of X",
                                     i, param.str(), shapeString(channels)));
    channels = *merged;
  }
  setOutput(ctx, 0, x);
  for (unsigned out = 1; out != 5; ++out) {
    // running_mean/saved_mean follow input_mean's type, the variances
    // input_var's.
    DType dtype = inputDType(ctx, out % 2 == 1 ? 3 : 4);
    setOutput(ctx, out, TensorType(dtype, {channels}));
  }
  return llvm::Error::success();
}

void registerNormalization(OpRegistry &registry) {
  // ONNX Runtime defines it in the standard domain; graphs use either.
  for (llvm::StringRef domain : {kMsDomain, kOnnxDomain})
    SchemaBuilder(domain, "SimplifiedLayerNormalization", 1)
        .inputs(2)
        .outputs(1, 2)
        .attrInt("axis", -1)
        .attrFloat("epsilon", 1e-5f)
        .attrInt("stash_type", 1)
        .allowUnknownAttributes()
        .amp(AmpClass::Fp32Compute)
        .infer(inferSimplifiedLayerNorm)
        .cost(costPerInputElement(6))
        .add(registry);

  SchemaBuilder(kMsDomain, "LayerNormalizationGrad", 1)
      .inputs(5)
      .outputs(1, 3)
      .attrInt("axis", -1)
      .allowUnknownAttributes()
      .amp(AmpClass::Fp32Compute)
      .infer(inferNormGrad(1, /*rowNorm=*/true))
      .cost(costPerInputElement(10))
      .add(registry);
  SchemaBuilder(kMsDomain, "SimplifiedLayerNormalizationGrad", 1)
      .inputs(4)
      .outputs(1, 2)
      .attrInt("axis", -1)
      .allowUnknownAttributes()
      .amp(AmpClass::Fp32Compute)
      .infer(inferNormGrad(1, /*rowNorm=*/true))
      .cost(costPerInputElement(8))
      .add(registry);
  SchemaBuilder(kMsDomain, "InvertibleLayerNormalizationGrad", 1)
      .inputs(5)
      .outputs(1, 3)
      .attrInt("axis", -1)
      .allowUnknownAttributes()
      .amp(AmpClass::Fp32Compute)
      .infer(inferNormGrad(1, /*rowNorm=*/true))
      .cost(costPerInputElement(10))
      .add(registry);

  SchemaBuilder(kMsDomain, "BatchNormInternal", 1)
      .inputs(5)
      .outputs(1, 5)
      .attrFloat("epsilon", 1e-5f)
      .attrFloat("momentum", 0.9f)
      .attrInt("training_mode", 1)
      .amp(AmpClass::Deny)
      .infer(inferBatchNormInternal)
      .cost(costPerInputElement(4))
      .add(registry);
  SchemaBuilder(kMsDomain, "BatchNormalizationGrad", 1)
      .inputs(5)
      .outputs(1, 3)
      .requiredAttr("epsilon", Attribute::Kind::Float)
      .amp(AmpClass::Deny)
      .infer(inferNormGrad(1, /*rowNorm=*/false))
      .cost(costPerInputElement(8))
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Convolution and pooling gradients
//===----------------------------------------------------------------------===//

llvm::Error inferConvGrad(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  const TensorType &dy = ctx.getInputType(0);
  const TensorType &x = ctx.getInputType(1);
  const TensorType &w = ctx.getInputType(2);
  if (dy.hasRank() && w.hasRank()) {
    if (dy.getRank() != w.getRank() || dy.getRank() < 3 ||
        !unifyDims(dy.getDim(1), w.getDim(0)))
      return ctx.error("gradient " + dy.str() + " does not match weights " +
                       w.str());
  }
  if (dy.hasRank() && x.hasRank() &&
      (dy.getRank() != x.getRank() || !unifyDims(dy.getDim(0), x.getDim(0))))
    return ctx.error("gradient " + dy.str() + " does not match input " +
                     x.str());
  setOutput(ctx, 0, x);
  setOutput(ctx, 1, w);
  Dim channels = w.hasRank() && w.getRank() > 0 ? w.getDim(0) : Dim::unknown();
  setOutput(ctx, 2, TensorType(w.getDType(), {channels}));
  return llvm::Error::success();
}

/// dX and dW each cost one convolution; dB sums dY.
OpCost convGradCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  const TensorType &dy = node.getOperand(0)->getType();
  const TensorType &w = node.getOperand(2)->getType();
  for (unsigned i = 0; i != 2 && i < node.getNumResults(); ++i)
    if (node.getResult(i))
      cost.flops += convFlops(dy, w);
  if (node.getNumResults() > 2 && node.getResult(2))
    cost.flops += staticElements(dy);
  return cost;
}

/// MaxPoolGrad's dX has the shape of the pooled X, which only the MaxPool
/// that produced the indices knows.
llvm::Error inferMaxPoolGrad(InferenceContext &ctx) {
  static const DType int64Only[] = {DType::I64};
  if (auto err = checkDTypeIn(ctx, 1, int64Only, "indices"))
    return err;
  const TensorType &dy = ctx.getInputType(0);
  const Value *indices = ctx.getNode().getOperand(1);
  const Node *pool = indices->getDefiningNode();
  if (pool && pool->getDomain().empty() && pool->getOpType() == "MaxPool" &&
      indices->getResultIndex() == 1 && pool->getOperand(0)) {
    TensorType type = pool->getOperand(0)->getType();
    type.setDType(dy.getDType());
    setOutput(ctx, 0, std::move(type));
    return llvm::Error::success();
  }
  if (!dy.hasRank() || dy.getRank() < 2) {
    setOutput(ctx, 0, TensorType::unranked(dy.getDType()));
    return llvm::Error::success();
  }
  DimVector dims = {dy.getDim(0), dy.getDim(1)};
  dims.append(dy.getRank() - 2, Dim::unknown());
  setOutput(ctx, 0, TensorType(dy.getDType(), dims));
  return llvm::Error::success();
}

/// AveragePoolGrad gets only dY; the input extent is recovered when the
/// pooling formula is invertible (stride 1), and left unknown otherwise.
llvm::Error inferAveragePoolGrad(InferenceContext &ctx) {
  const TensorType &dy = ctx.getInputType(0);
  if (!dy.hasRank()) {
    setOutput(ctx, 0, dy);
    return llvm::Error::success();
  }
  if (dy.getRank() < 3)
    return ctx.error("gradient must have rank >= 3 (N, C, spatial...), got " +
                     dy.str());
  unsigned numSpatial = dy.getRank() - 2;
  auto params = readWindowParams(ctx, numSpatial);
  if (!params)
    return params.takeError();
  DimVector dims = {dy.getDim(0), dy.getDim(1)};
  for (unsigned i = 0; i != numSpatial; ++i) {
    const Dim &out = dy.getDim(i + 2);
    if (!out.isStatic() || params->strides[i] != 1 || params->ceilMode) {
      dims.push_back(Dim::unknown());
      continue;
    }
    if (params->autoPad == "SAME_UPPER" || params->autoPad == "SAME_LOWER") {
      dims.push_back(out);
      continue;
    }
    // Stride 1: out = in + pads - (kernel - 1) * dilation.
    std::optional<int64_t> pads =
        params->autoPad == "VALID"
            ? std::optional<int64_t>(0)
            : checkedAdd(params->pads[i], params->pads[i + numSpatial]);
    std::optional<int64_t> spread =
        checkedMul(params->kernel[i] - 1, params->dilations[i]);
    std::optional<int64_t> extent =
        spread ? checkedAdd(out.getExtent(), *spread) : std::nullopt;
    if (extent && pads)
      extent = *extent - *pads;
    dims.push_back(extent && pads && *extent > 0 ? Dim::fixed(*extent)
                                                 : Dim::unknown());
  }
  setOutput(ctx, 0, TensorType(dy.getDType(), dims));
  return llvm::Error::success();
}

void registerConvAndPoolGrads(OpRegistry &registry) {
  SchemaBuilder convGrad(kMsDomain, "ConvGrad", 1);
  convGrad.inputs(3)
      .outputs(1, 3)
      .attrString("auto_pad", "NOTSET")
      .optionalAttr("dilations", Attribute::Kind::Ints)
      .attrInt("group", 1)
      .optionalAttr("kernel_shape", Attribute::Kind::Ints)
      .optionalAttr("pads", Attribute::Kind::Ints)
      .optionalAttr("strides", Attribute::Kind::Ints)
      .allowUnknownAttributes()
      .amp(AmpClass::Allow)
      .infer(inferConvGrad)
      .cost(convGradCost);
  convGrad.add(registry);
  // Older ONNX Runtime releases emitted ConvGrad in the standard domain.
  SchemaBuilder standardConvGrad(kOnnxDomain, "ConvGrad", 1);
  standardConvGrad.inputs(3)
      .outputs(1, 3)
      .allowUnknownAttributes()
      .amp(AmpClass::Allow)
      .infer(inferConvGrad)
      .cost(convGradCost)
      .add(registry);

  SchemaBuilder(kOnnxDomain, "MaxPoolGrad", 1)
      .inputs(2)
      .outputs(1)
      .allowUnknownAttributes()
      .amp(AmpClass::Follow)
      .infer(inferMaxPoolGrad)
      .add(registry);
  SchemaBuilder(kOnnxDomain, "AveragePoolGrad", 1)
      .inputs(1)
      .outputs(1)
      .requiredAttr("kernel_shape", Attribute::Kind::Ints)
      .optionalAttr("strides", Attribute::Kind::Ints)
      .optionalAttr("pads", Attribute::Kind::Ints)
      .optionalAttr("dilations", Attribute::Kind::Ints)
      .attrString("auto_pad", "NOTSET")
      .attrInt("ceil_mode", 0)
      .attrInt("count_include_pad", 0)
      .allowUnknownAttributes()
      .amp(AmpClass::Follow)
      .infer(inferAveragePoolGrad)
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Dropout variants
//===----------------------------------------------------------------------===//

/// Number of uint32 words of a bitmask over \p type's elements.
Dim bitmaskWords(const TensorType &type) {
  if (!type.hasStaticShape())
    return Dim::unknown();
  return Dim::fixed((type.getNumElements() + 31) / 32);
}

llvm::Error inferBitmaskDropout(InferenceContext &ctx) {
  static const DType boolOnly[] = {DType::Bool};
  if (auto err = checkDTypeIn(ctx, 2, boolOnly, "training_mode"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  setOutput(ctx, 0, data);
  setOutput(ctx, 1, TensorType(DType::U32, {bitmaskWords(data)}));
  return llvm::Error::success();
}

llvm::Error inferDropoutGrad(InferenceContext &ctx) {
  const TensorType &dy = ctx.getInputType(0);
  const TensorType &mask = ctx.getInputType(1);
  bool bitmask = ctx.getNode().getOpType() == "BitmaskDropoutGrad";
  static const DType boolOnly[] = {DType::Bool};
  static const DType u32Only[] = {DType::U32};
  if (auto err = checkDTypeIn(ctx, 1,
                              bitmask ? llvm::ArrayRef<DType>(u32Only)
                                      : llvm::ArrayRef<DType>(boolOnly),
                              "mask"))
    return err;
  if (!bitmask && dy.hasRank() && mask.hasRank() &&
      !broadcastShapes(dy.getDims(), mask.getDims()))
    return ctx.error("mask " + mask.str() + " does not match gradient " +
                     dy.str());
  setOutput(ctx, 0, dy);
  return llvm::Error::success();
}

llvm::Error inferBiasDropout(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  if (auto err = checkBias(ctx, 0, 1))
    return err;
  const TensorType &data = ctx.getInputType(0);
  setOutput(ctx, 0, data);
  TensorType mask = data;
  mask.setDType(DType::Bool);
  setOutput(ctx, 1, std::move(mask));
  return llvm::Error::success();
}

void registerDropout(OpRegistry &registry) {
  SchemaBuilder(kMsDomain, "BitmaskDropout", 1)
      .inputs(1, 3)
      .outputs(1, 2)
      .optionalAttr("seed", Attribute::Kind::Int)
      .traits(TraitRandom)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .ampOperands({0})
      .infer(inferBitmaskDropout)
      .cost(costPerOutputElement(2))
      .add(registry);
  SchemaBuilder(kMsDomain, "BiasDropout", 1)
      .inputs(2, 5)
      .outputs(1, 2)
      .optionalAttr("seed", Attribute::Kind::Int)
      .allowUnknownAttributes()
      .traits(TraitRandom)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .ampOperands({0, 1, 2})
      .infer(inferBiasDropout)
      .cost(costPerOutputElement(3))
      .add(registry);
  for (const char *name : {"DropoutGrad", "BitmaskDropoutGrad"})
    msElementwise(name, 2, 4, AmpClass::Follow)
        .ampOperands({0})
        .infer(inferDropoutGrad)
        .add(registry);
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// The `output_type` attribute of the *Internal loss ops, or \p fallback.
llvm::Expected<DType> lossOutputType(const InferenceContext &ctx,
                                     DType fallback) {
  if (!ctx.getAttr("output_type"))
    return fallback;
  int64_t code = ctx.getIntAttr("output_type", 0);
  std::optional<DType> dtype = dtypeFromOnnx(code);
  if (!dtype || !isFloatingPoint(*dtype))
    return ctx.error(llvm::formatv("output_type {0} is not a floating-point "
                                   "element type",
                                   code));
  return *dtype;
}

llvm::Error inferSceLossInternal(InferenceContext &ctx) {
  static const DType int64Only[] = {DType::I64};
  if (auto err = checkDTypeIn(ctx, 3, int64Only, "ignore_index"))
    return err;
  auto inputType = checkSameDType(ctx, {0, 2});
  if (!inputType)
    return inputType.takeError();
  auto dtype = lossOutputType(ctx, *inputType);
  if (!dtype)
    return dtype.takeError();
  if (auto err = inferClassificationLoss(ctx, *dtype))
    return err;
  TensorType logProb = ctx.getInputType(0);
  logProb.setDType(*dtype);
  setOutput(ctx, 1, std::move(logProb));
  return llvm::Error::success();
}

/// d_logits of the cross-entropy gradients has the shape of log_prob.
llvm::Error inferSceLossGrad(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 2, indexDTypes(), "labels"))
    return err;
  if (auto reduction = getLossReduction(ctx.getNode()); !reduction)
    return ctx.error(llvm::toString(reduction.takeError()));
  const TensorType &logProb = ctx.getInputType(1);
  auto dtype = lossOutputType(ctx, logProb.getDType());
  if (!dtype)
    return dtype.takeError();
  const TensorType &labels = ctx.getInputType(2);
  if (logProb.hasRank() && labels.hasRank() &&
      labels.getRank() + 1 != logProb.getRank())
    return ctx.error("labels " + labels.str() + " must have the shape of " +
                     logProb.str() + " without the class axis");
  TensorType out = logProb;
  out.setDType(*dtype);
  setOutput(ctx, 0, std::move(out));
  return llvm::Error::success();
}

void registerLosses(OpRegistry &registry) {
  SchemaBuilder(kMsDomain, "SoftmaxCrossEntropyLossInternal", 1)
      .inputs(2, 4)
      .outputs(1, 2)
      .attrString("reduction", "mean")
      .optionalAttr("output_type", Attribute::Kind::Int)
      .traits(TraitRowwise)
      .inPlace(0, /*result=*/1)
      .amp(AmpClass::Deny)
      .infer(inferSceLossInternal)
      .cost(costPerInputElement(5))
      .add(registry);
  SchemaBuilder(kMsDomain, "SoftmaxCrossEntropyLossInternalGrad", 1)
      .inputs(3, 6)
      .outputs(1)
      .attrString("reduction", "mean")
      .optionalAttr("output_type", Attribute::Kind::Int)
      .traits(TraitRowwise)
      .inPlace(1)
      .amp(AmpClass::Deny)
      .infer(inferSceLossGrad)
      .cost(costPerOutputElement(3))
      .add(registry);
  SchemaBuilder(kMsDomain, "SoftmaxCrossEntropyLossGrad", 1)
      .inputs(3, 4)
      .outputs(1)
      .attrString("reduction", "mean")
      .optionalAttr("ignore_index", Attribute::Kind::Int)
      .traits(TraitRowwise)
      .inPlace(1)
      .amp(AmpClass::Deny)
      .infer(inferSceLossGrad)
      .cost(costPerOutputElement(3))
      .add(registry);
  for (const char *name : {"NegativeLogLikelihoodLossInternal",
                           "NegativeLogLikelihoodLossInternal2"})
    SchemaBuilder(kMsDomain, name, 1)
        .inputs(2, 4)
        .outputs(1)
        .attrString("reduction", "mean")
        .amp(AmpClass::Deny)
        .infer([](InferenceContext &ctx) -> llvm::Error {
          auto dtype = checkSameDType(ctx, {0, 2});
          if (!dtype)
            return dtype.takeError();
          return inferClassificationLoss(ctx, *dtype);
        })
        .cost(costPerInputElement(1))
        .add(registry);

  // The older one-hot (dense label) cross entropy.
  SchemaBuilder(kMsDomain, "SoftmaxCrossEntropy", 1)
      .inputs(2)
      .outputs(1, 2)
      .attrString("reduction", "mean")
      .amp(AmpClass::Deny)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        auto dtype = checkSameDType(ctx, {0, 1});
        if (!dtype)
          return dtype.takeError();
        const TensorType &logits = ctx.getInputType(0);
        const TensorType &label = ctx.getInputType(1);
        if (logits.hasRank() && label.hasRank() &&
            !broadcastShapes(logits.getDims(), label.getDims()))
          return ctx.error("label " + label.str() +
                           " must have the shape of logits " + logits.str());
        auto reduction = getLossReduction(ctx.getNode());
        if (!reduction)
          return ctx.error(llvm::toString(reduction.takeError()));
        if (*reduction == LossReduction::None) {
          if (label.hasRank() && label.getRank() > 0)
            setOutput(ctx, 0, TensorType(*dtype, label.getDims().drop_back()));
          else
            setOutput(ctx, 0, TensorType::unranked(*dtype));
        } else {
          setOutput(ctx, 0, TensorType::get(*dtype, {}));
        }
        setOutput(ctx, 1, logits);
        return llvm::Error::success();
      })
      .cost(costPerInputElement(5))
      .add(registry);
  SchemaBuilder(kMsDomain, "SoftmaxCrossEntropyGrad", 1)
      .inputs(3)
      .outputs(1)
      .attrString("reduction", "mean")
      .amp(AmpClass::Deny)
      .infer(inferSameAs(1))
      .cost(costPerOutputElement(3))
      .add(registry);
}

} // namespace

void gmopt::registerMicrosoftOps(OpRegistry &registry) {
  registerActivations(registry);
  registerNormalization(registry);
  registerConvAndPoolGrads(registry);
  registerDropout(registry);
  registerLosses(registry);
  registerMicrosoftLinalgOps(registry);
  registerMicrosoftTrainingOps(registry);
}
