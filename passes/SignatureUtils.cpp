//===- SignatureUtils.cpp - Keeping the training signature valid ----------===//
//
// Thin helpers for passes over TrainingSignature's own queries and edits,
// which know every role (including optimizer state and step slots).
//
//===----------------------------------------------------------------------===//

#include "passes/SignatureUtils.h"

#include "ir/Module.h"

using namespace gmopt;

bool gmopt::replaceValueInSignature(TrainingSignature &signature,
                                    const Value *from, Value *to) {
  return signature.replaceValue(from, to);
}

bool gmopt::isReferencedBySignature(const TrainingSignature &signature,
                                    const Value *value) {
  return signature.references(value);
}

bool gmopt::isReferencedBySignature(const TrainingSignature &signature,
                                    const Node *node) {
  return signature.references(node);
}
