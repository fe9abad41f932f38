//===- GradientRulesNn.cpp - Gradients of layers and losses ---------------===//
//
// Gradient rules of the neural-network ops: softmax, layer and RMS
// normalization, dropout, the softmax cross-entropy loss, convolution and
// pooling. Each emits ONNX Runtime's gradient op (SoftmaxGrad_13,
// LayerNormalizationGrad, DropoutGrad, SoftmaxCrossEntropyLossGrad,
// ConvGrad, MaxPoolGrad, AveragePoolGrad) and, where that op reads a value
// the forward op can output but the model did not ask for (Dropout's mask,
// SoftmaxCrossEntropyLoss's log-probabilities, LayerNormalization's mean
// and inverse standard deviation, MaxPool's indices), first adds that
// result to the forward node, as ONNX Runtime's gradient builder does, so
// the backward pass reads the saved value. ONNX's RMSNormalization has no
// such output: its rule recomputes the inverse deviation from X.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

#include "ir/OpRegistry.h"
#include "ir/ops/Axes.h"
#include "ir/ops/NormRows.h"

#include "llvm/ADT/STLExtras.h"

using namespace gmopt;

namespace {

/// Makes results [0, count) of forward node \p node present (typed by the
/// registry), so a gradient op can read a saved statistic.
llvm::Error ensureSavedResults(Node &node, unsigned count) {
  bool added = false;
  for (unsigned i = 0; i != count; ++i)
    if (i >= node.getNumResults() || !node.getResult(i)) {
      Value *result = node.getGraph()->ensureResult(&node, i);
      std::string base = node.getResult(0) ? node.getResult(0)->getName().str()
                                           : node.getName().str();
      result->setName(base + "_saved_" + std::to_string(i));
      added = true;
    }
  if (!added)
    return llvm::Error::success();
  return inferAndSetTypes(node);
}

/// The attributes of \p node named in \p names, copied.
llvm::SmallVector<NamedAttribute, 8>
copyAttrs(const Node &node, llvm::ArrayRef<llvm::StringRef> names) {
  llvm::SmallVector<NamedAttribute, 8> attrs;
  for (const NamedAttribute &attr : node.getAttrs())
    if (names.empty() || llvm::is_contained(names, attr.name))
      attrs.push_back(attr);
  return attrs;
}

/// Softmax / LogSoftmax: ONNX Runtime's (Log)SoftmaxGrad(_13)(dY, Y).
GradientRule softmaxRule(bool logSoftmax) {
  GradientRule rule;
  rule.emit = [logSoftmax](GradientBuilder &b, const GradientRequest &request,
                           Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    // The gradient op keeps the node's axis convention (ops::SoftmaxAxes):
    // ONNX Runtime's _13 gradients run along one axis, the others coerce
    // to 2-D at it.
    std::string op =
        std::string(logSoftmax ? "LogSoftmaxGrad" : "SoftmaxGrad") +
        (ops::isCoercedSoftmax(node) ? "" : "_13");
    int64_t axis = ops::getSoftmaxAxisAttr(node);
    return assign(grads[0], b.microsoft(op, {dY, node.getResult(0)},
                                        {{"axis", Attribute::getInt(axis)}}));
  };
  return rule;
}

/// LayerNormalization(X, scale, B) -> LayerNormalizationGrad(dY, X, scale,
/// mean, inv_std_dev) = (dX, dScale, dB).
GradientRule layerNormRule(bool simplified) {
  GradientRule rule;
  rule.emit = [simplified](GradientBuilder &b, const GradientRequest &request,
                           Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    for (unsigned i = 1; i < request.resultGrads.size(); ++i)
      if (request.resultGrads[i])
        return gradientError(node, "no gradient through a normalization's "
                                   "statistics outputs");
    // Simplified (RMS) normalization saves only the inverse deviation.
    unsigned saved = simplified ? 2 : 3;
    if (auto err = ensureSavedResults(node, saved))
      return err;
    llvm::SmallVector<Value *, 5> operands = {dY, node.getOperand(0),
                                              node.getOperand(1)};
    for (unsigned i = 1; i != saved; ++i)
      operands.push_back(node.getResult(i));
    bool hasBias =
        !simplified && node.getNumOperands() > 2 && node.getOperand(2);
    auto grad =
        b.create(kMsDomain,
                 simplified ? "SimplifiedLayerNormalizationGrad"
                            : "LayerNormalizationGrad",
                 operands, hasBias ? 3 : 2,
                 {{"axis", Attribute::getInt(node.getIntAttr("axis", -1))}});
    if (!grad)
      return grad.takeError();
    for (unsigned i = 0; i != (hasBias ? 3u : 2u); ++i)
      grads[i] = (*grad)->getResult(i);
    return llvm::Error::success();
  };
  return rule;
}

/// RMSNormalization(X, scale) -> SimplifiedLayerNormalizationGrad(dY, X,
/// scale, inv_std_var) = (dX, dScale), the fused gradient ONNX Runtime has
/// for the same norm. ONNX's RMSNormalization has no inv_std_var output to
/// save (unlike LayerNormalization and SimplifiedLayerNormalization), so the
/// backward pass recomputes it from the saved X, in the stash type, without
/// an X-sized temporary: 1 / sqrt(ReduceSumSquare(X) / cols + epsilon) over
/// the normalized axes. A scale broadcast to the normalized shape is
/// expanded for the gradient op and its gradient summed back.
GradientRule rmsNormRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0), *scale = node.getOperand(1);
    const TensorType &xType = x->getType();
    if (!xType.hasRank())
      return gradientError(node, "RMSNormalization's gradient needs a ranked "
                                 "X");
    auto axis = norm::getNormAxis(node, xType.getRank());
    if (!axis)
      return gradientError(node, llvm::toString(axis.takeError()));
    llvm::SmallVector<int64_t, 4> normalized, axes;
    for (unsigned d = *axis; d != xType.getRank(); ++d) {
      const Dim &dim = xType.getDim(d);
      if (!dim.isStatic())
        return gradientError(node, "RMSNormalization's gradient needs static "
                                   "normalized dimensions");
      normalized.push_back(dim.getExtent());
      axes.push_back(d);
    }
    std::optional<DType> stash =
        dtypeFromOnnx(node.getIntAttr("stash_type", 1));
    if (!stash || !isFloatingPoint(*stash))
      return gradientError(node, "stash_type must be a floating-point "
                                 "element type");
    // inv_std_var, [X's leading dims, ones], as the forward computes it.
    Value *stashedX = x;
    if (xType.getDType() != *stash) {
      GMOPT_TRY(
          cast,
          b.onnx("Cast", {x},
                 {{"to", Attribute::getInt(static_cast<int64_t>(*stash))}}));
      stashedX = cast;
    }
    // Axes are an operand from opset 18 on, an attribute before.
    llvm::SmallVector<Value *, 2> reduceOperands = {stashedX};
    llvm::SmallVector<NamedAttribute, 2> reduceAttrs = {
        {"keepdims", Attribute::getInt(1)}};
    if (b.getOnnxOpset() >= 18)
      reduceOperands.push_back(b.int64s(axes));
    else
      reduceAttrs.push_back({"axes", Attribute::getInts(std::vector<int64_t>(
                                         axes.begin(), axes.end()))});
    GMOPT_TRY(sumSquares,
              b.onnx("ReduceSumSquare", reduceOperands, reduceAttrs));
    int64_t cols = 1;
    for (int64_t extent : normalized)
      cols *= extent;
    GMOPT_TRY(meanSquare,
              b.mul(sumSquares, b.scalar(*stash, cols ? 1.0 / cols : 0.0)));
    GMOPT_TRY(shifted,
              b.add(meanSquare,
                    b.scalar(*stash, node.getFloatAttr("epsilon", 1e-5f))));
    GMOPT_TRY(rms, b.onnx("Sqrt", {shifted}));
    GMOPT_TRY(invStd, b.onnx("Reciprocal", {rms}));
    // SimplifiedLayerNormalizationGrad takes one scale per normalized
    // element.
    Value *fullScale = scale;
    if (scale->getType().getDims() != xType.getDims().drop_front(*axis)) {
      GMOPT_TRY(expanded, b.onnx("Expand", {scale, b.int64s(normalized)}));
      fullScale = expanded;
    }
    auto grad = b.create(kMsDomain, "SimplifiedLayerNormalizationGrad",
                         {dY, x, fullScale, invStd}, 2,
                         {{"axis", Attribute::getInt(*axis)}});
    if (!grad)
      return grad.takeError();
    grads[0] = (*grad)->getResult(0);
    if (!request.wanted[1])
      return llvm::Error::success();
    if (fullScale == scale) {
      grads[1] = (*grad)->getResult(1);
      return llvm::Error::success();
    }
    return assign(grads[1], b.reduceToShapeOf((*grad)->getResult(1), scale));
  };
  return rule;
}

