//===- CudaLossDispatch.cpp - The CUDA kernel table's losses --------------===//
//
// The entries of ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss,
// ONNX Runtime's com.microsoft SoftmaxCrossEntropyLossInternal,
// NegativeLogLikelihoodLossInternal(2), SoftmaxCrossEntropyLossGrad and
// SoftmaxCrossEntropyLossInternalGrad, and the older dense-label
// SoftmaxCrossEntropy / SoftmaxCrossEntropyGrad (LossKernels.cu). Their
// operands follow the CPU kernels (backend/cpu/LossKernels.cpp): scores [N,
// C, D...] against int32 / int64 labels [N, D...], optional weights of C
// elements, ignore_index as an attribute or, for the Internal variants, as
// an operand that must be a constant here. Every float tensor may be f32,
// f16 or bf16 on its own (the arithmetic runs in fp32 and double, as the
// CPU backend's staging does); float64 losses stay on the CPU backend.
// Preparing a node decodes it once into a LossPlan (refusing, naming the
// node, every shape or type the kernels cannot run); a launch reads it.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/LossKernels.h"

#include <optional>
#include <tuple>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

//===----------------------------------------------------------------------===//
// Operands
//===----------------------------------------------------------------------===//

/// The loss element type of \p dtype, if the kernels read it.
std::optional<LossFloat> lossFloatOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return LossFloat::F32;
  case DType::F16:
    return LossFloat::F16;
  case DType::BF16:
    return LossFloat::BF16;
  default:
    return std::nullopt;
  }
}

/// Checks that \p value, when present, is an f32, f16 or bf16 tensor.
llvm::Error checkLossFloat(const Node &node, const Value *value,
                           llvm::StringRef what) {
  if (!value || lossFloatOf(value->getType().getDType()))
    return llvm::Error::success();
  return nodeError(node, what + " has element type " +
                             dtypeName(value->getType().getDType()) +
                             ", not f32, f16 or bf16 (float64 losses run on "
                             "the CPU backend)");
}

const Value *operandOf(const Node &node, unsigned index) {
  return index < node.getNumOperands() ? node.getOperand(index) : nullptr;
}
const Value *resultOf(const Node &node, unsigned index) {
  return index < node.getNumResults() ? node.getResult(index) : nullptr;
}

/// A loss node decoded once: the kernel parameters of its kind and each
/// operand's and result's loss element type.
struct LossPlan {
  /// Label-indexed losses.
  LabelLossParams params = {};
  /// Dense cross entropy: rows and classes.
  int64_t rows = 0, classes = 0;
  LossReduction reduction = LossReduction::Mean;
  /// The Internal gradient's bias operand (5).
  bool internal = false;
  /// Per operand / result: its loss element type, none where absent (or
  /// not a float, as labels).
  llvm::SmallVector<std::optional<LossFloat>, 6> in, out;
};

/// \p plan with the element types of \p node's operands and results.
LossPlan withTypes(const Node &node, LossPlan plan) {
  auto typeOf = [](const Value *value) -> std::optional<LossFloat> {
    if (!value)
      return std::nullopt;
    return lossFloatOf(value->getType().getDType());
  };
  for (const Value *value : node.getOperands())
    plan.in.push_back(typeOf(value));
  for (const Value *value : node.getResults())
    plan.out.push_back(typeOf(value));
  return plan;
}

/// Operand \p index as a loss tensor (absent: null data).
LossTensor lossIn(const CudaCall &call, const LossPlan &plan, unsigned index) {
  if (index >= plan.in.size() || !plan.in[index])
    return LossTensor{};
  return LossTensor{call.inPtr(index), *plan.in[index]};
}

/// Result \p index as a loss output (absent: null data).
LossOutput lossOut(const CudaCall &call, const LossPlan &plan, unsigned index) {
  if (index >= plan.out.size() || !plan.out[index])
    return LossOutput{};
  return LossOutput{call.outPtr(index), *plan.out[index]};
}

