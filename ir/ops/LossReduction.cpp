//===- LossReduction.cpp - How a loss combines its samples ----------------===//
//
// getLossReduction of LossReduction.h.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/LossReduction.h"
#include "ir/IR.h"

using namespace gmopt;
using namespace gmopt::ops;

llvm::Expected<LossReduction> ops::getLossReduction(const Node &node) {
  llvm::StringRef name = node.getStringAttr("reduction", "mean");
  if (name == "none")
    return LossReduction::None;
  if (name == "sum")
    return LossReduction::Sum;
  if (name == "mean")
    return LossReduction::Mean;
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "reduction must be none, sum or mean, got '" +
                                     name + "'");
}
