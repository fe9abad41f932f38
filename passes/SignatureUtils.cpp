//===- SignatureUtils.cpp - Keeping the training signature valid ----------===//
//
// Straight walks over the few fields of TrainingSignature; a signature has
// a handful of entries per parameter, so no index is kept.
//
//===----------------------------------------------------------------------===//

#include "passes/SignatureUtils.h"

#include "ir/Module.h"

using namespace gmopt;

namespace {

bool replaceIn(Value *&slot, const Value *from, Value *to) {
  if (slot != from)
    return false;
  slot = to;
  return true;
}

} // namespace

bool gmopt::replaceValueInSignature(TrainingSignature &signature,
                                    const Value *from, Value *to) {
  if (!from)
    return false;
  bool changed = false;
  for (ParamInfo &param : signature.params) {
    changed |= replaceIn(param.param, from, to);
    changed |= replaceIn(param.grad, from, to);
    changed |= replaceIn(param.accumulator, from, to);
  }
  for (Value *&data : signature.dataInputs)
    changed |= replaceIn(data, from, to);
  changed |= replaceIn(signature.loss, from, to);
  changed |= replaceIn(signature.lossGradSeed, from, to);
  changed |= replaceIn(signature.lazyResetGrad, from, to);
  return changed;
}

void gmopt::replaceAllUsesAndSignature(Module &module, Value *from, Value *to) {
  from->replaceAllUsesWith(to);
  replaceValueInSignature(module.signature, from, to);
}

bool gmopt::isReferencedBySignature(const TrainingSignature &signature,
                                    const Value *value) {
  if (!value)
    return false;
  for (const ParamInfo &param : signature.params)
    if (param.param == value || param.grad == value ||
        param.accumulator == value)
      return true;
  for (const Value *data : signature.dataInputs)
    if (data == value)
      return true;
  return signature.loss == value || signature.lossGradSeed == value ||
         signature.lazyResetGrad == value;
}

bool gmopt::isReferencedBySignature(const TrainingSignature &signature,
                                    const Node *node) {
  if (!node)
    return false;
  for (const ParamInfo &param : signature.params)
    if (param.accumulateNode == node)
      return true;
  return false;
}
