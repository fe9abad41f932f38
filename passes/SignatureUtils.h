//===- SignatureUtils.h - Keeping the training signature valid --*- C++ -*-===//
//
// The TrainingSignature points at Values and Nodes of the graph (the loss,
// each parameter's gradient, accumulation buffers and nodes). A pass that
// replaces or erases one of them must update the signature in the same
// step, or the verifier rejects the module. These helpers do that and let
// dead-code elimination treat everything the signature names as live.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_SIGNATUREUTILS_H
#define GMOPT_PASSES_SIGNATUREUTILS_H

namespace gmopt {

class Module;
class Node;
class Value;
class TrainingSignature;

/// Points every reference of \p signature to \p from at \p to instead.
/// Returns whether any reference changed.
bool replaceValueInSignature(TrainingSignature &signature, const Value *from,
                             Value *to);
/// True if \p signature names \p value in any role.
bool isReferencedBySignature(const TrainingSignature &signature,
                             const Value *value);
/// True if \p node is the accumulation node of some parameter.
bool isReferencedBySignature(const TrainingSignature &signature,
                             const Node *node);

} // namespace gmopt

#endif // GMOPT_PASSES_SIGNATUREUTILS_H
