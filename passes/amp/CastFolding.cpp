//===- CastFolding.cpp - Peephole patterns over Cast chains ---------------===//

#include "passes/amp/CastFolding.h"

#include "ir/IR.h"

#include <optional>

using namespace gmopt;

namespace {

/// The target type of a standard Cast node with one operand and result.
std::optional<DType> castTarget(const Node &node) {
  if (!node.isa(kOnnxDomain, "Cast") || node.getNumOperands() != 1 ||
      node.getNumResults() != 1 || !node.getOperand(0) || !node.getResult(0))
    return std::nullopt;
  const Attribute *to = node.getAttr("to");
  if (!to || to->getKind() != Attribute::Kind::Int)
    return std::nullopt;
  std::optional<DType> type = dtypeFromOnnx(to->getInt());
  if (!type || *type == DType::Undefined)
    return std::nullopt;
  return type;
}

/// Rank of a float type by the values it holds exactly: each holds every
/// value of the ones below it in the same chain.
int floatRank(DType type) {
  switch (type) {
  case DType::F16:
  case DType::BF16:
    return 1;
  case DType::F32:
    return 2;
  case DType::F64:
    return 3;
  default:
    return 0;
  }
}

/// Bits of a signed integer type, or 0.
unsigned signedBits(DType type) {
  switch (type) {
  case DType::I8:
    return 8;
  case DType::I16:
    return 16;
  case DType::I32:
    return 32;
  case DType::I64:
    return 64;
  default:
    return 0;
  }
}

/// Bits of an unsigned integer type, or 0.
unsigned unsignedBits(DType type) {
  switch (type) {
  case DType::U8:
    return 8;
  case DType::U16:
    return 16;
  case DType::U32:
    return 32;
  case DType::U64:
    return 64;
  default:
    return 0;
  }
}

} // namespace

bool gmopt::isExactCast(DType from, DType to) {
  if (from == to)
    return from != DType::Undefined;
  if (int a = floatRank(from), b = floatRank(to); a && b)
    // f16 and bf16 hold different values, so neither holds the other.
    return a < b;
  if (unsigned a = signedBits(from), b = signedBits(to); a && b)
    return a < b;
  if (unsigned a = unsignedBits(from), b = unsignedBits(to); a && b)
    return a < b;
  if (unsigned a = unsignedBits(from), b = signedBits(to); a && b)
    return a < b;
  return false;
}

llvm::Expected<bool>
FoldCastPair::matchAndRewrite(Node &node, PatternRewriter &rewriter) const {
  if (!castTarget(node))
    return false;
  Node *inner = node.getOperand(0)->getDefiningNode();
  if (!inner || !castTarget(*inner))
    return false;
  Value *source = inner->getOperand(0);
  DType sourceType = source->getType().getDType();
  if (!isExactCast(sourceType, *castTarget(*inner)))
    return false;
  node.setOperand(0, source);
  rewriter.notifyNodeChanged(&node);
  return true;
}

llvm::Expected<bool>
RemoveIdentityCast::matchAndRewrite(Node &node,
                                    PatternRewriter &rewriter) const {
  std::optional<DType> target = castTarget(node);
  if (!target)
    return false;
  Value *input = node.getOperand(0);
  Value *output = node.getResult(0);
  if (input->getType().getDType() != *target)
    return false;
  return rewriter.forwardOperand(node, input, output);
}
