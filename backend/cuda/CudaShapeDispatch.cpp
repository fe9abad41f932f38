//===- CudaShapeDispatch.cpp - The CUDA shape and constant entries --------===//
//
// Constant, Range, OneHot, Trilu, NonZero, com.microsoft
// BroadcastGradientArgs and Einsum on CUDA (ShapeKernels.cu). The
// prepare-time checks refuse what the CPU kernels (backend/cpu/
// ShapeKernels.cpp, MovementKernels.cpp, MatMulKernels.cpp) refuse from
// static types and attributes alone. What the CPU kernels check against
// operand values (Range's length, OneHot's depth, NonZero's count,
// BroadcastGradientArgs' axes) the kernels check on the device, so nothing
// waits for the host; a mismatch is a kernel fault that names the node
// when the device next synchronizes. Each node is decoded once, when it is
// prepared (the Einsum equation bound to the shapes, Constant's bytes);
// Constant copies from its prepared kernel, which outlives the
// asynchronous copy. An f32 Einsum that
// is one strided-batch GEMM over its operands as stored (EinsumPlan's
// EinsumGemm: matmuls, batched matmuls, transposed operands) runs on
// cuBLASLt like MatMul, with MatMul's planned GEMM scratch (the workspace
// model asks cuda::isCublasEinsum) and its algorithm chosen when the node is
// prepared; every other equation, and f64, on the
// general kernel (one thread per output element, fp32 / fp64 accumulation).
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/EinsumPlan.h"
#include "backend/cuda/ShapeKernels.h"

#include "ir/Types.h"

#include <cstring>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

/// The ScalarType of \p dtype, if the shape kernels read it.
std::optional<ScalarType> scalarTypeOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ScalarType::F32;
  case DType::F64:
    return ScalarType::F64;
  case DType::F16:
    return ScalarType::F16;
  case DType::BF16:
    return ScalarType::BF16;
  case DType::I64:
    return ScalarType::I64;
  case DType::I32:
    return ScalarType::I32;
  case DType::I16:
    return ScalarType::I16;
  case DType::I8:
    return ScalarType::I8;
  case DType::U8:
    return ScalarType::U8;
  case DType::U16:
    return ScalarType::U16;
  case DType::U32:
    return ScalarType::U32;
  case DType::U64:
    return ScalarType::U64;
  case DType::Bool:
    return ScalarType::Bool;
  default:
    return std::nullopt;
  }
}

DType dtypeOf(const Value *value) { return value->getType().getDType(); }

/// A one-element operand of a type readScalar reads (k, depth).
llvm::Error checkScalarOperand(const Node &node, const Value *value,
                               llvm::StringRef what) {
  if (!scalarTypeOf(dtypeOf(value)))
    return nodeError(node, what + " has element type " +
                               dtypeName(dtypeOf(value)) +
                               ", which is not supported");
  if (value->getType().getNumElements() != 1)
    return nodeError(node, what + " must have exactly one element, not " +
                               llvm::Twine(value->getType().getNumElements()));
  return llvm::Error::success();
}

/// The kernels write outputs of the planned shapes: those must be static
/// (NonZero's count and Range's length included).
llvm::Error checkStaticResults(const Node &node) {
  for (const Value *result : node.getResults())
    if (result && !result->getType().hasStaticShape())
      return nodeError(node, "output shapes must be static (planned)");
  return llvm::Error::success();
}

/// Element sizes the word-moving kernels handle.
bool isWordSize(int64_t bytes) {
  return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8;
}

//===----------------------------------------------------------------------===//
// Constant
//===----------------------------------------------------------------------===//

