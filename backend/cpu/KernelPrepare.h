//===- KernelPrepare.h - What the CPU kernels' PrepareFns share -*- C++ -*-===//
//
// Internal to the CPU backend. A kernel family's PrepareFn (KernelSupport.h)
// decodes its node once; a check it moves from launch to prepare keeps the
// message the launch gave, so prepareError words an error as
// KernelCall::error does. operandRank reads the rank a node's bound type
// gives an operand, for the decodes (an axis) that depend on it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_KERNELPREPARE_H
#define GMOPT_BACKEND_CPU_KERNELPREPARE_H

#include "backend/cpu/KernelSupport.h"

#include <optional>

namespace gmopt {
namespace cpu {

/// An error "OP: MESSAGE (node NAME)" for \p node, worded as
/// KernelCall::error words a launch's.
inline llvm::Error prepareError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 node.getOp().str() + ": " + message.str() +
                                     " (node " + node.describe() + ")");
}

/// The rank of operand \p index of \p node, or nullopt when the operand is
/// absent or its type unranked.
inline std::optional<unsigned> operandRank(const Node &node, unsigned index) {
  const Value *value =
      index < node.getNumOperands() ? node.getOperand(index) : nullptr;
  if (!value || !value->getType().hasRank())
    return std::nullopt;
  return value->getType().getRank();
}

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_KERNELPREPARE_H