/// True when \p value is a constant holding false.
bool isConstantFalse(const Value *value) {
  return value && value->hasData() && value->getData().getNumElements() == 1 &&
         value->getData().getIntElement(0) == 0;
}

/// Dropout(data, ratio, training_mode) -> DropoutGrad(dY, mask, ratio,
/// training_mode); an inference-mode Dropout passes dY through.
GradientRule dropoutRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    Value *trainingMode =
        node.getNumOperands() > 2 ? node.getOperand(2) : nullptr;
    if (node.getAttr("ratio"))
      return gradientError(node, "Dropout before opset 12 (ratio attribute) "
                                 "has no gradient rule");
    if (!trainingMode || isConstantFalse(trainingMode)) {
      grads[0] = dY;
      return llvm::Error::success();
    }
    if (auto err = ensureSavedResults(node, 2))
      return err;
    llvm::SmallVector<Value *, 4> operands = {dY, node.getResult(1),
                                              node.getOperand(1), trainingMode};
    return assign(grads[0], b.microsoft("DropoutGrad", operands));
  };
  return rule;
}

/// Switches a Dropout's training_mode operand to a true constant.
llvm::Expected<bool> dropoutTrainingMode(Node &node) {
  Value *flag = node.getNumOperands() > 2 ? node.getOperand(2) : nullptr;
  if (flag && !isConstantFalse(flag))
    return false;
  if (node.getAttr("ratio"))
    return false;
  Graph &graph = *node.getGraph();
  Value *on = graph.addInitializer(
      TensorData::fromValues<uint8_t>(DType::Bool, {}, {1}),
      node.getName().str() + "_training_mode");
  llvm::SmallVector<Value *, 3> operands = node.getOperands();
  operands.resize(3, nullptr);
  operands[2] = on;
  node.setOperands(operands);
  return true;
}