/// The bytes Constant writes, checked against the output as the CPU kernel
/// checks them. A `value` tensor's bytes live in the node; the one-element
/// and list forms are staged in \p staging.
llvm::Expected<llvm::ArrayRef<uint8_t>>
constantBytes(const Node &node, std::vector<int64_t> &staging) {
  const Value *out = node.getResult(0);
  if (!out)
    return nodeError(node, "the output is absent");
  if (const Attribute *value = node.getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor)
      return nodeError(node, "attribute 'value' must be a tensor");
    const TensorData &data = value->getTensor();
    if (llvm::Error err = data.load())
      return nodeError(node, llvm::toString(std::move(err)));
    if (data.getType().getDType() != dtypeOf(out))
      return nodeError(
          node, "constant of type " + dtypeName(data.getType().getDType()) +
                    " for an output of type " + dtypeName(dtypeOf(out)));
    if (data.getBytes().size() != out->getType().getSizeInBytes())
      return nodeError(node, "constant has " +
                                 llvm::Twine(data.getBytes().size()) +
                                 " bytes, the output " +
                                 llvm::Twine(out->getType().getSizeInBytes()));
    return data.getBytes();
  }
  auto stage = [&](const void *values, size_t count, size_t size,
                   DType type) -> llvm::Expected<llvm::ArrayRef<uint8_t>> {
    if (dtypeOf(out) != type ||
        out->getType().getNumElements() != static_cast<uint64_t>(count))
      return nodeError(node, "output type disagrees with the constant "
                             "attribute");
    size_t bytes = count * size;
    staging.assign((bytes + sizeof(int64_t) - 1) / sizeof(int64_t), 0);
    if (bytes)
      std::memcpy(staging.data(), values, bytes);
    return llvm::ArrayRef<uint8_t>(
        reinterpret_cast<const uint8_t *>(staging.data()), bytes);
  };
  if (const Attribute *value = node.getAttr("value_float")) {
    float v = value->getFloat();
    return stage(&v, 1, sizeof(float), DType::F32);
  }
  if (const Attribute *value = node.getAttr("value_floats"))
    return stage(value->getFloats().data(), value->getFloats().size(),
                 sizeof(float), DType::F32);
  if (const Attribute *value = node.getAttr("value_int")) {
    int64_t v = value->getInt();
    return stage(&v, 1, sizeof(int64_t), DType::I64);
  }
  if (const Attribute *value = node.getAttr("value_ints"))
    return stage(value->getInts().data(), value->getInts().size(),
                 sizeof(int64_t), DType::I64);
  return nodeError(node, "no supported value attribute (string and sparse "
                         "constants are not supported)");
}

/// Constant's bytes, decoded once: the node's `value` tensor, or the
/// one-element and list forms staged here. The prepared kernel holds them
/// for as long as launches copy from them.
struct ConstantPlan {
  std::vector<int64_t> staging;
  llvm::ArrayRef<uint8_t> bytes;
  /// bytes, page-locked for the launches' copies.
  PinnedCopy pinned;
};

llvm::Expected<ConstantPlan> decodeConstant(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  ConstantPlan plan;
  auto bytes = constantBytes(node, plan.staging);
  if (!bytes)
    return bytes.takeError();
  // Moving the plan keeps the staging vector's buffer where it is.
  plan.bytes = *bytes;
  return plan;
}

llvm::Error launchConstant(CudaCall &call, const ConstantPlan &plan) {
  if (plan.bytes.empty())
    return llvm::Error::success();
  return plan.pinned.upload(call, call.outPtr(0), plan.bytes.data(),
                            plan.bytes.size());
}

//===----------------------------------------------------------------------===//
// Range, Trilu, OneHot
//===----------------------------------------------------------------------===//

/// A Range, Trilu, OneHot, NonZero or BroadcastGradientArgs node decoded
/// once: the element types, shapes and attributes its launch reads.
struct ShapeOpPlan {
  /// Range's output; Trilu's k; OneHot's indices.
  ScalarType type = ScalarType::I64;
  /// OneHot's depth.
  ScalarType depthType = ScalarType::I64;
  /// Range, Trilu, NonZero: elements of the output / input.
  int64_t elements = 0;
  /// Trilu: bytes of one element, the matrix and the triangle.
  int64_t elementBytes = 0, rows = 0, cols = 0;
  bool upper = true;
  bool hasK = false;
  OneHotShape oneHot = {};
  /// NonZero: the input's shape, float-ness and the planned count.
  NonZeroShape nonZero = {};
  bool floatInput = false;
  int64_t count = 0;
  /// BroadcastGradientArgs: the shapes' lengths and each output's planned
  /// count (-1: absent).
  int64_t aLength = 0, bLength = 0, aAxes = -1, bAxes = -1;
};

