//===- CrossEntropySpec.cpp - What a fused linear cross entropy means -----===//
//
// Decodes gmopt.FusedLinearCrossEntropy(Grad) attributes and operand shapes
// once (see CrossEntropySpec.h).
//
//===----------------------------------------------------------------------===//

#include "ir/ops/CrossEntropySpec.h"
#include "ir/ops/ShapeInference.h"

#include "ir/IR.h"

#include "llvm/ADT/Twine.h"

#include <limits>
#include <string>

using namespace gmopt;
using namespace gmopt::crossentropy;

namespace {

llvm::Error specError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

llvm::Expected<CrossEntropyAttrs>
CrossEntropyAttrs::fromNode(const Node &node) {
  CrossEntropyAttrs attrs;
  attrs.transW = node.getIntAttr("trans_w", 1) != 0;
  if (node.hasAttr("ignore_index"))
    attrs.ignoreIndex = node.getIntAttr("ignore_index", 0);
  auto reduction = ops::getLossReduction(node);
  if (!reduction)
    return reduction.takeError();
  attrs.reduction = *reduction;
  return attrs;
}

llvm::Expected<CrossEntropySpec>
CrossEntropySpec::get(const Node &node, llvm::ArrayRef<int64_t> h,
                      llvm::ArrayRef<int64_t> w,
                      llvm::ArrayRef<int64_t> labels) {
  auto attrs = CrossEntropyAttrs::fromNode(node);
  if (!attrs)
    return attrs.takeError();
  return get(*attrs, h, w, labels);
}

llvm::Expected<CrossEntropySpec>
CrossEntropySpec::get(const CrossEntropyAttrs &attrs, llvm::ArrayRef<int64_t> h,
                      llvm::ArrayRef<int64_t> w,
                      llvm::ArrayRef<int64_t> labels) {
  CrossEntropySpec spec;
  spec.transW = attrs.transW;
  spec.ignoreIndex = attrs.ignoreIndex;
  spec.reduction = attrs.reduction;
  if (h.size() < 1 || w.size() != 2)
    return specError("h " + ops::shapeString(h) +
                     " must have rank >= 1 and W " + ops::shapeString(w) +
                     " rank 2");
  spec.hidden = h.back();
  // Rows times a tile row (plus the per-row values) must fit int64 for the
  // kernels' scratch: refuse shapes beyond that instead of overflowing.
  constexpr int64_t kMaxRows =
      std::numeric_limits<int64_t>::max() / (kVocabBlock + 8);
  spec.rows = 1;
  for (int64_t extent : h.drop_back())
    if (extent < 0 || __builtin_mul_overflow(spec.rows, extent, &spec.rows) ||
        spec.rows > kMaxRows)
      return specError("h " + ops::shapeString(h) + " has too many rows");
  int64_t wHidden = spec.transW ? w[1] : w[0];
  spec.vocab = spec.transW ? w[0] : w[1];
  if (wHidden != spec.hidden)
    return specError("W " + ops::shapeString(w) + " does not fit h " +
                     ops::shapeString(h) +
                     (spec.transW ? " (W is [V, D])" : " (W is [D, V])"));
  int64_t labelCount = 1;
  for (int64_t extent : labels)
    if (extent < 0 || __builtin_mul_overflow(labelCount, extent, &labelCount))
      return specError("labels " + ops::shapeString(labels) + " are too many");
  if (labelCount != spec.rows)
    return specError("labels " + ops::shapeString(labels) +
                     " must hold one class per "
                     "row of h " +
                     ops::shapeString(h));
  if (spec.vocab < 1)
    return specError("the vocabulary of W " + ops::shapeString(w) +
                     " is empty");
  return spec;
}

llvm::Expected<CrossEntropySpec> CrossEntropySpec::get(const Node &node) {
  bool grad = node.getOpType() == kFusedLinearCrossEntropyGradOp;
  unsigned first = grad ? kGradH : kH;
  const Value *operands[3];
  for (unsigned i = 0; i != 3; ++i) {
    operands[i] = first + i < node.getNumOperands() ? node.getOperand(first + i)
                                                    : nullptr;
    if (!operands[i] || !operands[i]->getType().hasStaticShape())
      return specError("h, W and labels must be present with static shapes");
  }
  return get(node, operands[0]->getType().getStaticShape(),
             operands[1]->getType().getStaticShape(),
             operands[2]->getType().getStaticShape());
}
