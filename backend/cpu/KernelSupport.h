//===- KernelSupport.h - Shared machinery of the CPU kernels ----*- C++ -*-===//
//
// Internal to the CPU backend. KernelCall is what every kernel function
// receives (node, tensors, context, the state its PrepareFn decoded once)
// with error helpers and no attribute reads;
// KernelTable is where each kernel family registers its (domain, op type)
// entries. The rest is the vocabulary kernels share: element-type dispatch
// over C++ types, element conversions (saturating float-to-int, f16/bf16),
// axis and shape helpers, and broadcast iteration plans that collapse shapes
// so the inner loops run over contiguous or scalar operands.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CPU_KERNELSUPPORT_H
#define GMOPT_BACKEND_CPU_KERNELSUPPORT_H

#include "backend/cpu/CpuKernel.h"
#include "backend/cpu/Half.h"
#include "backend/cpu/Parallel.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MathExtras.h"

#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gmopt {
namespace cpu {

//===----------------------------------------------------------------------===//
// Kernel calls and the kernel table
//===----------------------------------------------------------------------===//

/// What a kernel decoded from its node once, when the node was prepared
/// (its attributes, axes and descriptors from ir/ops/): every launch reads
/// it instead of decoding the node again. A family stores any value type
/// through makeKernelState and reads it back with KernelCall::getState.
class KernelState {
public:
  virtual ~KernelState();
};

/// A KernelState holding one value of type T.
template <typename T> class KernelStateOf final : public KernelState {
public:
  explicit KernelStateOf(T value) : value(std::move(value)) {}
  T value;
};

/// \p value as a node's prepared state.
template <typename T> std::unique_ptr<KernelState> makeKernelState(T value) {
  return std::make_unique<KernelStateOf<T>>(std::move(value));
}

/// Decodes a node's state once, at prepare: an error naming the node for
/// attributes or types the kernel does not support, so such a node fails
/// before the first step.
using PrepareFn =
    llvm::Expected<std::unique_ptr<KernelState>> (*)(const Node &node);

/// One invocation of a kernel: the node, its tensors, the context, and the
/// state its kernel prepared.
class KernelCall {
public:
  KernelCall(const Node &node, llvm::ArrayRef<const TensorView *> inputs,
             llvm::ArrayRef<TensorView *> outputs, CpuKernelContext &ctx,
             const KernelState *state = nullptr)
      : node(node), inputs(inputs), outputs(outputs), ctx(ctx), state(state) {}

  /// The state the kernel's PrepareFn made, as the T it stored. Only a
  /// kernel whose entry has a PrepareFn storing a T may call it.
  template <typename T> const T &getState() const {
    assert(state && "the kernel's entry prepares no state");
    return static_cast<const KernelStateOf<T> *>(state)->value;
  }
  /// The prepared state, or null when the entry prepares none.
  const KernelState *getPreparedState() const { return state; }

  const Node &getNode() const { return node; }
  CpuKernelContext &getContext() const { return ctx; }
  unsigned getNumThreads() const { return ctx.getNumThreads(); }
  llvm::ArrayRef<const TensorView *> getInputs() const { return inputs; }
  llvm::ArrayRef<TensorView *> getOutputs() const { return outputs; }
  unsigned getNumInputs() const { return inputs.size(); }
  unsigned getNumOutputs() const { return outputs.size(); }

  /// Input \p i, or null when absent.
  const TensorView *in(unsigned i) const {
    return i < inputs.size() ? inputs[i] : nullptr;
  }
  /// Output \p i, or null when absent.
  TensorView *out(unsigned i) const {
    return i < outputs.size() ? outputs[i] : nullptr;
  }

  /// An error "OP: MESSAGE (node NAME)".
  llvm::Error error(const llvm::Twine &message) const;