llvm::Error checkRange(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  const Value *out = node.getResult(0);
  DType type = dtypeOf(out);
  if (type != DType::F32 && type != DType::F64 && type != DType::I64 &&
      type != DType::I32 && type != DType::I16)
    return nodeError(node, "element type " + dtypeName(type) +
                               " is not supported (f32, f64, i64, i32, i16)");
  if (out->getType().getRank() != 1)
    return nodeError(node, "the output must be one-dimensional");
  for (unsigned i = 0; i < 3; ++i) {
    const Value *in = node.getOperand(i);
    if (!in || dtypeOf(in) != type || in->getType().getNumElements() != 1)
      return nodeError(
          node, "start, limit and delta must be scalars of the output type");
  }
  return llvm::Error::success();
}

llvm::Expected<ShapeOpPlan> decodeRange(const Node &node) {
  if (llvm::Error err = checkRange(node))
    return err;
  ShapeOpPlan p;
  p.type = *scalarTypeOf(dtypeOf(node.getResult(0)));
  p.elements = node.getResult(0)->getType().getNumElements();
  return p;
}

llvm::Error launchRangePlan(CudaCall &call, const ShapeOpPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchRange(p.type, call.inPtr(0), call.inPtr(1),
                                call.inPtr(2), call.outPtr(0), p.elements,
                                call.ctx.stream),
                    "Range kernel");
}

llvm::Error checkTrilu(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  const Value *in = node.getOperand(0), *out = node.getResult(0);
  if (in->getType().getRank() < 2)
    return nodeError(node, "input must have rank >= 2");
  if (out->getType().getDims() != in->getType().getDims())
    return nodeError(node, "input and output shapes differ");
  if (dtypeOf(in) != dtypeOf(out))
    return nodeError(node, "output element type differs from the input's");
  if (!isWordSize(elementBytes(in)) && in->getType().getNumElements())
    return nodeError(node, "element type " + dtypeName(dtypeOf(in)) +
                               " is not supported");
  if (const Value *k = node.getNumOperands() > 1 ? node.getOperand(1) : nullptr)
    return checkScalarOperand(node, k, "k");
  return llvm::Error::success();
}

llvm::Expected<ShapeOpPlan> decodeTrilu(const Node &node) {
  if (llvm::Error err = checkTrilu(node))
    return err;
  const Value *in = node.getOperand(0);
  Shape dims = shapeOf(in);
  int64_t rank = dims.size();
  const Value *k = node.getNumOperands() > 1 ? node.getOperand(1) : nullptr;
  ShapeOpPlan p;
  p.elementBytes = elementBytes(in);
  p.elements = in->getType().getNumElements();
  p.rows = dims[rank - 2];
  p.cols = dims[rank - 1];
  p.upper = node.getIntAttr("upper", 1) != 0;
  p.hasK = k != nullptr;
  p.type = k ? *scalarTypeOf(dtypeOf(k)) : ScalarType::I64;
  return p;
}

llvm::Error launchTriluPlan(CudaCall &call, const ShapeOpPlan &p) {
  return call.check(launchTrilu(call.inPtr(0), call.outPtr(0), p.elementBytes,
                                p.elements, p.rows, p.cols, p.upper,
                                p.hasK ? call.inPtr(1) : nullptr, p.type,
                                call.ctx.stream),
                    "Trilu kernel");
}

/// OneHot's output as [outer, depth, inner].
llvm::Expected<OneHotShape> oneHotShape(const Node &node) {
  const Value *indices = node.getOperand(0), *out = node.getResult(0);
  Shape indexDims = shapeOf(indices), outDims = shapeOf(out);
  auto axis = normalizeAxis(node, node.getIntAttr("axis", -1),
                            static_cast<int64_t>(indexDims.size()) + 1);
  if (!axis)
    return axis.takeError();
  if (outDims.size() != indexDims.size() + 1)
    return nodeError(node, "the output must have one dimension more than "
                           "the indices");
  Shape expected = indexDims;
  expected.insert(expected.begin() + *axis, outDims[*axis]);
  if (expected != outDims)
    return nodeError(node, "the output shape does not match the indices");
  OneHotShape shape;
  shape.depth = outDims[*axis];
  shape.outer = product(llvm::ArrayRef<int64_t>(indexDims).take_front(*axis));
  shape.inner = product(llvm::ArrayRef<int64_t>(indexDims).drop_front(*axis));
  if (shape.depth < 1)
    return nodeError(node, "depth must be positive");
  return shape;
}