/// ONNX Runtime's BatchNormReplacement: a BatchNormalization becomes
/// BatchNormInternal in training mode, which also outputs the saved batch
/// mean and inverse deviation its gradient reads.
llvm::Expected<bool> batchNormTrainingMode(Node &node) {
  if (node.getNumOperands() != 5)
    return false;
  Graph &graph = *node.getGraph();
  Builder builder(graph);
  builder.setInsertionPoint(&node);
  builder.setPhase(node.getPhase());
  auto replacement = builder.createInferred(
      OpName{kMsDomain.str(), "BatchNormInternal"}, node.getOperands(), 5,
      {{"epsilon", Attribute::getFloat(node.getFloatAttr("epsilon", 1e-5f))},
       {"momentum", Attribute::getFloat(node.getFloatAttr("momentum", 0.9f))},
       {"training_mode", Attribute::getInt(1)}},
      node.getName().str());
  if (!replacement)
    return replacement.takeError();
  for (unsigned i = 0; i != node.getNumResults(); ++i)
    if (Value *result = node.getResult(i)) {
      (*replacement)->getResult(i)->setName(result->getName());
      result->replaceAllUsesWith((*replacement)->getResult(i));
    }
  std::string base = node.getName().str();
  (*replacement)->getResult(3)->setName(base + "_saved_mean");
  (*replacement)->getResult(4)->setName(base + "_saved_inv_std");
  graph.eraseNode(&node);
  return true;
}

/// BatchNormInternal(X, scale, B, mean, var) -> BatchNormalizationGrad(dY,
/// X, scale, saved_mean, saved_inv_std) = (dX, dScale, dB).
GradientRule batchNormInternalRule() {
  GradientRule rule;
  rule.differentiableOperands = {0, 1, 2};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    if (auto err = ensureSavedResults(node, 5))
      return err;
    auto grad =
        b.create(kMsDomain, "BatchNormalizationGrad",
                 {dY, node.getOperand(0), node.getOperand(1), node.getResult(3),
                  node.getResult(4)},
                 3,
                 {{"epsilon",
                   Attribute::getFloat(node.getFloatAttr("epsilon", 1e-5f))}});
    if (!grad)
      return grad.takeError();
    for (unsigned i = 0; i != 3; ++i)
      grads[i] = (*grad)->getResult(i);
    return llvm::Error::success();
  };
  return rule;
}

