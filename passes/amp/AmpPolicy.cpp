//===- AmpPolicy.cpp - Which nodes of a step run in low precision ---------===//

#include "passes/amp/AmpPolicy.h"

#include "ir/IR.h"
#include "ir/Module.h"
#include "ir/OpRegistry.h"
#include "ir/Plan.h"

#include "llvm/Support/ErrorHandling.h"

using namespace gmopt;

AmpReason AmpPolicy::getReason(const Node *node) const {
  auto it = reasons.find(node);
  return it == reasons.end() ? AmpReason::NotFloat : it->second;
}

bool AmpPolicy::followsPrecision(const OpSchema *schema, unsigned index,
                                 const Value *operand) {
  if (!schema || !operand || !schema->isAmpOperand(index))
    return false;
  DType type = operand->getType().getDType();
  return type == DType::F32 || isLowPrecisionFloat(type);
}

namespace {

/// The op's key in AmpPolicy::getCountsByOp.
std::string opKey(const Node &node) {
  if (node.getDomain().empty())
    return node.getOpType().str();
  return (node.getDomain() + "::" + node.getOpType()).str();
}

} // namespace

AmpPolicy AmpPolicy::compute(const Module &module, DType low, bool strictFp32) {
  assert(isLowPrecisionFloat(low) && "AMP's low type is f16 or bf16");
  AmpPolicy policy;
  policy.low = low;
  const TrainingSignature &signature = module.getSignature();
  const OpRegistry &registry = OpRegistry::instance();

  // Values already in a low type (a graph that holds some) are low.
  auto isLowActivation = [&](const Value *value) {
    return policy.lowValues.count(value) ||
           isLowPrecisionFloat(value->getType().getDType());
  };
  // Cast down once, at no activation cost of its own.
  auto isCastable = [&](const Value *value) {
    return value->isInitializer() || signature.lookup(value);
  };

  // fp32 activations some low node reads (the rewrite casts them once).
  llvm::DenseSet<const Value *> castDown;
  // True if every reader of every result of \p node is an Allow op.
  auto readByProductsOnly = [&](const Node &node) {
    bool any = false;
    for (const Value *result : node.getResults()) {
      if (!result)
        continue;
      for (const OpOperand &use : result->getUses()) {
        const Node *user = use.getOwner();
        const OpSchema *userSchema = user ? registry.lookup(*user) : nullptr;
        if (!userSchema || userSchema->amp != AmpClass::Allow)
          return false;
        any = true;
      }
    }
    return any;
  };

  for (const Node &node : module.getGraph().getNodes()) {
    const OpSchema *schema = registry.lookup(node);
    AmpClass ampClass = schema ? schema->amp : AmpClass::None;
    if (ampClass == AmpClass::Fp32Compute)
      ampClass = strictFp32 ? AmpClass::Deny : AmpClass::Follow;
    bool anyFloat = false, allAvailable = true, anyLowActivation = false;
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      const Value *operand = node.getOperand(i);
      if (!followsPrecision(schema, i, operand))
        continue;
      anyFloat = true;
      if (isLowActivation(operand))
        anyLowActivation = true;
      else if (!isCastable(operand))
        allAvailable = false;
    }
    AmpReason reason = AmpReason::NotFloat;
    if (anyFloat) {
      switch (ampClass) {
      case AmpClass::Allow:
        reason = AmpReason::AllowOp;
        break;
      case AmpClass::Follow:
        reason = !allAvailable      ? AmpReason::FollowsFp32Input
                 : anyLowActivation ? AmpReason::FollowsLowInputs
                                    : AmpReason::NoLowActivation;
        if (reason == AmpReason::FollowsFp32Input && getViewSource(node) &&
            castDown.count(getViewSource(node)) && readByProductsOnly(node))
          reason = AmpReason::ViewOfCast;
        break;
      case AmpClass::Deny:
        reason = AmpReason::DenyOp;
        break;
      case AmpClass::None:
      case AmpClass::Fp32Compute:
        break;
      }
    }
    policy.reasons[&node] = reason;
    bool isLow = reason == AmpReason::AllowOp ||
                 reason == AmpReason::FollowsLowInputs ||
                 reason == AmpReason::ViewOfCast;
    if (reason != AmpReason::NotFloat) {
      auto &counts = policy.countsByOp[opKey(node)];
      (isLow ? counts.first : counts.second) += 1;
    }
    if (!isLow)
      continue;
    policy.lowNodes.insert(&node);
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      const Value *operand = node.getOperand(i);
      if (followsPrecision(schema, i, operand) &&
          operand->getType().getDType() == DType::F32 &&
          !policy.lowValues.count(operand))
        castDown.insert(operand);
    }
    for (const Value *result : node.getResults())
      if (result && result->getType().getDType() == DType::F32)
        policy.lowValues.insert(result);
  }
  return policy;
}