llvm::Error checkOneHot(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  const Value *indices = node.getOperand(0), *depth = node.getOperand(1),
              *values = node.getOperand(2), *out = node.getResult(0);
  if (!indices || !depth || !values)
    return nodeError(node, "indices, depth and values may not be absent");
  std::optional<ScalarType> indexType = scalarTypeOf(dtypeOf(indices));
  if (!indexType || *indexType == ScalarType::F16 ||
      *indexType == ScalarType::BF16 || *indexType == ScalarType::Bool)
    return nodeError(node, "indices of element type " +
                               dtypeName(dtypeOf(indices)) +
                               " are not supported");
  if (llvm::Error err = checkScalarOperand(node, depth, "depth"))
    return err;
  if (values->getType().getNumElements() != 2 ||
      dtypeOf(values) != dtypeOf(out))
    return nodeError(node, "values must hold [off, on] of the output type");
  if (!isWordSize(elementBytes(values)))
    return nodeError(node, "element type " + dtypeName(dtypeOf(out)) +
                               " is not supported");
  return oneHotShape(node).takeError();
}

llvm::Expected<ShapeOpPlan> decodeOneHot(const Node &node) {
  if (llvm::Error err = checkOneHot(node))
    return err;
  ShapeOpPlan p;
  p.oneHot = *oneHotShape(node);
  p.type = *scalarTypeOf(dtypeOf(node.getOperand(0)));
  p.depthType = *scalarTypeOf(dtypeOf(node.getOperand(1)));
  p.elementBytes = elementBytes(node.getOperand(2));
  return p;
}

llvm::Error launchOneHotPlan(CudaCall &call, const ShapeOpPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchOneHot(call.inPtr(0), p.type, call.inPtr(1),
                                 p.depthType, call.inPtr(2), call.outPtr(0),
                                 p.elementBytes, p.oneHot, call.ctx.stream),
                    "OneHot kernel");
}

//===----------------------------------------------------------------------===//
// NonZero and BroadcastGradientArgs
//===----------------------------------------------------------------------===//

/// Input types whose zero NonZero recognizes from the bits.
bool nonZeroReads(DType type) {
  switch (type) {
  case DType::F32:
  case DType::F64:
  case DType::F16:
  case DType::BF16:
  case DType::I64:
  case DType::I32:
  case DType::I16:
  case DType::I8:
  case DType::U64:
  case DType::U32:
  case DType::U16:
  case DType::U8:
  case DType::Bool:
    return true;
  default:
    return false;
  }
}

llvm::Error checkNonZero(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  const Value *in = node.getOperand(0), *out = node.getResult(0);
  if (!nonZeroReads(dtypeOf(in)))
    return nodeError(node, "element type " + dtypeName(dtypeOf(in)) +
                               " is not supported");
  int64_t rank = in->getType().getRank();
  if (rank > kMaxNonZeroRank)
    return nodeError(node, "more than " + llvm::Twine(kMaxNonZeroRank) +
                               " dimensions");
  Shape dims = shapeOf(out);
  if (dtypeOf(out) != DType::I64 || dims.size() != 2 ||
      dims[0] != std::max<int64_t>(rank, 1))
    return nodeError(node, "the output must be int64 [" +
                               llvm::Twine(std::max<int64_t>(rank, 1)) +
                               ", count]");
  if (dims[1] > static_cast<int64_t>(in->getType().getNumElements()))
    return nodeError(node, "the planned count " + llvm::Twine(dims[1]) +
                               " exceeds the input's elements");
  return llvm::Error::success();
}