/// The `reduction` of loss \p node (ops::getLossReduction).
llvm::Expected<LossReduction> reductionOf(const Node &node) {
  auto reduction = ops::getLossReduction(node);
  if (!reduction)
    return nodeError(node, llvm::toString(reduction.takeError()));
  return *reduction;
}

/// Checks that \p value has \p elements elements, naming it \p what.
llvm::Error checkElements(const Node &node, const Value *value,
                          int64_t elements, llvm::StringRef what) {
  if (!value ||
      static_cast<int64_t>(value->getType().getNumElements()) == elements)
    return llvm::Error::success();
  return nodeError(node, what + " has " +
                             llvm::Twine(value->getType().getNumElements()) +
                             " elements, not " + llvm::Twine(elements));
}

/// Checks that \p value has \p shape, that of \p owner, naming it \p what.
llvm::Error checkShape(const Node &node, const Value *value,
                       llvm::ArrayRef<int64_t> shape, llvm::StringRef what,
                       llvm::StringRef owner) {
  if (!value || llvm::ArrayRef<int64_t>(shapeOf(value)) == shape)
    return llvm::Error::success();
  return nodeError(node, what + " must have the shape of " + owner);
}

//===----------------------------------------------------------------------===//
// Label-indexed losses
//===----------------------------------------------------------------------===//

/// Where a label-indexed loss keeps its operands.
struct LabelLossLayout {
  /// Scores (forward) or log_prob (gradient), labels and weights.
  unsigned scores, labels, weights;
  /// The Internal variants' ignore_index operand.
  std::optional<unsigned> ignoreIndex;
};

bool isInternalLoss(const Node &node) {
  return node.getOpType().contains("Internal");
}

LabelLossLayout forwardLayout(const Node &node) {
  return {0, 1, 2,
          isInternalLoss(node) ? std::optional<unsigned>(3) : std::nullopt};
}

LabelLossLayout gradientLayout(const Node &node) {
  return {1, 2, 3,
          isInternalLoss(node) ? std::optional<unsigned>(4) : std::nullopt};
}

/// The geometry, labels and reduction of a label-indexed loss node; checks
/// the scores, labels, weights and ignore_index operands.
llvm::Expected<LabelLossParams> labelLossParams(const Node &node,
                                                const LabelLossLayout &layout) {
  LabelLossParams p;
  const Value *scoresValue = operandOf(node, layout.scores);
  const Value *labelsValue = operandOf(node, layout.labels);
  if (!scoresValue || !labelsValue)
    return nodeError(node, "scores and labels are required");
  Shape scores = shapeOf(scoresValue), labels = shapeOf(labelsValue);
  llvm::ArrayRef<int64_t> s(scores), l(labels);
  if (s.size() < 2 || l.size() + 1 != s.size() || l[0] != s[0] ||
      l.drop_front() != s.drop_front(2))
    return nodeError(node, "scores and labels do not match ([N,C,D...] "
                           "against [N,D...])");
  p.batch = s[0];
  p.rule.classes = s[1];
  p.inner = product(s.drop_front(2));
  auto reduction = reductionOf(node);
  if (!reduction)
    return reduction.takeError();
  p.reduction = *reduction;
  DType labelType = labelsValue->getType().getDType();
  if (labelType != DType::I64 && labelType != DType::I32)
    return nodeError(node, "labels must be int64 or int32");
  p.labels32 = labelType == DType::I32;
  if (const Value *weights = operandOf(node, layout.weights)) {
    if (weights->getType().getRank() != 1 ||
        weights->getType().getStaticShape()[0] != p.rule.classes)
      return nodeError(node, "weights must be a vector of C = " +
                                 llvm::Twine(p.rule.classes) + " elements");
    if (llvm::Error err = checkLossFloat(node, weights, "weights"))
      return err;
  }
  if (llvm::Error err = checkLossFloat(node, scoresValue,
                                       layout.scores ? "log_prob" : "scores"))
    return err;
  if (layout.ignoreIndex && operandOf(node, *layout.ignoreIndex)) {
    auto value = constantInts(node, *layout.ignoreIndex, "ignore_index");
    if (!value)
      return value.takeError();
    if (value->size() != 1)
      return nodeError(node, "ignore_index must be a scalar");
    p.rule.hasIgnoreIndex = true;
    p.rule.ignoreIndex = value->front();
  } else if (node.hasAttr("ignore_index")) {
    p.rule.hasIgnoreIndex = true;
    p.rule.ignoreIndex = node.getIntAttr("ignore_index", 0);
  }
  return p;
}

