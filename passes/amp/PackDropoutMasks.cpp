//===- PackDropoutMasks.cpp - Dropout masks saved as bits ------------------===//

#include "passes/amp/PackDropoutMasks.h"
#include "passes/recompute/SavedActivations.h"

#include "ir/Module.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

using namespace gmopt;

namespace {

/// The DropoutGrad nodes reading \p mask as their mask operand, or nothing
/// when any other use (a graph output, another op, another operand) reads
/// it.
std::optional<llvm::SmallVector<Node *, 2>> maskReaders(const Value &mask) {
  llvm::SmallVector<Node *, 2> readers;
  for (const OpOperand &use : mask.getUses()) {
    if (use.isGraphOutput())
      return std::nullopt;
    Node *user = use.getOwner();
    if (!user->isa(kMsDomain, "DropoutGrad") || use.getIndex() != 1)
      return std::nullopt;
    if (!llvm::is_contained(readers, user))
      readers.push_back(user);
  }
  return readers;
}

/// The bytes of \p value, or 0 when its shape is not static.
uint64_t bytesOf(const Value *value) {
  const TensorType &type = value->getType();
  return type.hasStaticShape() ? type.getSizeInBytes() : 0;
}

} // namespace

llvm::Expected<bool>
PackDropoutMask::matchAndRewrite(Node &node, PatternRewriter &rewriter) const {
  if (!node.isa(kOnnxDomain, "Dropout") || node.getNumResults() != 2 ||
      node.getNumOperands() < 1 || node.getNumOperands() > 3 ||
      node.getAttr("ratio"))
    return false;
  Value *data = node.getResult(0);
  Value *mask = node.getResult(1);
  if (!mask || mask->useEmpty() || rewriter.isInSignature(mask))
    return false;
  auto readers = maskReaders(*mask);
  if (!readers)
    return false;

  Builder &builder = rewriter.getBuilder();
  llvm::SmallVector<Value *, 4> operands = node.getOperands();
  auto packed = rewriter.createInferredNode(
      OpName{kMsDomain.str(), "BitmaskDropout"}, operands, 2, node.getAttrs(),
      node.getName().str());
  if (!packed)
    return packed.takeError();
  Node *bitmask = *packed;
  bitmask->setStreamId(node.getStreamId());
  Value *bits = bitmask->getResult(1);
  bits->setName(mask->getName().str() + "_bits");

  for (Node *grad : *readers) {
    builder.setInsertionPoint(grad);
    builder.setPhase(grad->getPhase());
    llvm::SmallVector<Value *, 4> gradOperands = grad->getOperands();
    gradOperands[1] = bits;
    auto replacement = rewriter.createInferredNode(
        OpName{kMsDomain.str(), "BitmaskDropoutGrad"}, gradOperands, 1,
        grad->getAttrs(), grad->getName().str());
    if (!replacement)
      return replacement.takeError();
    rewriter.replaceAllUsesWith(grad->getResult(0),
                                (*replacement)->getResult(0));
    std::string name = grad->getResult(0)->getName().str();
    rewriter.eraseNode(grad);
    (*replacement)->getResult(0)->setName(name);
  }
  if (data) {
    std::string name = data->getName().str();
    rewriter.replaceAllUsesWith(data, bitmask->getResult(0));
    rewriter.eraseNode(&node);
    bitmask->getResult(0)->setName(name);
  } else {
    rewriter.eraseNode(&node);
  }
  return true;
}

PackDropoutMasksPass::PackDropoutMasksPass() {
  declareStatistic("masks-packed", "Dropout masks stored as bitmasks");
  declareStatistic("mask-bytes-before",
                   "Bytes of the Dropout masks before (bool)");
  declareStatistic(
      "mask-bytes-after",
      "Bytes of the dropout masks after (bitmasks and the bool masks left)");
  declareStatistic("saved-bytes-before",
                   "Bytes of forward values the backward pass reads, before");
  declareStatistic("saved-bytes-after",
                   "Bytes of forward values the backward pass reads, after");
}

llvm::Expected<bool> PackDropoutMasksPass::run(Module &module,
                                               PassContext &context) {
  std::optional<uint64_t> savedBefore = savedActivationBytes(module);
  uint64_t boolBytes = 0;
  for (const Node &node : module.getGraph().getNodes())
    if (node.isa(kOnnxDomain, "Dropout") && node.getNumResults() == 2 &&
        node.getResult(1))
      boolBytes += bytesOf(node.getResult(1));

  PackDropoutMask pattern;
  GreedyRewriteConfig config;
  auto result = applyPatternsGreedily(module, {&pattern}, config);
  if (!result)
    return result.takeError();

  uint64_t packed = result->rewritesByPattern.lookup(kPackDropoutMaskPattern);
  uint64_t bitBytes = 0, unpackedBytes = 0;
  for (const Node &node : module.getGraph().getNodes()) {
    if (node.isa(kMsDomain, "BitmaskDropout") && node.getNumResults() == 2 &&
        node.getResult(1))
      bitBytes += bytesOf(node.getResult(1));
    if (node.isa(kOnnxDomain, "Dropout") && node.getNumResults() == 2 &&
        node.getResult(1))
      unpackedBytes += bytesOf(node.getResult(1));
  }
  addStatistic(context, "masks-packed", packed);
  addStatistic(context, "mask-bytes-before", boolBytes);
  addStatistic(context, "mask-bytes-after", bitBytes + unpackedBytes);
  if (savedBefore)
    if (std::optional<uint64_t> savedAfter = savedActivationBytes(module)) {
      addStatistic(context, "saved-bytes-before", *savedBefore);
      addStatistic(context, "saved-bytes-after", *savedAfter);
    }
  return result->changed;
}