llvm::Expected<ShapeOpPlan> decodeNonZero(const Node &node) {
  if (llvm::Error err = checkNonZero(node))
    return err;
  const Value *in = node.getOperand(0);
  ShapeOpPlan p;
  Shape dims = shapeOf(in);
  p.nonZero.rank = dims.size();
  for (size_t d = 0; d < dims.size(); ++d)
    p.nonZero.dims[d] = dims[d];
  p.elements = in->getType().getNumElements();
  p.elementBytes = elementBytes(in);
  p.floatInput = isFloatingPoint(dtypeOf(in));
  p.count = shapeOf(node.getResult(0))[1];
  return p;
}

llvm::Error launchNonZeroPlan(CudaCall &call, const ShapeOpPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchNonZero(call.inPtr(0), p.elements, static_cast<int>(p.elementBytes),
                    p.floatInput, p.nonZero, call.outAs<int64_t>(0), p.count,
                    call.ctx.stream),
      "NonZero kernel");
}

llvm::Error checkBroadcastGradientArgs(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  int64_t longest = 0;
  for (unsigned i = 0; i < 2; ++i) {
    const Value *shape =
        i < node.getNumOperands() ? node.getOperand(i) : nullptr;
    if (!shape || dtypeOf(shape) != DType::I64)
      return nodeError(node, "a_shape and b_shape must be int64 tensors on "
                             "CUDA");
    longest = std::max<int64_t>(longest, shape->getType().getNumElements());
  }
  for (const Value *axes : node.getResults())
    if (axes) {
      if (dtypeOf(axes) != DType::I64)
        return nodeError(node, "the outputs must be int64");
      if (static_cast<int64_t>(axes->getType().getNumElements()) > longest)
        return nodeError(node, "an output has more axes than the broadcast "
                               "has dimensions");
    }
  return llvm::Error::success();
}

llvm::Expected<ShapeOpPlan> decodeBroadcastGradientArgs(const Node &node) {
  if (llvm::Error err = checkBroadcastGradientArgs(node))
    return err;
  auto planned = [&](unsigned i) -> int64_t {
    const Value *result =
        i < node.getNumResults() ? node.getResult(i) : nullptr;
    return result ? result->getType().getNumElements() : -1;
  };
  ShapeOpPlan p;
  p.aLength = node.getOperand(0)->getType().getNumElements();
  p.bLength = node.getOperand(1)->getType().getNumElements();
  p.aAxes = planned(0);
  p.bAxes = planned(1);
  return p;
}

llvm::Error launchBroadcastGradientArgsPlan(CudaCall &call,
                                            const ShapeOpPlan &p) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchBroadcastGradientArgs(
                        call.inAs<int64_t>(0), p.aLength, call.inAs<int64_t>(1),
                        p.bLength, call.outAs<int64_t>(0), p.aAxes,
                        call.outAs<int64_t>(1), p.bAxes, call.ctx.stream),
                    "BroadcastGradientArgs kernel");
}

//===----------------------------------------------------------------------===//
// Einsum
//===----------------------------------------------------------------------===//

llvm::Expected<EinsumPlan> einsumPlan(const Node &node) {
  llvm::SmallVector<llvm::SmallVector<int64_t, 8>, 4> shapes;
  std::optional<DType> common;
  for (const Value *operand : node.getOperands()) {
    if (!operand)
      return nodeError(node, "inputs may not be absent");
    DType type = dtypeOf(operand);
    if (type != DType::F32 && type != DType::F64)
      return nodeError(node, "element type " + dtypeName(type) +
                                 " is not supported (f32, f64)");
    if (common && *common != type)
      return nodeError(node, "operands must have one element type");
    common = type;
    Shape dims = shapeOf(operand);
    shapes.emplace_back(dims.begin(), dims.end());
  }
  auto plan = planEinsum(node.getStringAttr("equation", ""), shapes);
  if (!plan)
    return nodeError(node, llvm::toString(plan.takeError()));
  const Value *out = node.getResult(0);
  if (common && dtypeOf(out) != *common)
    return nodeError(node, "the output's element type differs from the "
                           "operands'");
  Shape outDims = shapeOf(out);
  if (llvm::ArrayRef<int64_t>(outDims) !=
      llvm::ArrayRef<int64_t>(plan->outShape))
    return nodeError(node, "the output shape differs from the equation's");
  return plan;
}