  // No attribute accessors: a kernel's PrepareFn decodes its node once and
  // the launch reads getState (see PrepareFn).

private:
  const Node &node;
  llvm::ArrayRef<const TensorView *> inputs;
  llvm::ArrayRef<TensorView *> outputs;
  CpuKernelContext &ctx;
  const KernelState *state;
};

/// A kernel function.
using KernelFn = llvm::Error (*)(KernelCall &call);

/// How the dispatcher prepares a kernel's tensors.
enum class KernelMode {
  /// f16/bf16 tensors are widened to fp32 staging copies before the call and
  /// fp32 results are rounded back into f16/bf16 outputs after it.
  StageHalfAsFloat,
  /// The kernel handles every element type itself (data movement, casts).
  Native,
};

/// The scratch bytes a kernel requests for a node with static shapes, each
/// request rounded up to kBufferAlignment (see scratchBytes).
using WorkspaceFn = uint64_t (*)(const Node &node);

/// For a StageHalfAsFloat kernel: how many leading dimensions, shared by
/// every operand and result of \p node, index rows the kernel computes
/// independently of each other (the dimensions before a softmax's axis);
/// 0 when none do. With rows, 16-bit tensors are staged a slice of rows at
/// a time (at most kStagedSliceElements fp32 elements per tensor) instead
/// of whole: a GPT-2 8x1024 SoftmaxGrad staged whole reserves 1.1 GiB.
using RowDimsFn = unsigned (*)(const Node &node);

/// The fp32 elements per tensor a row-sliced staging holds at most (a
/// slice is never less than one row): 1 MiB, hundreds of rows of any
/// softmax, so a slice's kernel call costs nothing next to its work.
constexpr int64_t kStagedSliceElements = int64_t(1) << 18;

/// How a row-sliced staging cuts tensors whose first `dims` dimensions are
/// the same `rows` rows: slices of sliceRows rows.
struct RowSlicing {
  unsigned dims = 0;
  int64_t rows = 0;
  int64_t sliceRows = 0;
};

/// The slicing of tensors of \p shapes (absent ones empty and skipped) over
/// their first \p dims dimensions, or nullopt when they do not share them
/// or one slice would hold every row (then staging is whole).
std::optional<RowSlicing>
planRowSlices(unsigned dims,
              llvm::ArrayRef<llvm::SmallVector<int64_t, 6>> shapes);

/// Aligned bytes of one scratch request of \p elements elements of \p dtype.
/// Saturates at UINT64_MAX rather than wrapping, so an estimate over
/// oversized shapes reads as too large (the planner refuses workspaces
/// beyond kMaxTensorBytes) instead of as a small bogus size.
inline uint64_t scratchBytes(DType dtype, int64_t elements) {
  assert(elements >= 0 && "negative scratch request");
  uint64_t bytes = llvm::SaturatingMultiply(static_cast<uint64_t>(elements),
                                            uint64_t(dtypeSize(dtype)));
  return bytes > UINT64_MAX - kBufferAlignment ? UINT64_MAX
                                               : alignBuffer(bytes);
}

/// \p a + \p b for scratch byte counts, saturating like scratchBytes.
inline uint64_t addScratch(uint64_t a, uint64_t b) {
  return llvm::SaturatingAdd(a, b);
}

/// Which results a kernel needs present.
enum class KernelResults {
  /// The first OpSchema::minOutputs results must be present (the default).
  SchemaRequired,
  /// Any result may be absent: a gradient node that computes only the
  /// gradients its graph uses (ConvGrad, DivGrad), a node whose results
  /// are all optional (PassThrough).
  MayBeAbsent,
};

/// A registered kernel. Its arity is its op's schema's (getKernelSchema
/// checks a node's operand and result counts and required operands once,
/// at prepare), so an entry names only what the schema does not say.
struct KernelInfo {
  KernelFn fn = nullptr;
  KernelMode mode = KernelMode::StageHalfAsFloat;
  /// The kernel's own scratch (null: none).
  WorkspaceFn workspace = nullptr;
  KernelResults results = KernelResults::SchemaRequired;
  /// StageHalfAsFloat: the rows its 16-bit staging may slice (null: none).
  RowDimsFn rowDims = nullptr;
  /// Decodes the node's state once, at prepare (null: the kernel needs
  /// none).
  PrepareFn prepare = nullptr;
};

/// A node's kernel as prepareCpuKernel made it: its table entry, the state
/// its PrepareFn decoded, and the rows its 16-bit staging may slice.
struct PreparedCpuKernel {
  const KernelInfo *info = nullptr;
  std::unique_ptr<KernelState> state;
  /// info->rowDims(node), decoded once (0: no row slicing).
  unsigned rowDims = 0;
};

/// The kernel table: families register by (domain, op type); prepare finds
/// a node's entry by its schema (the registry's op identity), and a launch
/// runs the entry it was given.
class KernelTable {
public:
  /// Registers \p info for (\p domain, \p opType); one entry per pair.
  void add(llvm::StringRef domain, llvm::StringRef opType, KernelInfo info);
  /// Shorthand for a kernel without scratch that needs its schema's
  /// results.
  void add(llvm::StringRef domain, llvm::StringRef opType, KernelFn fn,
           KernelMode mode = KernelMode::StageHalfAsFloat) {
    add(domain, opType, KernelInfo{fn, mode});
  }
  /// Declares the scratch of the kernel of (\p domain, \p opType), which
  /// must be registered.
  void setWorkspace(llvm::StringRef domain, llvm::StringRef opType,
                    WorkspaceFn fn);
  /// Declares the independent rows of the kernel of (\p domain,
  /// \p opType), which must be registered and StageHalfAsFloat.
  void setRowDims(llvm::StringRef domain, llvm::StringRef opType, RowDimsFn fn);
  /// Declares how the kernel of (\p domain, \p opType), which must be
  /// registered, decodes its node's state at prepare.
  void setPrepare(llvm::StringRef domain, llvm::StringRef opType, PrepareFn fn);
  /// The entry of (\p domain, \p opType), or null.
  const KernelInfo *lookup(llvm::StringRef domain,
                           llvm::StringRef opType) const;
  /// The entry of the op \p schema describes (any of its versions), or
  /// null. Valid after indexSchemas.
  const KernelInfo *lookup(const OpSchema *schema) const {
    return bySchema.lookup(schema);
  }
  /// Indexes every entry under each registered schema of its op, once all
  /// families have registered.
  void indexSchemas();
  /// Every key as OpName::str() spells it.
  std::vector<std::string> keys() const;

private:
  llvm::StringMap<KernelInfo> entries;
  /// Each schema of a registered op -> its entry (in entries, whose values
  /// stay where they are once the table is built).
  llvm::DenseMap<const OpSchema *, const KernelInfo *> bySchema;
};

/// Registration hooks, one per kernel family file.
void registerElementwiseKernels(KernelTable &table);
void registerUnaryKernels(KernelTable &table);
void registerTrainingKernels(KernelTable &table);
void registerSoftmaxKernels(KernelTable &table);
void registerLossKernels(KernelTable &table);
void registerNormKernels(KernelTable &table);
void registerMatMulKernels(KernelTable &table);
void registerConvKernels(KernelTable &table);
void registerPoolKernels(KernelTable &table);
void registerReduceKernels(KernelTable &table);
void registerShapeKernels(KernelTable &table);
void registerMovementKernels(KernelTable &table);
void registerGatherKernels(KernelTable &table);
void registerDropoutKernels(KernelTable &table);
void registerOptimizerKernels(KernelTable &table);
/// Resize and ResizeGrad (ResizeKernels.cpp).
void registerResizeKernels(KernelTable &table);
/// gmopt.FusedAttention and its gradient (AttentionKernels.cpp).
void registerAttentionKernels(KernelTable &table);
/// gmopt.FusedLinearCrossEntropy and its gradient (CrossEntropyKernels.cpp).
void registerCrossEntropyKernels(KernelTable &table);
/// Declares the scratch of the kernels that request any (after the families
/// registered them).
void registerKernelWorkspaces(KernelTable &table);

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

/// Storage of a bool element: one byte, nonzero is true.
struct Bool8 {
  uint8_t value;
};

/// Carries a C++ element type through a generic lambda.
template <typename T> struct TypeTag { using type = T; };

/// The DType stored as the C++ type T.
template <typename T> constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, Float16>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::I64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return DType::I16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DType::I8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::U8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return DType::U16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return DType::U32;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return DType::U64;
  else if constexpr (std::is_same_v<T, Bool8>)
    return DType::Bool;
  else
    return DType::Undefined;
}

