//===- AmpPolicy.h - Which nodes of a step run in low precision -*- C++ -*-===//
//
// The analysis the `amp` pass stands on: given a training module and a
// low-precision type (f16 or bf16), it decides for every node whether it
// computes in that type, from the registry's AMP class (ir/OpRegistry.h,
// AmpClass, the one table of the policy) and from what its operands will
// be, visiting nodes in graph order:
//
//   * Allow (MatMul, Gemm, FusedMatMul, Conv and their gradients): low
//     whenever an AMP operand is floating point.
//   * Follow (elementwise, activations, views, Dropout): low when each of
//     its floating-point AMP operands will be available in low precision —
//     a result of a low node, a value already in the low type, a
//     parameter (cast once per step) or a constant (narrowed once) — and
//     at least one of them is an activation (a result of a low node or a
//     low-typed value): a Follow node over weights and constants alone,
//     such as Transpose(W), stays fp32. Otherwise fp32, the widest operand
//     winning, as torch.autocast promotes.
//   * Fp32Compute (softmax, layer/RMS norm and their gradients): decided
//     like Follow — their kernels compute in fp32 whatever they store —
//     unless strictFp32 makes them Deny.
//   * A view (Reshape, Squeeze, ...: ir/Plan.h getViewSource) of an fp32
//     activation that an earlier low node already reads in low precision
//     is low when every reader of the view is an Allow op: it reshapes the
//     cast the products read anyway, and the fp32 value need not stay
//     alive for it (ONNX Runtime's MatMul gradient reshapes the forward
//     input to 2D for its weight-gradient Gemm).
//   * Deny (batch norm, reductions, Exp/Log/Pow, log-softmax, losses and
//     their gradients) and None (shapes, indices, casts, accumulators, the
//     optimizer, side effects, unknown ops): never low; their operands
//     keep their fp32 types.
//
// A low node's floating-point fp32 results become low; everything that
// reads them and is not low itself reads them cast back to fp32. Only
// operands the schema marks (OpSchema::ampOperands; Dropout's ratio is
// not one) follow the decision.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_PASSES_AMP_AMPPOLICY_H
#define GMOPT_PASSES_AMP_AMPPOLICY_H

#include "ir/Types.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>

namespace gmopt {

class Module;
class Node;
class OpSchema;
class Value;

/// Why a node computes in the precision it does.
enum class AmpReason : uint8_t {
  /// Allow op with a floating-point operand.
  AllowOp,
  /// Follow op whose operands are all available in low precision.
  FollowsLowInputs,
  /// Follow op with an fp32 activation operand (the widest wins).
  FollowsFp32Input,
  /// Follow op over parameters and constants only.
  NoLowActivation,
  /// A view, read only by Allow ops, of an fp32 value low nodes read cast.
  ViewOfCast,
  /// Deny op: fp32 by policy.
  DenyOp,
  /// No floating-point AMP operand, or an op whose types are fixed (AMP
  /// class None), or an op the registry does not know.
  NotFloat,
};

/// The decision for a whole module.
class AmpPolicy {
public:
  /// Decides every node of \p module for low-precision type \p low (F16 or
  /// BF16). With \p strictFp32, Fp32Compute ops are Deny ops.
  static AmpPolicy compute(const Module &module, DType low,
                           bool strictFp32 = false);

  /// The low-precision type.
  DType getLowType() const { return low; }
  /// True if \p node computes in the low type.
  bool isLow(const Node *node) const { return lowNodes.count(node); }
  /// Why \p node computes as it does.
  AmpReason getReason(const Node *node) const;
  /// True if \p value will hold the low type after the rewrite (a low
  /// node's floating-point result, or a value already low).
  bool isLowValue(const Value *value) const { return lowValues.count(value); }
  /// Number of nodes that compute in the low type.
  size_t getNumLowNodes() const { return lowNodes.size(); }
  /// Per op type (`domain::Op`, plain `Op` for the ONNX domain): nodes low
  /// and nodes kept in fp32 among the floating-point ones.
  const llvm::StringMap<std::pair<uint64_t, uint64_t>> &getCountsByOp() const {
    return countsByOp;
  }

  /// True if operand \p index of a node with schema \p schema (null when
  /// unknown) is one whose precision follows the node's: an AMP operand of
  /// a floating-point type.
  static bool followsPrecision(const OpSchema *schema, unsigned index,
                               const Value *operand);

private:
  DType low = DType::F16;
  llvm::DenseSet<const Node *> lowNodes;
  llvm::DenseSet<const Value *> lowValues;
  llvm::DenseMap<const Node *, AmpReason> reasons;
  llvm::StringMap<std::pair<uint64_t, uint64_t>> countsByOp;
};

/// True if \p type is f16 or bf16.
inline bool isLowPrecisionFloat(DType type) {
  return type == DType::F16 || type == DType::BF16;
}

} // namespace gmopt

#endif // GMOPT_PASSES_AMP_AMPPOLICY_H