/// Checks the loss output of a label-indexed loss: the labels' shape for
/// reduction none, one element else.
llvm::Error checkLossResult(const Node &node, const LabelLossParams &p,
                            const LabelLossLayout &layout) {
  const Value *loss = resultOf(node, 0);
  if (!loss)
    return nodeError(node, "the loss result is required");
  if (llvm::Error err = checkLossFloat(node, loss, "the loss"))
    return err;
  if (p.reduction == LossReduction::None)
    return checkShape(node, loss, shapeOf(operandOf(node, layout.labels)),
                      "the per-sample loss", "the labels");
  return checkElements(node, loss, 1, "a reduced loss");
}

/// SoftmaxCrossEntropyLoss(scores, labels, weights?) and the Internal
/// variant (+ ignore_index) -> (loss, log_prob?).
llvm::Expected<LossPlan> decodeCrossEntropy(const Node &node) {
  LabelLossLayout layout = forwardLayout(node);
  auto p = labelLossParams(node, layout);
  if (!p)
    return p.takeError();
  if (llvm::Error err = checkLossResult(node, *p, layout))
    return err;
  const Value *logProb = resultOf(node, 1);
  if (llvm::Error err = checkLossFloat(node, logProb, "log_prob"))
    return err;
  if (llvm::Error err = checkShape(node, logProb, shapeOf(node.getOperand(0)),
                                   "log_prob", "the scores"))
    return err;
  LossPlan plan;
  plan.params = *p;
  return withTypes(node, plan);
}

llvm::Error launchCrossEntropy(CudaCall &call, const LossPlan &plan) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchSoftmaxCrossEntropy(
                        lossIn(call, plan, 0), call.inPtr(1),
                        lossIn(call, plan, 2), lossOut(call, plan, 0),
                        lossOut(call, plan, 1), plan.params, call.ctx.stream),
                    "SoftmaxCrossEntropyLoss kernel");
}

/// SoftmaxCrossEntropyLossGrad(dY, log_prob, labels, weights?) and the
/// Internal variant (+ ignore_index, bias) -> dX.
llvm::Expected<LossPlan> decodeCrossEntropyGrad(const Node &node) {
  LabelLossLayout layout = gradientLayout(node);
  auto p = labelLossParams(node, layout);
  if (!p)
    return p.takeError();
  const Value *dY = node.getOperand(0), *dX = resultOf(node, 0);
  if (!dX)
    return nodeError(node, "dX is required");
  Shape logProb = shapeOf(node.getOperand(1));
  const Value *bias = isInternalLoss(node) ? operandOf(node, 5) : nullptr;
  for (auto [value, what] : {std::pair<const Value *, const char *>{dY, "dY"},
                             {dX, "dX"},
                             {bias, "bias"}})
    if (llvm::Error err = checkLossFloat(node, value, what))
      return err;
  if (llvm::Error err = checkShape(node, dX, logProb, "dX", "log_prob"))
    return err;
  if (llvm::Error err = checkShape(node, bias, logProb, "bias", "log_prob"))
    return err;
  llvm::Error err = p->reduction == LossReduction::None
                        ? checkShape(node, dY, shapeOf(node.getOperand(2)),
                                     "dY", "the labels")
                        : checkElements(node, dY, 1, "dY of a reduced loss");
  if (err)
    return err;
  LossPlan plan;
  plan.params = *p;
  plan.internal = isInternalLoss(node);
  return withTypes(node, plan);
}