/// An error for an element type a kernel does not support.
llvm::Error unsupportedType(const KernelCall &call, DType type,
                            llvm::StringRef what = "input");

/// Calls fn(TypeTag<T>{}) with T the C++ type of \p type among \p Ts...;
/// returns an unsupported-type error otherwise.
template <typename... Ts, typename Fn>
llvm::Error dispatchTypes(const KernelCall &call, DType type, Fn &&fn,
                          llvm::StringRef what = "input") {
  std::optional<llvm::Error> result;
  auto tryOne = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (!result && type == dtypeOf<T>())
      result.emplace(fn(tag));
  };
  (tryOne(TypeTag<Ts>{}), ...);
  if (!result)
    return unsupportedType(call, type, what);
  return std::move(*result);
}

/// fp32 and f64.
template <typename Fn>
llvm::Error dispatchFloat(const KernelCall &call, DType type, Fn &&fn,
                          llvm::StringRef what = "input") {
  return dispatchTypes<float, double>(call, type, std::forward<Fn>(fn), what);
}

/// Types arithmetic kernels support.
template <typename Fn>
llvm::Error dispatchArithmetic(const KernelCall &call, DType type, Fn &&fn,
                               llvm::StringRef what = "input") {
  return dispatchTypes<float, double, int64_t, int32_t, int8_t, uint8_t>(
      call, type, std::forward<Fn>(fn), what);
}