/// BatchNormalization in inference mode: an affine map per channel,
/// dX = dY * scale / sqrt(var + eps), dScale = sum(dY * x_hat), dB = sum(dY)
/// over every axis but the channel's (standard ops). In training mode it
/// is rewritten to BatchNormInternal first (train-mode, the default).
GradientRule batchNormRule() {
  GradientRule rule;
  rule.differentiableOperands = {0, 1, 2};
  rule.trainingRewrite = batchNormTrainingMode;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    if (node.getIntAttr("training_mode", 0))
      return gradientError(node, "a training-mode BatchNormalization needs "
                                 "train-mode (its BatchNormInternal rewrite)");
    Value *x = node.getOperand(0);
    const TensorType &type = x->getType();
    if (!type.hasRank() || type.getRank() < 2)
      return gradientError(node, "BatchNormalization needs a ranked input");
    unsigned rank = type.getRank();
    std::vector<int64_t> spatial, reduced = {0};
    for (unsigned i = 2; i != rank; ++i) {
      spatial.push_back(i - 1);
      reduced.push_back(i);
    }
    DType dtype = dY->getType().getDType();
    auto perChannel = [&](Value *v) -> llvm::Expected<Value *> {
      if (spatial.empty())
        return v;
      return b.onnx("Unsqueeze", {v, b.int64s(spatial)});
    };
    auto shifted = b.add(node.getOperand(4),
                         b.scalar(dtype, node.getFloatAttr("epsilon", 1e-5f)));
    if (!shifted)
      return shifted.takeError();
    auto root = b.onnx("Sqrt", {*shifted});
    if (!root)
      return root.takeError();
    auto invStd = b.onnx("Reciprocal", {*root});
    if (!invStd)
      return invStd.takeError();
    auto invStdC = perChannel(*invStd);
    if (!invStdC)
      return invStdC.takeError();
    if (request.wanted[0]) {
      auto factor = b.mul(node.getOperand(1), *invStd);
      if (!factor)
        return factor.takeError();
      auto factorC = perChannel(*factor);
      if (!factorC)
        return factorC.takeError();
      if (auto err = assign(grads[0], b.mul(dY, *factorC)))
        return err;
    }
    auto sumOver = [&](Value *v) {
      return b.onnx("ReduceSum", {v, b.int64s(reduced)},
                    {{"keepdims", Attribute::getInt(0)}});
    };
    if (request.wanted[1]) {
      auto meanC = perChannel(node.getOperand(3));
      if (!meanC)
        return meanC.takeError();
      auto centered = b.sub(x, *meanC);
      if (!centered)
        return centered.takeError();
      auto normalized = b.mul(*centered, *invStdC);
      if (!normalized)
        return normalized.takeError();
      auto product = b.mul(dY, *normalized);
      if (!product)
        return product.takeError();
      if (auto err = assign(grads[1], sumOver(*product)))
        return err;
    }
    if (request.wanted[2])
      if (auto err = assign(grads[2], sumOver(dY)))
        return err;
    return llvm::Error::success();
  };
  return rule;
}

/// SoftmaxCrossEntropyLoss(scores, labels, weights) ->
/// SoftmaxCrossEntropyLossGrad(dY, log_prob, labels, weights).
GradientRule softmaxCrossEntropyRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    Node &node = request.node;
    if (request.resultGrads.size() > 1 && request.resultGrads[1])
      return gradientError(node, "no gradient through "
                                 "SoftmaxCrossEntropyLoss's log_prob output");
    if (!dY)
      return llvm::Error::success();
    if (auto err = ensureSavedResults(node, 2))
      return err;
    llvm::SmallVector<Value *, 4> operands = {dY, node.getResult(1),
                                              node.getOperand(1)};
    if (node.getNumOperands() > 2 && node.getOperand(2))
      operands.push_back(node.getOperand(2));
    return assign(grads[0],
                  b.microsoft("SoftmaxCrossEntropyLossGrad", operands,
                              copyAttrs(node, {"reduction", "ignore_index"})));
  };
  return rule;
}