llvm::Error launchCrossEntropyGrad(CudaCall &call, const LossPlan &plan) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchSoftmaxCrossEntropyGrad(
                        lossIn(call, plan, 0), lossIn(call, plan, 1),
                        call.inPtr(2), lossIn(call, plan, 3),
                        plan.internal ? lossIn(call, plan, 5) : LossTensor{},
                        lossOut(call, plan, 0), plan.params, call.ctx.stream),
                    "SoftmaxCrossEntropyLossGrad kernel");
}

/// NegativeLogLikelihoodLoss(input, target, weight?) and the Internal
/// variants (+ ignore_index) -> loss.
llvm::Expected<LossPlan> decodeNegativeLogLikelihood(const Node &node) {
  LabelLossLayout layout = forwardLayout(node);
  auto p = labelLossParams(node, layout);
  if (!p)
    return p.takeError();
  if (llvm::Error err = checkLossResult(node, *p, layout))
    return err;
  LossPlan plan;
  plan.params = *p;
  return withTypes(node, plan);
}

llvm::Error launchNegativeLogLikelihoodPlan(CudaCall &call,
                                            const LossPlan &plan) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchNegativeLogLikelihood(lossIn(call, plan, 0), call.inPtr(1),
                                  lossIn(call, plan, 2), lossOut(call, plan, 0),
                                  plan.params, call.ctx.stream),
      "NegativeLogLikelihoodLoss kernel");
}

//===----------------------------------------------------------------------===//
// Dense-label cross entropy
//===----------------------------------------------------------------------===//

/// Rows and classes of a dense cross entropy over \p value (classes along
/// the last dimension).
llvm::Expected<std::pair<int64_t, int64_t>> denseRows(const Node &node,
                                                      const Value *value) {
  Shape shape = shapeOf(value);
  if (shape.empty())
    return nodeError(node, "logits must have rank >= 1");
  int64_t classes = shape.back();
  return std::make_pair(classes ? product(shape) / classes : 0, classes);
}

/// SoftmaxCrossEntropy(logits, label) -> (loss, log_prob?).
llvm::Expected<LossPlan> decodeDenseCrossEntropy(const Node &node) {
  const Value *logits = node.getOperand(0), *labels = operandOf(node, 1);
  const Value *loss = resultOf(node, 0), *logProb = resultOf(node, 1);
  if (!labels || !loss)
    return nodeError(node, "label and loss are required");
  for (auto [value, what] :
       {std::pair<const Value *, const char *>{logits, "logits"},
        {labels, "label"},
        {loss, "the loss"},
        {logProb, "log_prob"}})
    if (llvm::Error err = checkLossFloat(node, value, what))
      return err;
  auto rows = denseRows(node, logits);
  if (!rows)
    return rows.takeError();
  Shape shape = shapeOf(logits);
  if (llvm::Error err = checkShape(node, labels, shape, "label", "the logits"))
    return err;
  if (llvm::Error err =
          checkShape(node, logProb, shape, "log_prob", "the logits"))
    return err;
  auto reduction = reductionOf(node);
  if (!reduction)
    return reduction.takeError();
  if (llvm::Error err = checkElements(
          node, loss, *reduction == LossReduction::None ? rows->first : 1,
          "the loss"))
    return err;
  LossPlan plan;
  std::tie(plan.rows, plan.classes) = *rows;
  plan.reduction = *reduction;
  return withTypes(node, plan);
}

