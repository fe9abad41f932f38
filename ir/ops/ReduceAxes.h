//===- ReduceAxes.h - What a reduction reduces ------------------*- C++ -*-===//
//
// The one reading of the Reduce* family's axes (ReduceSum and its siblings,
// com.microsoft ReduceSumTraining; ArgMax / ArgMin's one axis too): the `axes`
// attribute before opset 18 (13 for ReduceSum) or operand 1 from then on,
// keepdims, noop_with_empty_axes, negative axes counted from the end, and an
// empty list reducing every dimension unless noop_with_empty_axes. ReduceSpec
// is what the node's attributes say, decoded once (a kernel's prepare);
// ReduceAxes is that spec resolved against an input rank and the axes'
// values (the attribute's, a constant operand's, or a tensor's at run
// time). Shape inference, the gradient rules, the CPU kernels and the CUDA
// launches all read it.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_REDUCEAXES_H
#define GMOPT_IR_OPS_REDUCEAXES_H

#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace gmopt {

class Node;

namespace ops {

/// A Reduce* node resolved against an input rank.
struct ReduceAxes {
  /// The reduced axes, normalized and sorted (every axis when the list was
  /// empty without noop_with_empty_axes; none with it).
  llvm::SmallVector<unsigned, 6> axes;
  /// Per input dimension: whether it is reduced.
  llvm::SmallVector<bool, 6> reduced;
  /// Whether reduced dimensions stay as 1s.
  bool keepDims = true;

  /// The result's dimensions for an input of \p input (of any dimension
  /// type), with \p one for a kept reduced dimension.
  template <typename DimT>
  llvm::SmallVector<DimT, 6> resultDims(llvm::ArrayRef<DimT> input,
                                        const DimT &one) const {
    llvm::SmallVector<DimT, 6> out;
    for (size_t d = 0; d != input.size(); ++d) {
      if (!reduced[d])
        out.push_back(input[d]);
      else if (keepDims)
        out.push_back(one);
    }
    return out;
  }
  /// The result shape for a static \p input.
  StaticShape resultShape(llvm::ArrayRef<int64_t> input) const {
    return resultDims<int64_t>(input, 1);
  }
  /// \p input's shape with every reduced dimension as 1 (the keepdims
  /// form a gradient broadcasts back from).
  StaticShape keptShape(llvm::ArrayRef<int64_t> input) const;
  /// The number of input elements each result element reduces.
  int64_t reducedCount(llvm::ArrayRef<int64_t> input) const;
};

/// What a Reduce* node's attributes say, decoded once.
struct ReduceSpec {
  bool keepDims = true;
  bool noopWithEmptyAxes = false;
  /// The axes are operand 1 (present on the node); otherwise attrAxes.
  bool axesFromOperand = false;
  /// The `axes` attribute (empty when absent).
  std::vector<int64_t> attrAxes;

  /// The spec resolved against an input of rank \p rank, with
  /// \p operandAxes the axes operand's values when axesFromOperand.
  /// Errors: "axes A is out of range for rank R", "axes contains axis A
  /// twice".
  llvm::Expected<ReduceAxes> resolve(int64_t rank,
                                     llvm::ArrayRef<int64_t> operandAxes) const;
  /// The spec resolved with the attribute's axes (axesFromOperand false).
  llvm::Expected<ReduceAxes> resolve(int64_t rank) const {
    return resolve(rank, {});
  }
};

/// What an ArgMax / ArgMin node's attributes say, decoded once.
struct ArgReduceSpec {
  int64_t axis = 0;
  bool keepDims = true;
  bool selectLastIndex = false;

  /// The spec resolved against an input of rank \p rank: the one reduced
  /// axis. A rank-0 input is one element, as the kernels read it (axis 0
  /// or -1, nothing reduced). Error: "axis A is out of range for rank R".
  llvm::Expected<ReduceAxes> resolve(int64_t rank) const;
};

/// The spec of ArgMax / ArgMin \p node.
ArgReduceSpec getArgReduceSpec(const Node &node);

/// The spec of Reduce* (or ReduceSumTraining) \p node.
ReduceSpec getReduceSpec(const Node &node);

/// The values of \p node's axes when the node fixes them: the attribute's,
/// or a constant axes operand's (an initializer or a Constant); nullopt
/// when the operand is only known at run time.
std::optional<std::vector<int64_t>> getStaticReduceAxes(const Node &node,
                                                        const ReduceSpec &spec);

/// \p node's ReduceAxes against an input of rank \p rank when its axes are
/// static (getStaticReduceAxes); nullopt inside the Expected otherwise.
llvm::Expected<std::optional<ReduceAxes>>
resolveStaticReduceAxes(const Node &node, const ReduceSpec &spec, int64_t rank);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_REDUCEAXES_H