/// Index types (Gather indices, labels...).
template <typename Fn>
llvm::Error dispatchIndex(const KernelCall &call, DType type, Fn &&fn,
                          llvm::StringRef what = "indices") {
  return dispatchTypes<int64_t, int32_t>(call, type, std::forward<Fn>(fn),
                                         what);
}

/// Unsigned integer of each storage size, for byte-moving kernels.
template <unsigned Bytes> struct StorageOf;
template <> struct StorageOf<1> { using type = uint8_t; };
template <> struct StorageOf<2> { using type = uint16_t; };
template <> struct StorageOf<4> { using type = uint32_t; };
template <> struct StorageOf<8> { using type = uint64_t; };

/// Calls fn(TypeTag<U>{}) with U an unsigned integer as wide as one element
/// of \p type; errors for types that are not 1, 2, 4 or 8 bytes wide (or are
/// packed 4-bit types).
template <typename Fn>
llvm::Error dispatchStorage(const KernelCall &call, DType type, Fn &&fn) {
  if (type == DType::U4 || type == DType::I4)
    return unsupportedType(call, type);
  switch (dtypeSize(type)) {
  case 1:
    return fn(TypeTag<uint8_t>{});
  case 2:
    return fn(TypeTag<uint16_t>{});
  case 4:
    return fn(TypeTag<uint32_t>{});
  case 8:
    return fn(TypeTag<uint64_t>{});
  default:
    return unsupportedType(call, type);
  }
}

/// True for f16 and bf16.
inline bool isHalfType(DType type) {
  return type == DType::F16 || type == DType::BF16;
}

/// The element type a StageHalfAsFloat kernel computes on for a tensor of
/// \p type (its f16/bf16 tensors arrive as fp32 copies): what its
/// workspace function sizes scratch by.
inline DType stagedDType(DType type) {
  return isHalfType(type) ? DType::F32 : type;
}

