//===- NormRows.h - What a row normalization node means ---------*- C++ -*-===//
//
// The one reading of the normalizations over the trailing dimensions of X
// - ai.onnx LayerNormalization and RMSNormalization, ONNX Runtime's
// SimplifiedLayerNormalization (RMS norm) and the gradients ONNX Runtime
// emits for them (LayerNormalizationGrad, SimplifiedLayerNormalizationGrad,
// InvertibleLayerNormalizationGrad) - that shape inference, the gradient
// rules, the CPU kernels and the CUDA launches share: which statistics the
// op subtracts (NormKind), and where the `axis` attribute splits X into
// rows (one statistic each) of cols normalized elements (NormRows).
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_NORMROWS_H
#define GMOPT_IR_OPS_NORMROWS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>

namespace gmopt {

class Node;

namespace norm {

/// What a row normalization divides by.
enum class NormKind {
  /// LayerNormalization: (x - mean) / sqrt(variance + epsilon), then scale
  /// and bias; its statistics are the mean and the inverse deviation.
  Layer,
  /// RMS norm (RMSNormalization, SimplifiedLayerNormalization): x /
  /// sqrt(mean(x^2) + epsilon), then scale, no bias; its one statistic is
  /// the inverse root mean square.
  Rms,
};

/// The kind of a forward norm or norm gradient node: Rms for
/// RMSNormalization and the SimplifiedLayerNormalization family, Layer for
/// the others.
NormKind getNormKind(const Node &node);

/// X seen as [rows, cols]: dimensions [0, axis) index the rows, dimensions
/// [axis, rank) are the cols elements normalized together.
struct NormRows {
  /// The first normalized dimension, in [0, rank).
  unsigned axis = 0;
  /// Product of the dimensions before axis: one statistic per row.
  int64_t rows = 1;
  /// Product of the dimensions from axis on: the elements of one row.
  int64_t cols = 1;
};

/// The node's `axis` attribute (default -1), as written.
int64_t getNormAxisAttr(const Node &node);

/// The node's `axis` attribute (default -1) normalized against an X of rank
/// \p rank: ONNX allows [-rank, rank), so a rank-0 X has no valid axis.
/// Errors are plain messages, without the node's name: callers add it.
llvm::Expected<unsigned> getNormAxis(const Node &node, int64_t rank);

/// getNormAxis of the decoded `axis` \p axisAttr (getNormAxisAttr).
llvm::Expected<unsigned> getNormAxis(int64_t axisAttr, int64_t rank);

/// The rows and cols of \p node over X's static shape \p shape (errors as
/// getNormAxis, and for element counts that overflow int64).
llvm::Expected<NormRows> getNormRows(const Node &node,
                                     llvm::ArrayRef<int64_t> shape);

/// getNormRows of the decoded `axis` \p axisAttr (getNormAxisAttr): a pure
/// function of it and \p shape, which a kernel that decoded its node once
/// evaluates on each X.
llvm::Expected<NormRows> getNormRows(int64_t axisAttr,
                                     llvm::ArrayRef<int64_t> shape);

/// How a scale or bias of shape \p param, broadcast to the normalized shape
/// \p normalized, repeats along a row: when \p param (leading ones
/// dropped) is a suffix of \p normalized, column j of a row reads element
/// j % period, with period the suffix's element count (1 for a single
/// value); nullopt when it is not, and a kernel must broadcast it in full.
std::optional<int64_t> getParamPeriod(llvm::ArrayRef<int64_t> normalized,
                                      llvm::ArrayRef<int64_t> param);

} // namespace norm
} // namespace gmopt

#endif // GMOPT_IR_OPS_NORMROWS_H
