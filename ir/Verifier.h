//===- Verifier.h - Structural and type checks of a module ------*- C++ -*-===//
//
// The verifier proves the invariants every pass may assume and must keep:
// each operand is defined before its use (node order is a topological
// order; a cycle is reported as such), use lists match operands, every node
// is a registered op with a valid arity and attributes, and result types
// agree with the op registry's inference. It returns the first violation as
// an llvm::Error naming the node.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_VERIFIER_H
#define GMOPT_IR_VERIFIER_H

#include "llvm/Support/Error.h"

namespace gmopt {

class Module;

/// Options controlling how strict verification is.
struct VerifyOptions {
  /// Re-run type inference (which also checks arity and attributes) and
  /// compare with the recorded result types. Off for a caller that has just
  /// inferred every node's types itself (an importer).
  bool checkTypes = true;
  /// Require every dimension to be static (after --dim binding).
  bool requireStaticShapes = false;
};

/// Verifies \p module; returns success or the first violation.
llvm::Error verifyModule(const Module &module, VerifyOptions options = {});

} // namespace gmopt

#endif // GMOPT_IR_VERIFIER_H