llvm::Error launchDenseCrossEntropyPlan(CudaCall &call, const LossPlan &plan) {
  return call.check(
      launchDenseCrossEntropy(lossIn(call, plan, 0), lossIn(call, plan, 1),
                              lossOut(call, plan, 0), lossOut(call, plan, 1),
                              plan.rows, plan.classes, plan.reduction,
                              call.ctx.stream),
      "SoftmaxCrossEntropy kernel");
}

/// SoftmaxCrossEntropyGrad(dY, log_prob, label) -> dX.
llvm::Expected<LossPlan> decodeDenseCrossEntropyGrad(const Node &node) {
  const Value *dY = node.getOperand(0), *logProb = operandOf(node, 1),
              *labels = operandOf(node, 2), *dX = resultOf(node, 0);
  if (!logProb || !labels || !dX)
    return nodeError(node, "log_prob, label and dX are required");
  for (auto [value, what] : {std::pair<const Value *, const char *>{dY, "dY"},
                             {logProb, "log_prob"},
                             {labels, "label"},
                             {dX, "dX"}})
    if (llvm::Error err = checkLossFloat(node, value, what))
      return err;
  auto rows = denseRows(node, logProb);
  if (!rows)
    return rows.takeError();
  Shape shape = shapeOf(logProb);
  if (llvm::Error err = checkShape(node, labels, shape, "label", "log_prob"))
    return err;
  if (llvm::Error err = checkShape(node, dX, shape, "dX", "log_prob"))
    return err;
  auto reduction = reductionOf(node);
  if (!reduction)
    return reduction.takeError();
  if (llvm::Error err = checkElements(
          node, dY, *reduction == LossReduction::None ? rows->first : 1, "dY"))
    return err;
  LossPlan plan;
  std::tie(plan.rows, plan.classes) = *rows;
  plan.reduction = *reduction;
  return withTypes(node, plan);
}

llvm::Error launchDenseCrossEntropyGradPlan(CudaCall &call,
                                            const LossPlan &plan) {
  return call.check(
      launchDenseCrossEntropyGrad(lossIn(call, plan, 0), lossIn(call, plan, 1),
                                  lossIn(call, plan, 2), lossOut(call, plan, 0),
                                  plan.rows, plan.classes, plan.reduction,
                                  call.ctx.stream),
      "SoftmaxCrossEntropyGrad kernel");
}

} // namespace

void dispatch::addLossKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry crossEntropy =
      decodedEntry<LossPlan, decodeCrossEntropy, launchCrossEntropy>();
  addEntry(table, "", "SoftmaxCrossEntropyLoss", crossEntropy);
  addEntry(table, kMsDomain, "SoftmaxCrossEntropyLossInternal", crossEntropy);
  KernelEntry crossEntropyGrad =
      decodedEntry<LossPlan, decodeCrossEntropyGrad, launchCrossEntropyGrad>();
  addEntry(table, kMsDomain, "SoftmaxCrossEntropyLossGrad", crossEntropyGrad);
  addEntry(table, kMsDomain, "SoftmaxCrossEntropyLossInternalGrad",
           crossEntropyGrad);
  KernelEntry negativeLogLikelihood =
      decodedEntry<LossPlan, decodeNegativeLogLikelihood,
                   launchNegativeLogLikelihoodPlan>();
  addEntry(table, "", "NegativeLogLikelihoodLoss", negativeLogLikelihood);
  for (const char *op : {"NegativeLogLikelihoodLossInternal",
                         "NegativeLogLikelihoodLossInternal2"})
    addEntry(table, kMsDomain, op, negativeLogLikelihood);
  addEntry(table, kMsDomain, "SoftmaxCrossEntropy",
           decodedEntry<LossPlan, decodeDenseCrossEntropy,
                        launchDenseCrossEntropyPlan>());
  addEntry(table, kMsDomain, "SoftmaxCrossEntropyGrad",
           decodedEntry<LossPlan, decodeDenseCrossEntropyGrad,
                        launchDenseCrossEntropyGradPlan>());
}