/// ONNX Runtime's BitmaskDropout -> BitmaskDropoutGrad(dY, mask, ratio,
/// training_mode).
GradientRule bitmaskDropoutRule() {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    if (auto err = ensureSavedResults(node, 2))
      return err;
    llvm::SmallVector<Value *, 4> operands = {dY, node.getResult(1)};
    for (unsigned i = 1; i < node.getNumOperands(); ++i)
      operands.push_back(node.getOperand(i));
    return assign(grads[0], b.microsoft("BitmaskDropoutGrad", operands));
  };
  return rule;
}

/// ONNX Runtime's BiasDropout(data, bias, residual, ratio, training_mode)
/// = Dropout(data + bias) + residual: DropoutGrad gives d(data + bias),
/// summed over the broadcast for the bias; the residual gets dY.
GradientRule biasDropoutRule() {
  GradientRule rule;
  rule.differentiableOperands = {0, 1, 2};
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    if (auto err = ensureSavedResults(node, 2))
      return err;
    llvm::SmallVector<Value *, 4> operands = {dY, node.getResult(1)};
    for (unsigned i = 3; i < node.getNumOperands(); ++i)
      operands.push_back(node.getOperand(i));
    auto dropped = b.microsoft("DropoutGrad", operands);
    if (!dropped)
      return dropped.takeError();
    if (request.wanted[0])
      grads[0] = *dropped;
    if (request.wanted[1])
      if (auto err =
              assign(grads[1], b.reduceToShapeOf(*dropped, node.getOperand(1))))
        return err;
    if (request.wanted.size() > 2 && request.wanted[2])
      if (auto err =
              assign(grads[2], b.reduceToShapeOf(dY, node.getOperand(2))))
        return err;
    return llvm::Error::success();
  };
  return rule;
}

/// ONNX Runtime's SoftmaxCrossEntropyLossInternal(logits, labels, weights,
/// ignore_index) -> SoftmaxCrossEntropyLossInternalGrad(dY, log_prob,
/// labels, weights, ignore_index); and its older SoftmaxCrossEntropy
/// (probability labels) -> SoftmaxCrossEntropyGrad(dY, log_prob, labels).
GradientRule internalCrossEntropyRule(bool internal) {
  GradientRule rule;
  rule.differentiableOperands = {0};
  rule.emit = [internal](GradientBuilder &b, const GradientRequest &request,
                         Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    Node &node = request.node;
    if (request.resultGrads.size() > 1 && request.resultGrads[1])
      return gradientError(node, "no gradient through the log_prob output");
    if (!dY)
      return llvm::Error::success();
    if (auto err = ensureSavedResults(node, 2))
      return err;
    llvm::SmallVector<Value *, 5> operands = {dY, node.getResult(1),
                                              node.getOperand(1)};
    for (unsigned i = 2; internal && i < node.getNumOperands(); ++i)
      operands.push_back(node.getOperand(i));
    return assign(grads[0],
                  b.microsoft(internal ? "SoftmaxCrossEntropyLossInternalGrad"
                                       : "SoftmaxCrossEntropyGrad",
                              operands,
                              copyAttrs(node, {"reduction", "output_type"})));
  };
  return rule;
}

/// Conv(X, W, B) -> ConvGrad(dY, X, W) = (dX, dW, dB).
GradientRule convRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    bool hasBias = node.getNumOperands() > 2 && node.getOperand(2);
    unsigned count = hasBias ? 3 : 2;
    auto grad = b.create(kMsDomain, "ConvGrad",
                         {dY, node.getOperand(0), node.getOperand(1)}, count,
                         copyAttrs(node, {"auto_pad", "dilations", "group",
                                          "kernel_shape", "pads", "strides"}));
    if (!grad)
      return grad.takeError();
    for (unsigned i = 0; i != count; ++i)
      grads[i] = (*grad)->getResult(i);
    return llvm::Error::success();
  };
  return rule;
}

