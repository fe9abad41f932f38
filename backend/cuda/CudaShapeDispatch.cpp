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
// when the device next synchronizes. Constant copies its attribute's bytes
// from host memory that outlives the asynchronous copy. An f32 Einsum that
// is one strided-batch GEMM over its operands as stored (EinsumPlan's
// EinsumGemm: matmuls, batched matmuls, transposed operands) runs on
// cuBLASLt like MatMul, with MatMul's planned GEMM scratch (the workspace
// model asks cuda::isCublasEinsum); every other equation, and f64, on the
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

llvm::Error checkConstant(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  std::vector<int64_t> staging;
  return constantBytes(node, staging).takeError();
}

llvm::Error runConstant(CudaCall &call) {
  std::vector<int64_t> &staging = call.ctx.hostConstants[&call.node];
  auto bytes = constantBytes(call.node, staging);
  if (!bytes)
    return bytes.takeError();
  if (bytes->empty())
    return llvm::Error::success();
  return call.check(cudaMemcpyAsync(call.outPtr(0), bytes->data(),
                                    bytes->size(), cudaMemcpyHostToDevice,
                                    call.ctx.stream),
                    "cudaMemcpyAsync");
}

//===----------------------------------------------------------------------===//
// Range, Trilu, OneHot
//===----------------------------------------------------------------------===//

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

llvm::Error runRange(CudaCall &call) {
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchRange(*scalarTypeOf(dtypeOf(call.out(0))), call.inPtr(0),
                  call.inPtr(1), call.inPtr(2), call.outPtr(0),
                  call.out(0)->getType().getNumElements(), call.ctx.stream),
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

llvm::Error runTrilu(CudaCall &call) {
  Shape dims = shapeOf(call.in(0));
  int64_t rank = dims.size();
  const Value *k = call.in(1);
  return call.check(
      launchTrilu(call.inPtr(0), call.outPtr(0), elementBytes(call.in(0)),
                  call.in(0)->getType().getNumElements(), dims[rank - 2],
                  dims[rank - 1], call.node.getIntAttr("upper", 1) != 0,
                  k ? call.inPtr(1) : nullptr,
                  k ? *scalarTypeOf(dtypeOf(k)) : ScalarType::I64,
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

llvm::Error runOneHot(CudaCall &call) {
  auto shape = oneHotShape(call.node);
  if (!shape)
    return shape.takeError();
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchOneHot(call.inPtr(0), *scalarTypeOf(dtypeOf(call.in(0))),
                   call.inPtr(1), *scalarTypeOf(dtypeOf(call.in(1))),
                   call.inPtr(2), call.outPtr(0), elementBytes(call.in(2)),
                   *shape, call.ctx.stream),
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

llvm::Error runNonZero(CudaCall &call) {
  const Value *in = call.in(0);
  NonZeroShape shape;
  Shape dims = shapeOf(in);
  shape.rank = dims.size();
  for (size_t d = 0; d < dims.size(); ++d)
    shape.dims[d] = dims[d];
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchNonZero(call.inPtr(0), in->getType().getNumElements(),
                                  static_cast<int>(elementBytes(in)),
                                  isFloatingPoint(dtypeOf(in)), shape,
                                  call.outAs<int64_t>(0),
                                  shapeOf(call.out(0))[1], call.ctx.stream),
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

llvm::Error runBroadcastGradientArgs(CudaCall &call) {
  auto planned = [&](unsigned i) -> int64_t {
    return call.out(i) ? call.out(i)->getType().getNumElements() : -1;
  };
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchBroadcastGradientArgs(
          call.inAs<int64_t>(0), call.in(0)->getType().getNumElements(),
          call.inAs<int64_t>(1), call.in(1)->getType().getNumElements(),
          call.outAs<int64_t>(0), planned(0), call.outAs<int64_t>(1),
          planned(1), call.ctx.stream),
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

llvm::Error checkEinsum(const Node &node) {
  if (llvm::Error err = checkStaticResults(node))
    return err;
  return einsumPlan(node).takeError();
}

llvm::Error runEinsum(CudaCall &call) {
  auto plan = einsumPlan(call.node);
  if (!plan)
    return plan.takeError();
  if (plan->gemm && dtypeOf(call.out(0)) == DType::F32) {
    const EinsumGemm &form = *plan->gemm;
    CudaStridedGemm gemm;
    gemm.batch = form.batch;
    gemm.m = form.m;
    gemm.n = form.n;
    gemm.k = form.k;
    gemm.transA = form.transA;
    gemm.transB = form.transB;
    unsigned a = form.swapOperands ? 1 : 0;
    return runCudaStridedGemm(gemm, call.inPtr(a), call.inPtr(1 - a),
                              call.outPtr(0), call.launch, call.ctx);
  }
  EinsumOperands operands;
  for (unsigned i = 0; i < call.node.getNumOperands(); ++i)
    operands.data[i] = call.inPtr(i);
  return call.check(launchEinsum(*storageOf(dtypeOf(call.out(0))), operands,
                                 call.outPtr(0), plan->geometry,
                                 call.ctx.stream),
                    "Einsum kernel");
}

} // namespace

void cuda::dispatch::addShapeKernels(llvm::StringMap<KernelEntry> &table) {
  auto add = [&](llvm::StringRef domain, llvm::StringRef op, CheckFn check,
                 RunFn run) {
    table[(domain + "::" + op).str()] = {check, run};
  };
  add("", "Constant", checkConstant, runConstant);
  add("", "Range", checkRange, runRange);
  add("", "Trilu", checkTrilu, runTrilu);
  add("", "OneHot", checkOneHot, runOneHot);
  add("", "NonZero", checkNonZero, runNonZero);
  add(kMsDomain, "BroadcastGradientArgs", checkBroadcastGradientArgs,
      runBroadcastGradientArgs);
  add("", "Einsum", checkEinsum, runEinsum);
}
