//===- ShapeInference.h - Shared helpers for op type inference --*- C++ -*-===//
//
// Building blocks the per-family schema files use to infer result types:
// dimension arithmetic that keeps symbolic dimensions where an op preserves
// them, multidirectional broadcasting, axis normalization,
// matrix-multiply shapes and the output size of convolutions and pools. All
// errors are llvm::Errors that name the node through its InferenceContext;
// nothing here aborts on malformed user input.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_IR_OPS_SHAPEINFERENCE_H
#define GMOPT_IR_OPS_SHAPEINFERENCE_H

#include "ir/OpRegistry.h"
#include "ir/Types.h"
#include "ir/ops/Axes.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>

namespace gmopt {
namespace ops {

using DimVector = llvm::SmallVector<Dim, 4>;

/// \p a + \p b, or nullopt on int64 overflow (extents come from user input).
std::optional<int64_t> checkedAdd(int64_t a, int64_t b);
/// \p a * \p b, or nullopt on int64 overflow.
std::optional<int64_t> checkedMul(int64_t a, int64_t b);

/// Product of \p dims: static when every dim is static; the symbol itself
/// when exactly one dim is symbolic and the others multiply to 1; unknown
/// otherwise.
Dim multiplyDims(llvm::ArrayRef<Dim> dims);

/// Sum of \p dims, with the same rules as multiplyDims (0 is the neutral
/// element).
Dim addDims(llvm::ArrayRef<Dim> dims);

/// Unifies two dimensions that must be equal: static wins over symbolic,
/// which wins over unknown. Returns nullopt when two static extents differ.
/// Two different symbols keep \p a.
std::optional<Dim> unifyDims(const Dim &a, const Dim &b);

/// Broadcasts one aligned pair of dimensions (numpy rules). Returns nullopt
/// when the static extents are incompatible.
std::optional<Dim> broadcastDims(const Dim &a, const Dim &b);

/// Multidirectional broadcasting of ranked shapes. Returns nullopt when the
/// shapes are incompatible.
std::optional<DimVector> broadcastShapes(llvm::ArrayRef<Dim> a,
                                         llvm::ArrayRef<Dim> b);

/// The shape part of a type printed like `[2,batch,?]` for messages.
std::string shapeString(llvm::ArrayRef<Dim> dims);
/// A static shape printed like `[2,3]` for messages.
std::string shapeString(llvm::ArrayRef<int64_t> shape);

/// A ranked type with \p dims, or an unranked one when \p dims is nullopt.
TensorType makeType(DType dtype, const std::optional<DimVector> &dims);

/// Normalizes \p axis against \p rank (ops::normalizeAxis of Axes.h);
/// reports ops::axisOutOfRange's message against the node otherwise.
llvm::Expected<unsigned> normalizeAxis(const InferenceContext &ctx,
                                       int64_t axis, int64_t rank,
                                       llvm::StringRef what = "axis");

/// Checks the softmax-family axis (ops::getSoftmaxAxis of Axes.h) of the
/// node against \p input when it is ranked; reports the error against the
/// node.
llvm::Error checkSoftmaxAxis(const InferenceContext &ctx,
                             const TensorType &input);

/// Normalizes a list of axes against \p rank, rejecting duplicates.
llvm::Expected<llvm::SmallVector<unsigned, 4>>
normalizeAxes(const InferenceContext &ctx, llvm::ArrayRef<int64_t> axes,
              int64_t rank, llvm::StringRef what = "axes");

/// Checks that every present input in \p indices has the dtype of the first
/// of them and returns it (Undefined dtypes are ignored). Reports
/// `input I has dtype X but input J has Y`.
llvm::Expected<DType> checkSameDType(const InferenceContext &ctx,
                                     llvm::ArrayRef<unsigned> indices);

/// Checks that input \p index (when present and typed) has one of
/// \p allowed dtypes; \p role names the operand in the message.
llvm::Error checkDTypeIn(const InferenceContext &ctx, unsigned index,
                         llvm::ArrayRef<DType> allowed, llvm::StringRef role);

/// Integer element types usable as indices (int32, int64).
llvm::ArrayRef<DType> indexDTypes();

/// Broadcasts every present input in \p indices. Returns nullopt (unranked)
/// when some input is unranked; reports incompatible shapes as an error.
llvm::Expected<std::optional<DimVector>>
broadcastInputs(const InferenceContext &ctx, llvm::ArrayRef<unsigned> indices);

/// numpy matmul shape of \p a x \p b (rank-1 operands promoted and the
/// promoted dimension removed again). Reports rank-0 operands, mismatched
/// static contraction dimensions and incompatible batch dimensions.
llvm::Expected<DimVector> matmulShape(const InferenceContext &ctx,
                                      llvm::ArrayRef<Dim> a,
                                      llvm::ArrayRef<Dim> b);

/// Convolution/pooling window parameters read from a node's attributes.
struct WindowParams {
  llvm::SmallVector<int64_t, 4> kernel;
  llvm::SmallVector<int64_t, 4> strides;
  llvm::SmallVector<int64_t, 4> dilations;
  /// Begin pads for every spatial axis followed by end pads.
  llvm::SmallVector<int64_t, 8> pads;
  std::string autoPad;
  bool ceilMode = false;
};

/// Reads kernel_shape (or \p kernelFromWeights when the attribute is
/// absent), strides, dilations, pads, auto_pad and ceil_mode for
/// \p numSpatial spatial axes, validating lengths and values.
llvm::Expected<WindowParams>
readWindowParams(const InferenceContext &ctx, unsigned numSpatial,
                 llvm::ArrayRef<Dim> kernelFromWeights = {});

/// Output extent of one spatial axis (ONNX Conv/Pool formulas, including
/// SAME_* auto padding and ceil mode). Returns nullopt for a non-positive
/// result.
std::optional<int64_t> windowOutputSize(int64_t input, int64_t kernel,
                                        int64_t stride, int64_t dilation,
                                        int64_t padBegin, int64_t padEnd,
                                        llvm::StringRef autoPad, bool ceilMode);

/// Spatial output dims for \p inputSpatial; symbolic/unknown inputs give
/// unknown outputs. Reports windows larger than the padded input.
llvm::Expected<DimVector> windowOutputDims(const InferenceContext &ctx,
                                           llvm::ArrayRef<Dim> inputSpatial,
                                           const WindowParams &params);

/// ONNX Slice semantics on one axis of extent \p dim (>= 0) with a non-zero
/// \p step: the first index taken after clamping, and how many elements
/// are taken. Safe for any int64 start/end/step.
std::pair<int64_t, int64_t> sliceRange(int64_t dim, int64_t start, int64_t end,
                                       int64_t step);

/// Number of elements of a static type, or 0 when not static.
uint64_t staticElements(const TensorType &type);

/// Storage bytes of a static type, or 0 when not static.
uint64_t staticBytes(const TensorType &type);

} // namespace ops
} // namespace gmopt

#endif // GMOPT_IR_OPS_SHAPEINFERENCE_H