/// MaxPool -> MaxPoolGrad(dY, indices), reading the saved indices.
GradientRule maxPoolRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    Node &node = request.node;
    if (auto err = ensureSavedResults(node, 2))
      return err;
    return assign(grads[0], b.onnx("MaxPoolGrad", {dY, node.getResult(1)},
                                   copyAttrs(node, {})));
  };
  return rule;
}

/// AveragePool -> AveragePoolGrad(dY) with the pool's attributes.
GradientRule averagePoolRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    auto grad = b.onnx("AveragePoolGrad", {dY}, copyAttrs(request.node, {}));
    if (!grad)
      return grad.takeError();
    // dY alone cannot tell the input's extent (floor division); it is X's.
    (*grad)->setType(request.node.getOperand(0)->getType());
    grads[0] = *grad;
    return llvm::Error::success();
  };
  return rule;
}

/// GlobalAveragePool: dY / (spatial size), broadcast over the window.
GradientRule globalAveragePoolRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0);
    const TensorType &type = x->getType();
    if (!type.hasRank() || type.getRank() < 2)
      return gradientError(node, "GlobalAveragePool needs a ranked input");
    uint64_t window = 1;
    for (unsigned i = 2; i != type.getRank(); ++i) {
      if (!type.getDim(i).isStatic())
        return gradientError(node, "GlobalAveragePool's gradient needs "
                                   "static spatial dimensions");
      window *= type.getDim(i).getExtent();
    }
    auto scaled =
        b.mul(dY, b.scalar(dY->getType().getDType(), 1.0 / double(window)));
    if (!scaled)
      return scaled.takeError();
    auto shape = b.shapeOf(x);
    if (!shape)
      return shape.takeError();
    return assign(grads[0], b.onnx("Expand", {*scaled, *shape}));
  };
  return rule;
}

/// InstanceNormalization(X, scale, B): normalization over each sample's
/// channel; with x_hat = (x - mean) / sqrt(var + eps) and g = dY * scale,
/// dX = (g - mean(g) - x_hat mean(g x_hat)) / sqrt(var + eps) (means over
/// the spatial axes), dScale = sum(dY x_hat), dB = sum(dY) (over the batch
/// and spatial axes). ONNX Runtime has no gradient op for it.
GradientRule instanceNormRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0);
    const TensorType &type = x->getType();
    if (!type.hasRank() || type.getRank() < 3)
      return gradientError(node, "InstanceNormalization needs a ranked input");
    unsigned rank = type.getRank();
    std::vector<int64_t> spatial, channelAxes, batchAndSpatial = {0};
    uint64_t count = 1;
    for (unsigned i = 2; i != rank; ++i) {
      if (!type.getDim(i).isStatic())
        return gradientError(node, "InstanceNormalization's gradient needs "
                                   "static spatial dimensions");
      count *= type.getDim(i).getExtent();
      spatial.push_back(i);
      channelAxes.push_back(i - 1);
      batchAndSpatial.push_back(i);
    }
    DType dtype = dY->getType().getDType();
    auto meanOver = [&](Value *v) -> llvm::Expected<Value *> {
      auto sum = b.onnx("ReduceSum", {v, b.int64s(spatial)},
                        {{"keepdims", Attribute::getInt(1)}});
      if (!sum)
        return sum.takeError();
      return b.mul(*sum, b.scalar(dtype, 1.0 / double(count)));
    };
    auto sumOver = [&](Value *v) {
      return b.onnx("ReduceSum", {v, b.int64s(batchAndSpatial)},
                    {{"keepdims", Attribute::getInt(0)}});
    };
    // Recompute the statistics (the op does not output them).
    auto mean = meanOver(x);
    if (!mean)
      return mean.takeError();
    auto centered = b.sub(x, *mean);
    if (!centered)
      return centered.takeError();
    auto square = b.mul(*centered, *centered);
    if (!square)
      return square.takeError();
    auto variance = meanOver(*square);
    if (!variance)
      return variance.takeError();
    auto shifted =
        b.add(*variance, b.scalar(dtype, node.getFloatAttr("epsilon", 1e-5f)));
    if (!shifted)
      return shifted.takeError();
    auto root = b.onnx("Sqrt", {*shifted});
    if (!root)
      return root.takeError();
    auto invStd = b.onnx("Reciprocal", {*root});
    if (!invStd)
      return invStd.takeError();
    auto normalized = b.mul(*centered, *invStd);
    if (!normalized)
      return normalized.takeError();
    if (request.wanted[0]) {
      auto scaleC =
          b.onnx("Unsqueeze", {node.getOperand(1), b.int64s(channelAxes)});
      if (!scaleC)
        return scaleC.takeError();
      auto g = b.mul(dY, *scaleC);
      if (!g)
        return g.takeError();
      auto meanG = meanOver(*g);
      if (!meanG)
        return meanG.takeError();
      auto gx = b.mul(*g, *normalized);
      if (!gx)
        return gx.takeError();
      auto meanGx = meanOver(*gx);
      if (!meanGx)
        return meanGx.takeError();
      auto projected = b.mul(*normalized, *meanGx);
      if (!projected)
        return projected.takeError();
      auto first = b.sub(*g, *meanG);
      if (!first)
        return first.takeError();
      auto inner = b.sub(*first, *projected);
      if (!inner)
        return inner.takeError();
      if (auto err = assign(grads[0], b.mul(*inner, *invStd)))
        return err;
    }
    if (request.wanted[1]) {
      auto product = b.mul(dY, *normalized);
      if (!product)
        return product.takeError();
      if (auto err = assign(grads[1], sumOver(*product)))
        return err;
    }
    if (request.wanted[2])
      if (auto err = assign(grads[2], sumOver(dY)))
        return err;
    return llvm::Error::success();
  };
  return rule;
}