/// Converts one element, as Cast does: bools are 0/1 and nonzero is true,
/// float-to-integer truncates toward zero and saturates (NaN gives 0),
/// f16/bf16 go through fp32 and round to nearest even.
template <typename Dst, typename Src> inline Dst convertElement(Src value) {
  if constexpr (std::is_same_v<Src, Float16> || std::is_same_v<Src, BFloat16>) {
    return convertElement<Dst>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<Src, Bool8>) {
    return convertElement<Dst>(static_cast<uint8_t>(value.value != 0));
  } else if constexpr (std::is_same_v<Dst, Bool8>) {
    return Bool8{static_cast<uint8_t>(value != Src(0))};
  } else if constexpr (std::is_same_v<Dst, Float16> ||
                       std::is_same_v<Dst, BFloat16>) {
    return Dst(static_cast<float>(value));
  } else if constexpr (std::is_floating_point_v<Src> &&
                       std::is_integral_v<Dst>) {
    if (std::isnan(value))
      return Dst(0);
    if (value >= static_cast<Src>(std::numeric_limits<Dst>::max()))
      return std::numeric_limits<Dst>::max();
    if (value <= static_cast<Src>(std::numeric_limits<Dst>::lowest()))
      return std::numeric_limits<Dst>::lowest();
    return static_cast<Dst>(value);
  } else {
    return static_cast<Dst>(value);
  }
}

/// Loads element \p i of \p view as fp32 (f32, f16, bf16, f64 only).
inline float loadFloat(const TensorView &view, int64_t i) {
  switch (view.getDType()) {
  case DType::F16:
    return halfToFloat(view.getDataAs<uint16_t>()[i]);
  case DType::BF16:
    return bfloat16ToFloat(view.getDataAs<uint16_t>()[i]);
  case DType::F64:
    return static_cast<float>(view.getDataAs<double>()[i]);
  default:
    return view.getDataAs<float>()[i];
  }
}

/// Widens the f16/bf16/f32 tensor \p src into \p dst (same element count).
/// Widens \p rows rows of \p cols f16/bf16 (\p type) elements, \p ld
/// elements apart in \p src, into the dense fp32 block \p dst
/// ([rows, cols]); threaded over rows.
void widenRows(DType type, const uint16_t *src, int64_t rows, int64_t cols,
               int64_t ld, float *dst, unsigned numThreads);
/// Rounds the dense fp32 block \p src ([rows, cols]) into f16/bf16
/// (\p type) rows \p ld elements apart in \p dst.
void narrowRows(const float *src, int64_t rows, int64_t cols, DType type,
                uint16_t *dst, int64_t ld, unsigned numThreads);
void convertToFloat(const TensorView &src, float *dst, unsigned numThreads);
/// Rounds \p src into the f16/bf16/f32 tensor \p dst (same element count).
void convertFromFloat(const float *src, const TensorView &dst,
                      unsigned numThreads);

/// Sets every byte of \p view to zero, in parallel for large tensors.
void zeroFill(const TensorView &view, unsigned numThreads);

/// Converts every element of \p src into \p dst (same element count) with
/// convertElement's rules; errors for element types Cast does not support.
llvm::Error castElements(const KernelCall &call, const TensorView &src,
                         const TensorView &dst);

/// Copies \p count elements of any type from \p src to \p dst (same dtype),
/// converting nothing.
void copyElements(const TensorView &src, const TensorView &dst);

//===----------------------------------------------------------------------===//
// Reading small operands (shapes, axes, scalars)
//===----------------------------------------------------------------------===//

/// All elements of an integer (or bool) tensor as int64.
llvm::Expected<llvm::SmallVector<int64_t, 8>>
readInts(const KernelCall &call, const TensorView &view, llvm::StringRef what);

/// The single element of a numeric or bool tensor as double.
llvm::Expected<double> readScalar(const KernelCall &call,
                                  const TensorView &view, llvm::StringRef what);

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