/// An Einsum decoded once: its plan (the equation bound to the shapes),
/// and the strided-batch GEMM an f32 one lowers to.
struct EinsumDescriptor {
  EinsumPlan plan;
  Storage storage = Storage::F32;
  std::optional<CudaStridedGemm> gemm;
  /// The GEMM's A operand (B is the other).
  unsigned gemmA = 0;
  unsigned operands = 0;
};

llvm::Expected<EinsumDescriptor> decodeEinsum(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  auto plan = einsumPlan(node);
  if (!plan)
    return plan.takeError();
  EinsumDescriptor d;
  d.storage = *storageOf(dtypeOf(node.getResult(0)));
  d.operands = node.getNumOperands();
  if (plan->gemm && dtypeOf(node.getResult(0)) == DType::F32) {
    const EinsumGemm &form = *plan->gemm;
    CudaStridedGemm gemm;
    gemm.batch = form.batch;
    gemm.m = form.m;
    gemm.n = form.n;
    gemm.k = form.k;
    gemm.transA = form.transA;
    gemm.transB = form.transB;
    d.gemm = gemm;
    d.gemmA = form.swapOperands ? 1 : 0;
  }
  d.plan = std::move(*plan);
  return d;
}

/// An Einsum prepared once: its decoded plan and, for one that runs on
/// cuBLASLt, the GEMM's descriptors and algorithm for the node's workspace.
struct EinsumKernel final : CudaKernelDescriptor {
  EinsumDescriptor einsum;
  std::shared_ptr<CudaGemmPlan> gemm;
};

llvm::Error checkEinsum(const Node &node) {
  return decodeEinsum(node).takeError();
}

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareEinsum(const Node &node, const KernelPreparation &preparation,
              CudaKernelContext &ctx) {
  auto einsum = decodeEinsum(node);
  if (!einsum)
    return einsum.takeError();
  auto kernel = std::make_unique<EinsumKernel>();
  kernel->einsum = std::move(*einsum);
  if (kernel->einsum.gemm) {
    auto plan =
        prepareCudaStridedGemm(node, *kernel->einsum.gemm, preparation, ctx);
    if (!plan)
      return plan.takeError();
    kernel->gemm = std::move(*plan);
  }
  return kernel;
}

llvm::Error runEinsum(CudaCall &call) {
  const auto &kernel = call.getDescriptor<EinsumKernel>();
  const EinsumDescriptor &d = kernel.einsum;
  if (kernel.gemm)
    return runCudaStridedGemm(*kernel.gemm, call.inPtr(d.gemmA),
                              call.inPtr(1 - d.gemmA), call.outPtr(0),
                              call.launch, call.ctx);
  EinsumOperands operands;
  for (unsigned i = 0; i < d.operands; ++i)
    operands.data[i] = call.inPtr(i);
  return call.check(launchEinsum(d.storage, operands, call.outPtr(0),
                                 d.plan.geometry, call.ctx.stream),
                    "Einsum kernel");
}

} // namespace

void cuda::dispatch::addShapeKernels(llvm::StringMap<KernelEntry> &table) {
  addEntry(table, "", "Constant",
           decodedEntry<ConstantPlan, decodeConstant, launchConstant>());
  addEntry(table, "", "Range",
           decodedEntry<ShapeOpPlan, decodeRange, launchRangePlan>());
  addEntry(table, "", "Trilu",
           decodedEntry<ShapeOpPlan, decodeTrilu, launchTriluPlan>());
  addEntry(table, "", "OneHot",
           decodedEntry<ShapeOpPlan, decodeOneHot, launchOneHotPlan>());
  addEntry(table, "", "NonZero",
           decodedEntry<ShapeOpPlan, decodeNonZero, launchNonZeroPlan>());
  addEntry(table, kMsDomain, "BroadcastGradientArgs",
           decodedEntry<ShapeOpPlan, decodeBroadcastGradientArgs,
                        launchBroadcastGradientArgsPlan>());
  // An Einsum on cuBLASLt chooses its GEMM algorithm at prepare, on the
  // device, as MatMul does.
  KernelEntry einsum = {checkEinsum, runEinsum, prepareEinsum};
  einsum.preparesOnDevice = true;
  addEntry(table, "", "Einsum", einsum);
}