/// GlobalMaxPool: dY to every element equal to its window's maximum.
GradientRule globalMaxPoolRule() {
  GradientRule rule;
  rule.emit = [](GradientBuilder &b, const GradientRequest &request,
                 Grads grads) -> llvm::Error {
    Value *dY = request.resultGrads[0];
    if (!dY)
      return llvm::Error::success();
    const Node &node = request.node;
    Value *x = node.getOperand(0);
    auto equal = b.onnx("Equal", {x, node.getResult(0)});
    if (!equal)
      return equal.takeError();
    auto selected =
        b.onnx("Where", {*equal, dY, b.scalar(dY->getType().getDType(), 0.0)});
    if (!selected)
      return selected.takeError();
    auto shape = b.shapeOf(x);
    if (!shape)
      return shape.takeError();
    return assign(grads[0], b.onnx("Expand", {*selected, *shape}));
  };
  return rule;
}

} // namespace

void gmopt::registerNnGradients(GradientRuleTable &table) {
  table.add(kOnnxDomain, "GlobalMaxPool", globalMaxPoolRule());
  table.add(kOnnxDomain, "InstanceNormalization", instanceNormRule());
  table.add(kOnnxDomain, "Softmax", softmaxRule(false));
  table.add(kOnnxDomain, "LogSoftmax", softmaxRule(true));
  table.add(kOnnxDomain, "LayerNormalization", layerNormRule(false));
  table.add(kOnnxDomain, "SimplifiedLayerNormalization", layerNormRule(true));
  table.add(kMsDomain, "SimplifiedLayerNormalization", layerNormRule(true));
  table.add(kOnnxDomain, "RMSNormalization", rmsNormRule());
  GradientRule dropout = dropoutRule();
  dropout.trainingRewrite = dropoutTrainingMode;
  table.add(kOnnxDomain, "Dropout", std::move(dropout));
  table.add(kOnnxDomain, "BatchNormalization", batchNormRule());
  table.add(kMsDomain, "BatchNormInternal", batchNormInternalRule());
  table.add(kOnnxDomain, "SoftmaxCrossEntropyLoss", softmaxCrossEntropyRule());
  table.add(kMsDomain, "SoftmaxCrossEntropyLossInternal",
            internalCrossEntropyRule(true));
  table.add(kMsDomain, "SoftmaxCrossEntropy", internalCrossEntropyRule(false));
  table.add(kMsDomain, "BitmaskDropout", bitmaskDropoutRule());
  table.add(kMsDomain, "BiasDropout", biasDropoutRule());
  table.add(kOnnxDomain, "Conv", convRule());
  table.add(kOnnxDomain, "MaxPool", maxPoolRule());
  table.add(kOnnxDomain, "AveragePool", averagePoolRule());
  table.add(kOnnxDomain, "GlobalAveragePool", globalAveragePoolRule());
}