/// Product of \p dims (1 for none), which must be non-negative. Saturates at
/// INT64_MAX instead of overflowing: the shapes kernels see are verified
/// to fit kMaxTensorBytes, so only workspace estimates that multiply the
/// sizes of several tensors (im2col) can reach it, and a saturated estimate
/// is refused by the planner.
inline int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t result = 1;
  for (int64_t d : dims) {
    assert(d >= 0 && "negative extent");
    if (d == 0)
      return 0;
    if (__builtin_mul_overflow(result, d, &result))
      result = std::numeric_limits<int64_t>::max();
  }
  return result;
}

/// \p a * \p b for non-negative element counts, saturating like product().
inline int64_t mulCount(int64_t a, int64_t b) { return product({a, b}); }

/// Row-major strides of \p shape, in elements.
llvm::SmallVector<int64_t, 6> contiguousStrides(llvm::ArrayRef<int64_t> shape);

/// Maps \p axis in [-rank, rank) to [0, rank).
llvm::Expected<unsigned> normalizeAxis(const KernelCall &call, int64_t axis,
                                       unsigned rank,
                                       llvm::StringRef what = "axis");

/// Numpy broadcast of \p a and \p b into \p result; false if incompatible.
bool broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b,
                     llvm::SmallVectorImpl<int64_t> &result);

/// Formats a shape as [2,3,4].
std::string shapeString(llvm::ArrayRef<int64_t> shape);

/// Errors unless output \p index is present and has shape \p expected.
llvm::Error checkOutputShape(const KernelCall &call, unsigned index,
                             llvm::ArrayRef<int64_t> expected);

/// Errors unless \p view has element type \p expected.
llvm::Error checkDType(const KernelCall &call, const TensorView &view,
                       DType expected, llvm::StringRef what);

/// Errors unless \p a and \p b have the same shape.
llvm::Error checkSameShape(const KernelCall &call, const TensorView &a,
                           const TensorView &b, llvm::StringRef what);

//===----------------------------------------------------------------------===//
// Broadcast iteration
//===----------------------------------------------------------------------===//

/// How N operands broadcast into a contiguous output, with dimensions
/// collapsed as far as possible. The output is walked as numRows rows of
/// innerSize elements; within a row operand k advances by innerStride[k]
/// (0 or 1).
template <unsigned N> struct BroadcastPlan {
  /// Collapsed output extents (at least one dimension).
  llvm::SmallVector<int64_t, 6> shape;
  /// Per operand, its element stride along each collapsed dimension.
  std::array<llvm::SmallVector<int64_t, 6>, N> strides;
  int64_t innerSize = 1;
  int64_t numRows = 1;
  std::array<int64_t, N> innerStride{};
};

/// Plans iterating \p outShape with operands of \p operandShapes, each
/// unidirectionally broadcastable to \p outShape (checked by the caller).
template <unsigned N>
BroadcastPlan<N>
makeBroadcastPlan(llvm::ArrayRef<int64_t> outShape,
                  const std::array<llvm::ArrayRef<int64_t>, N> &operandShapes) {
  unsigned rank = outShape.size();
  // Right-align every operand and give broadcast dimensions stride 0.
  llvm::SmallVector<int64_t, 6> dims;
  std::array<llvm::SmallVector<int64_t, 6>, N> strides;
  std::array<llvm::SmallVector<int64_t, 6>, N> fullStrides;
  for (unsigned k = 0; k < N; ++k) {
    llvm::ArrayRef<int64_t> shape = operandShapes[k];
    fullStrides[k].assign(rank, 0);
    int64_t stride = 1;
    for (unsigned j = 0; j < shape.size(); ++j) {
      unsigned d = rank - 1 - j;
      int64_t extent = shape[shape.size() - 1 - j];
      fullStrides[k][d] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
  }
  for (unsigned d = 0; d < rank; ++d) {
    if (outShape[d] == 1)
      continue;
    dims.push_back(outShape[d]);
    for (unsigned k = 0; k < N; ++k)
      strides[k].push_back(fullStrides[k][d]);
  }
  // Merge each dimension into its inner neighbour when every operand walks
  // both as one (contiguous pair, or broadcast pair).
  BroadcastPlan<N> plan;
  for (unsigned d = 0; d < dims.size(); ++d) {
    if (!plan.shape.empty()) {
      bool mergeable = true;
      for (unsigned k = 0; k < N; ++k)
        mergeable &= strides[k][d - 1] == strides[k][d] * dims[d];
      if (mergeable) {
        plan.shape.back() *= dims[d];
        for (unsigned k = 0; k < N; ++k)
          plan.strides[k].back() = strides[k][d];
        continue;
      }
    }
    plan.shape.push_back(dims[d]);
    for (unsigned k = 0; k < N; ++k)
      plan.strides[k].push_back(strides[k][d]);
  }
  if (plan.shape.empty()) {
    plan.shape.push_back(1);
    for (unsigned k = 0; k < N; ++k)
      plan.strides[k].push_back(0);
  }
  plan.innerSize = plan.shape.back();
  plan.numRows = product(llvm::ArrayRef<int64_t>(plan.shape).drop_back());
  for (unsigned k = 0; k < N; ++k)
    plan.innerStride[k] = plan.strides[k].back();
  return plan;
}

/// Walks the rows of a BroadcastPlan, keeping each operand's offset.
template <unsigned N> class BroadcastCursor {
public:
  /// A cursor at row \p row.
  BroadcastCursor(const BroadcastPlan<N> &plan, int64_t row) : plan(plan) {
    unsigned outer = plan.shape.size() - 1;
    index.assign(outer, 0);
    offsets.fill(0);
    for (int d = static_cast<int>(outer) - 1; d >= 0; --d) {
      index[d] = row % plan.shape[d];
      row /= plan.shape[d];
      for (unsigned k = 0; k < N; ++k)
        offsets[k] += index[d] * plan.strides[k][d];
    }
  }
  /// Offsets of each operand at the start of the current row.
  const std::array<int64_t, N> &getOffsets() const { return offsets; }
  /// Moves to the next row.
  void next() {
    for (int d = static_cast<int>(index.size()) - 1; d >= 0; --d) {
      for (unsigned k = 0; k < N; ++k)
        offsets[k] += plan.strides[k][d];
      if (++index[d] < plan.shape[d])
        return;
      for (unsigned k = 0; k < N; ++k)
        offsets[k] -= plan.strides[k][d] * plan.shape[d];
      index[d] = 0;
    }
  }

private:
  const BroadcastPlan<N> &plan;
  llvm::SmallVector<int64_t, 6> index;
  std::array<int64_t, N> offsets;
};

/// Calls rowFn(outOffset, operandOffsets) for every row of \p plan, in
/// parallel over rows.
template <unsigned N, typename RowFn>
void forEachBroadcastRow(const BroadcastPlan<N> &plan, unsigned numThreads,
                         const RowFn &rowFn) {
  int64_t grain = grainFor(plan.innerSize);
  parallelFor(numThreads, plan.numRows, grain, [&](int64_t begin, int64_t end) {
    BroadcastCursor<N> cursor(plan, begin);
    for (int64_t row = begin; row < end; ++row) {
      rowFn(row * plan.innerSize, cursor.getOffsets());
      cursor.next();
    }
  });
}

/// Copies \p src (of any type) into \p dst, broadcasting src's shape to
/// dst's (numpy rules; dst's shape must be the broadcast result).
void broadcastCopy(const TensorView &src, const TensorView &dst,
                   unsigned numThreads);

/// Transposes \p src into \p dst: dst dimension i is src dimension
/// perm[i]. Any element type.
void transposeInto(const TensorView &src, const TensorView &dst,
                   llvm::ArrayRef<unsigned> perm, unsigned numThreads);

} // namespace cpu
} // namespace gmopt

#endif // GMOPT_BACKEND_CPU_KERNELSUPPORT_H
