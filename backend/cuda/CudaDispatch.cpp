//===- CudaDispatch.cpp - The CUDA kernel table ---------------------------===//
//
// One entry per (domain, op) with a CUDA kernel: a check that runs at
// prepare time on the node's static types and attributes, and a run that
// decodes shapes and attributes into the plain launch parameters of
// CudaKernels.h. Constant operands the kernels need on the host (Slice
// starts, Reduce axes, Split sizes) must be initializers; scalars the
// kernels can read themselves (dropout ratio, lr, step, flags) stay on the
// device so no launch waits for the host. What the table does not cover is
// refused by checkCudaKernel with the op's name and the node, never run
// wrongly.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatch.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/IndexingPlan.h"

#include "ir/OptimizerOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstring>
#include <numeric>
#include <optional>

using namespace gmopt;
using namespace gmopt::cuda;

llvm::Error cuda::cudaCallError(const Node &node, llvm::StringRef call,
                                cudaError_t status) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} failed: {1} ({2}) (node {3})", call,
                    cudaGetErrorString(status), cudaGetErrorName(status),
                    node.describe()));
}

llvm::Error cuda::blasLtCallError(const Node &node, llvm::StringRef call,
                                  cublasStatus_t status) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} failed: cuBLAS status {1} (node {2})", call,
                    static_cast<int>(status), node.describe()));
}

namespace {

using Shape = IndexVector;

llvm::Error nodeError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "CUDA kernel for '" + node.getOp().str() +
                                     "': " + message + " (node " +
                                     node.describe() + ")");
}

std::optional<Storage> storageOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return Storage::F32;
  case DType::F16:
    return Storage::F16;
  case DType::BF16:
    return Storage::BF16;
  case DType::F64:
    return Storage::F64;
  case DType::I64:
    return Storage::I64;
  case DType::I32:
    return Storage::I32;
  case DType::Bool:
    return Storage::Bool;
  default:
    return std::nullopt;
  }
}

bool isFloatStorage(Storage s) {
  return s == Storage::F32 || s == Storage::F16 || s == Storage::BF16;
}

Shape shapeOf(const Value *value) {
  Shape shape;
  for (int64_t d : value->getType().getStaticShape())
    shape.push_back(d);
  return shape;
}

int64_t product(llvm::ArrayRef<int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

int64_t elementBytes(const Value *value) {
  int64_t n = value->getType().getNumElements();
  return n ? static_cast<int64_t>(value->getType().getSizeInBytes() /
                                  static_cast<uint64_t>(n))
           : 0;
}

/// The float storage shared by every present operand and result of \p node
/// (skipping the listed operand / result indices).
llvm::Expected<Storage>
commonFloatStorage(const Node &node, llvm::ArrayRef<unsigned> skipOperands = {},
                   llvm::ArrayRef<unsigned> skipResults = {}) {
  std::optional<Storage> common;
  auto visit = [&](const Value *value) -> llvm::Error {
    if (!value)
      return llvm::Error::success();
    std::optional<Storage> s = storageOf(value->getType().getDType());
    if (!s || !isFloatStorage(*s))
      return nodeError(node, "element type " +
                                 dtypeName(value->getType().getDType()) +
                                 " is not supported (f32, f16, bf16)");
    if (common && *common != *s)
      return nodeError(node, "operands mix element types");
    common = s;
    return llvm::Error::success();
  };
  for (unsigned i = 0; i < node.getNumOperands(); ++i)
    if (!llvm::is_contained(skipOperands, i))
      if (llvm::Error err = visit(node.getOperand(i)))
        return err;
  for (unsigned i = 0; i < node.getNumResults(); ++i)
    if (!llvm::is_contained(skipResults, i))
      if (llvm::Error err = visit(node.getResult(i)))
        return err;
  if (!common)
    return nodeError(node, "no float operand");
  return *common;
}

/// The values of operand \p index, which must be an integer initializer.
llvm::Expected<std::vector<int64_t>>
constantInts(const Node &node, unsigned index, llvm::StringRef what) {
  const Value *value =
      index < node.getNumOperands() ? node.getOperand(index) : nullptr;
  if (!value)
    return nodeError(node, what + " is missing");
  if (!value->isInitializer())
    return nodeError(node, what +
                               " must be a constant (an initializer) for the "
                               "CUDA kernels");
  if (llvm::Error err = value->getData().load())
    return err;
  return value->getData().getIntValues();
}

llvm::Expected<int64_t> normalizeAxis(const Node &node, int64_t axis,
                                      int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return nodeError(node, "axis " + llvm::Twine(axis) +
                               " is out of range for rank " +
                               llvm::Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

//===----------------------------------------------------------------------===//
// Broadcast indexing
//===----------------------------------------------------------------------===//

/// Indexing of an n-ary broadcast of \p operands to a contiguous \p out.
llvm::Expected<BroadcastIndexing>
broadcastIndexing(const Node &node, llvm::ArrayRef<Shape> operands,
                  llvm::ArrayRef<int64_t> out) {
  llvm::SmallVector<IndexVector, 4> strides;
  for (const Shape &operand : operands) {
    Shape s;
    if (!broadcastStrides(operand, out, s))
      return nodeError(node, "operand shapes do not broadcast to the output");
    strides.push_back(s);
  }
  while (strides.size() < 3)
    strides.push_back(Shape(out.size(), 0));
  strides.push_back(contiguousStrides(out));
  BroadcastIndexing ix;
  if (!collapseIndexing(Shape(out.begin(), out.end()), strides, ix))
    return nodeError(node, "more than " + llvm::Twine(kMaxRank) +
                               " dimensions after collapsing");
  return ix;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

/// One node being launched.
struct CudaCall {
  const Node &node;
  const NodeLaunch &launch;
  CudaKernelContext &ctx;

  const Value *in(unsigned i) const {
    return i < node.getNumOperands() ? node.getOperand(i) : nullptr;
  }
  const Value *out(unsigned i) const {
    return i < node.getNumResults() ? node.getResult(i) : nullptr;
  }
  const void *inPtr(unsigned i) const {
    return i < launch.operands.size() ? launch.operands[i] : nullptr;
  }
  void *outPtr(unsigned i) const {
    return i < launch.results.size() ? launch.results[i] : nullptr;
  }
  template <typename T> const T *inAs(unsigned i) const {
    return static_cast<const T *>(inPtr(i));
  }
  template <typename T> T *outAs(unsigned i) const {
    return static_cast<T *>(outPtr(i));
  }
  /// Turns a launch status into an error naming \p what and the node.
  llvm::Error check(cudaError_t status, llvm::StringRef what) const {
    if (status == cudaSuccess)
      return llvm::Error::success();
    return cudaCallError(node, what, status);
  }
  /// Makes the next faulting kernel record this launch.
  llvm::Error markFaultable() const {
    return check(setKernelLaunchId(ctx.launchId, ctx.stream),
                 "cudaMemcpyToSymbolAsync (launch id)");
  }
};

using CheckFn = llvm::Error (*)(const Node &);
using RunFn = llvm::Error (*)(CudaCall &);

struct KernelEntry {
  CheckFn check;
  RunFn run;
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// The elementwise op of \p node, if it is one.
std::optional<ElementwiseOp> elementwiseOpOf(const Node &node) {
  llvm::StringRef op = node.getOpType();
  bool ms = node.getDomain() == kMsDomain;
  if (!ms && node.getDomain() != "" && node.getDomain() != "ai.onnx")
    return std::nullopt;
  if (!ms) {
    static const llvm::StringMap<ElementwiseOp> onnxOps = {
        {"Relu", ElementwiseOp::Relu},
        {"Neg", ElementwiseOp::Neg},
        {"Abs", ElementwiseOp::Abs},
        {"Exp", ElementwiseOp::Exp},
        {"Log", ElementwiseOp::Log},
        {"Sqrt", ElementwiseOp::Sqrt},
        {"Reciprocal", ElementwiseOp::Reciprocal},
        {"Tanh", ElementwiseOp::Tanh},
        {"Sigmoid", ElementwiseOp::Sigmoid},
        {"Erf", ElementwiseOp::Erf},
        {"Add", ElementwiseOp::Add},
        {"Sub", ElementwiseOp::Sub},
        {"Mul", ElementwiseOp::Mul},
        {"Div", ElementwiseOp::Div},
        {"Pow", ElementwiseOp::Pow},
        {"Max", ElementwiseOp::Max},
        {"Min", ElementwiseOp::Min},
        {"Sum", ElementwiseOp::Add},
    };
    if (op == "Gelu")
      return node.getStringAttr("approximate", "none") == "tanh"
                 ? ElementwiseOp::GeluTanh
                 : ElementwiseOp::GeluExact;
    auto it = onnxOps.find(op);
    if (it == onnxOps.end())
      return std::nullopt;
    return it->second;
  }
  static const llvm::StringMap<ElementwiseOp> msOps = {
      {"Gelu", ElementwiseOp::GeluExact},
      {"BiasGelu", ElementwiseOp::BiasGeluExact},
      {"ReluGrad", ElementwiseOp::ReluGrad},
      {"GeluGrad", ElementwiseOp::GeluGrad},
      {"FastGeluGrad", ElementwiseOp::FastGeluGrad},
      {"SigmoidGrad", ElementwiseOp::SigmoidGrad},
      {"TanhGrad", ElementwiseOp::TanhGrad},
      {"BiasGeluGrad_dX", ElementwiseOp::BiasGeluGradExact},
      {"BiasFastGeluGrad_dX", ElementwiseOp::BiasGeluGradTanh},
      {"QuickGelu", ElementwiseOp::QuickGelu},
      {"QuickGeluGrad", ElementwiseOp::QuickGeluGrad},
  };
  if (op == "Scale")
    return node.getIntAttr("scale_down", 0) ? ElementwiseOp::ScaleDown
                                            : ElementwiseOp::ScaleUp;
  if (op == "FastGelu")
    return node.getNumOperands() > 1 && node.getOperand(1)
               ? ElementwiseOp::BiasGeluTanh
               : ElementwiseOp::GeluTanh;
  auto it = msOps.find(op);
  if (it == msOps.end())
    return std::nullopt;
  return it->second;
}

/// Scale(X, scale) with a constant scale: the factor the CPU kernel uses,
/// float(scale_down ? 1 / scale : scale) computed in double.
std::optional<float> constantScaleFactor(const Node &node) {
  if (node.getDomain() != kMsDomain || node.getOpType() != "Scale")
    return std::nullopt;
  const Value *scale = node.getOperand(1);
  if (!scale || !scale->isInitializer())
    return std::nullopt;
  if (llvm::Error err = scale->getData().load()) {
    // Left to the binary path, which reports nothing better; the import
    // already read constant data.
    llvm::consumeError(std::move(err));
    return std::nullopt;
  }
  if (scale->getData().getNumElements() != 1)
    return std::nullopt;
  double s = scale->getData().getFloatElement(0);
  return static_cast<float>(node.getIntAttr("scale_down", 0) ? 1.0 / s : s);
}

llvm::Error checkElementwise(const Node &node) {
  if (constantScaleFactor(node))
    return commonFloatStorage(node, {1}).takeError();
  std::optional<ElementwiseOp> op = elementwiseOpOf(node);
  if (!op)
    return nodeError(node, "not an elementwise op");
  unsigned present = 0;
  for (Value *operand : node.getOperands())
    present += operand != nullptr;
  bool variadic = node.getOpType() == "Sum";
  if (variadic ? present < 1 : present != unsigned(operandCount(*op)))
    return nodeError(node, "expected " + llvm::Twine(operandCount(*op)) +
                               " operands, got " + llvm::Twine(present));
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  Shape out = shapeOf(node.getResult(0));
  for (Value *operand : node.getOperands())
    if (operand) {
      Shape strides;
      if (!broadcastStrides(shapeOf(operand), out, strides))
        return nodeError(node, "operand shapes do not broadcast");
    }
  return llvm::Error::success();
}

llvm::Error runElementwise(CudaCall &call) {
  const Node &node = call.node;
  if (std::optional<float> factor = constantScaleFactor(node)) {
    Shape out = shapeOf(call.out(0));
    auto ix = broadcastIndexing(node, {shapeOf(call.in(0))}, out);
    if (!ix)
      return ix.takeError();
    return call.check(launchElementwise(ElementwiseOp::MulParam,
                                        *commonFloatStorage(node, {1}),
                                        call.inPtr(0), nullptr, nullptr,
                                        call.outPtr(0), product(out), *ix,
                                        call.ctx.stream, *factor),
                      "Scale kernel");
  }
  ElementwiseOp op = *elementwiseOpOf(node);
  Storage storage = *commonFloatStorage(node);
  Shape out = shapeOf(call.out(0));
  int64_t elements = product(out);
  if (node.getOpType() == "Sum") {
    // out = in0 (+ in1 (+ ...)), one binary launch per extra operand.
    llvm::SmallVector<unsigned, 4> present;
    for (unsigned i = 0; i < node.getNumOperands(); ++i)
      if (call.in(i))
        present.push_back(i);
    // An operand whose bytes the plan gave the output must be read before
    // the first partial sum overwrites it: it goes first.
    for (size_t k = 1; k < present.size(); ++k)
      if (call.inPtr(present[k]) == call.outPtr(0))
        std::swap(present[0], present[k]);
    if (present.size() == 1) {
      auto ix = broadcastIndexing(node, {shapeOf(call.in(present[0]))}, out);
      if (!ix)
        return ix.takeError();
      return call.check(launchElementwise(ElementwiseOp::Identity, storage,
                                          call.inPtr(present[0]), nullptr,
                                          nullptr, call.outPtr(0), elements,
                                          *ix, call.ctx.stream),
                        "Sum kernel");
    }
    for (size_t k = 1; k < present.size(); ++k) {
      const void *lhs = k == 1 ? call.inPtr(present[0]) : call.outPtr(0);
      Shape lhsShape = k == 1 ? shapeOf(call.in(present[0])) : out;
      auto ix = broadcastIndexing(
          node, {lhsShape, shapeOf(call.in(present[k]))}, out);
      if (!ix)
        return ix.takeError();
      if (llvm::Error err = call.check(
              launchElementwise(ElementwiseOp::Add, storage, lhs,
                                call.inPtr(present[k]), nullptr, call.outPtr(0),
                                elements, *ix, call.ctx.stream),
              "Sum kernel"))
        return err;
    }
    return llvm::Error::success();
  }
  llvm::SmallVector<Shape, 3> shapes;
  llvm::SmallVector<const void *, 3> pointers;
  for (unsigned i = 0; i < node.getNumOperands(); ++i)
    if (call.in(i)) {
      shapes.push_back(shapeOf(call.in(i)));
      pointers.push_back(call.inPtr(i));
    }
  while (pointers.size() < 3)
    pointers.push_back(nullptr);
  auto ix = broadcastIndexing(node, shapes, out);
  if (!ix)
    return ix.takeError();
  // QuickGelu's alpha, as the CPU kernels round it.
  float param = call.node.getFloatAttr("alpha", 1.702f);
  return call.check(launchElementwise(op, storage, pointers[0], pointers[1],
                                      pointers[2], call.outPtr(0), elements,
                                      *ix, call.ctx.stream, param),
                    "elementwise kernel");
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

llvm::Error checkAnyElement(const Node &node) {
  for (const Value *value : node.getResults())
    if (value) {
      int64_t bytes = elementBytes(value);
      if (value->getType().getNumElements() && bytes != 1 && bytes != 2 &&
          bytes != 4 && bytes != 8)
        return nodeError(node, "element type " +
                                   dtypeName(value->getType().getDType()) +
                                   " is not supported");
    }
  return llvm::Error::success();
}

/// Identity, Reshape, Squeeze, Unsqueeze, Flatten when the plan gave the
/// result its own bytes: a device-to-device copy.
llvm::Error runCopy(CudaCall &call) {
  if (call.outPtr(0) == call.inPtr(0))
    return llvm::Error::success();
  uint64_t bytes = call.out(0)->getType().getSizeInBytes();
  return call.check(cudaMemcpyAsync(call.outPtr(0), call.inPtr(0), bytes,
                                    cudaMemcpyDeviceToDevice, call.ctx.stream),
                    "cudaMemcpyAsync");
}

llvm::Error launchCopyWith(CudaCall &call, const void *in, void *out,
                           const Shape &extents, const Shape &inStrides,
                           const Shape &outStrides, int64_t bytesPerElement) {
  BroadcastIndexing ix;
  llvm::SmallVector<Shape, 4> strides = {inStrides, Shape(extents.size(), 0),
                                         Shape(extents.size(), 0), outStrides};
  if (!collapseIndexing(extents, strides, ix))
    return nodeError(call.node, "too many dimensions");
  return call.check(launchStridedCopy(bytesPerElement, in, out,
                                      product(extents), ix, call.ctx.stream),
                    "strided copy kernel");
}

llvm::Expected<Shape> transposePermutation(const Node &node) {
  int64_t rank = node.getOperand(0)->getType().getRank();
  std::vector<int64_t> perm = node.getIntsAttr("perm", {});
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int64_t>(perm.size()) != rank)
    return nodeError(node, "perm does not match the rank");
  return Shape(perm.begin(), perm.end());
}

llvm::Error checkTranspose(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return transposePermutation(node).takeError();
}

llvm::Error runTranspose(CudaCall &call) {
  Shape perm = *transposePermutation(call.node);
  Shape in = shapeOf(call.in(0)), out = shapeOf(call.out(0));
  Shape inStrides = contiguousStrides(in), strides;
  for (int64_t p : perm)
    strides.push_back(inStrides[p]);
  return launchCopyWith(call, call.inPtr(0), call.outPtr(0), out, strides,
                        contiguousStrides(out), elementBytes(call.out(0)));
}

llvm::Error runExpand(CudaCall &call) {
  Shape out = shapeOf(call.out(0)), strides;
  if (!broadcastStrides(shapeOf(call.in(0)), out, strides))
    return nodeError(call.node, "the input does not broadcast to the output");
  return launchCopyWith(call, call.inPtr(0), call.outPtr(0), out, strides,
                        contiguousStrides(out), elementBytes(call.out(0)));
}

/// Tile(input, repeats): one strided copy (IndexingPlan's tileIndexing);
/// the repeats must be a constant.
llvm::Expected<BroadcastIndexing> tileGeometry(const Node &node) {
  auto repeats = constantInts(node, 1, "repeats");
  if (!repeats)
    return repeats.takeError();
  BroadcastIndexing ix;
  if (!tileIndexing(shapeOf(node.getOperand(0)), *repeats, ix))
    return nodeError(node, "the repeats do not match the input's rank, are "
                           "negative, or tile more dimensions than the "
                           "strided copy has");
  return ix;
}

llvm::Error checkTile(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return tileGeometry(node).takeError();
}

llvm::Error runTile(CudaCall &call) {
  auto elements = static_cast<int64_t>(call.out(0)->getType().getNumElements());
  if (!elements)
    return llvm::Error::success();
  auto ix = tileGeometry(call.node);
  if (!ix)
    return ix.takeError();
  return call.check(launchStridedCopy(elementBytes(call.out(0)), call.inPtr(0),
                                      call.outPtr(0), elements, *ix,
                                      call.ctx.stream),
                    "strided copy kernel");
}

/// Pad(data, pads, constant_value?, axes?) in constant mode: the output
/// filled with the constant (0 without it), then the overlapping region
/// copied (IndexingPlan's padCopy). pads, axes and the constant must be
/// initializers.
struct PadGeometry {
  PadCopy copy;
  uint64_t pattern = 0;
};

llvm::Expected<PadGeometry> padGeometry(const Node &node) {
  if (node.getStringAttr("mode", "constant") != "constant")
    return nodeError(node, "only mode 'constant' has a CUDA kernel");
  Shape in = shapeOf(node.getOperand(0)), out = shapeOf(node.getResult(0));
  auto rank = static_cast<int64_t>(in.size());
  auto pads = constantInts(node, 1, "pads");
  if (!pads)
    return pads.takeError();
  std::vector<int64_t> axes;
  if (node.getNumOperands() > 3 && node.getOperand(3)) {
    auto given = constantInts(node, 3, "axes");
    if (!given)
      return given.takeError();
    axes = *given;
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  if (pads->size() != 2 * axes.size())
    return nodeError(node, "pads must have two entries per padded axis");
  Shape begin(in.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    auto axis = normalizeAxis(node, axes[i], rank);
    if (!axis)
      return axis.takeError();
    begin[*axis] = (*pads)[i];
  }
  PadGeometry g;
  if (!padCopy(in, out, begin, g.copy))
    return nodeError(node, "the output's rank differs from the input's");
  if (node.getNumOperands() > 2 && node.getOperand(2)) {
    const Value *value = node.getOperand(2);
    if (!value->isInitializer())
      return nodeError(node, "constant_value must be a constant (an "
                             "initializer) for the CUDA kernels");
    if (value->getType().getDType() != node.getResult(0)->getType().getDType())
      return nodeError(node, "constant_value has another element type than "
                             "the output");
    if (llvm::Error err = value->getData().load())
      return err;
    llvm::ArrayRef<uint8_t> bytes = value->getData().getBytes();
    if (bytes.size() > sizeof(g.pattern))
      return nodeError(node, "the element type is too wide");
    std::memcpy(&g.pattern, bytes.data(), bytes.size());
  }
  return g;
}

llvm::Error checkPad(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return padGeometry(node).takeError();
}

llvm::Error runPad(CudaCall &call) {
  auto elements = static_cast<int64_t>(call.out(0)->getType().getNumElements());
  if (!elements)
    return llvm::Error::success();
  auto g = padGeometry(call.node);
  if (!g)
    return g.takeError();
  int64_t bytes = elementBytes(call.out(0));
  if (llvm::Error err = call.check(launchFill(bytes, g->pattern, call.outPtr(0),
                                              elements, call.ctx.stream),
                                   "fill kernel"))
    return err;
  if (!product(g->copy.extents))
    return llvm::Error::success();
  return launchCopyWith(call, call.inAs<uint8_t>(0) + g->copy.inOffset * bytes,
                        call.outAs<uint8_t>(0) + g->copy.outOffset * bytes,
                        g->copy.extents, contiguousStrides(shapeOf(call.in(0))),
                        contiguousStrides(shapeOf(call.out(0))), bytes);
}

/// Slice's starts and steps per dimension of the input, from its constant
/// operands (opset 10+) or attributes (opset 1). The ends are not needed:
/// the result's static shape (from shape inference) gives the extents.
struct SliceGeometry {
  Shape start, step;
};

llvm::Expected<SliceGeometry>
sliceGeometry(const Node &node, const Shape &inShape, unsigned firstOperand) {
  SliceGeometry g;
  int64_t rank = inShape.size();
  g.start.assign(rank, 0);
  g.step.assign(rank, 1);
  std::vector<int64_t> starts, axes, steps;
  if (node.getNumOperands() > firstOperand) {
    auto s = constantInts(node, firstOperand, "starts");
    if (!s)
      return s.takeError();
    starts = *s;
    if (node.getNumOperands() > firstOperand + 2 &&
        node.getOperand(firstOperand + 2)) {
      auto a = constantInts(node, firstOperand + 2, "axes");
      if (!a)
        return a.takeError();
      axes = *a;
    }
    if (node.getNumOperands() > firstOperand + 3 &&
        node.getOperand(firstOperand + 3)) {
      auto st = constantInts(node, firstOperand + 3, "steps");
      if (!st)
        return st.takeError();
      steps = *st;
    }
  } else {
    starts = node.getIntsAttr("starts", {});
    axes = node.getIntsAttr("axes", {});
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (axes.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size()))
    return nodeError(node, "starts, axes and steps differ in length");
  for (size_t i = 0; i < starts.size(); ++i) {
    auto axis = normalizeAxis(node, axes[i], rank);
    if (!axis)
      return axis.takeError();
    int64_t extent = inShape[*axis];
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0)
      return nodeError(node, "a slice step is 0");
    int64_t start = starts[i];
    if (start < 0)
      start += extent;
    // Clamp as ONNX does: [0, extent] forward, [0, extent - 1] backward.
    start = step > 0 ? std::clamp<int64_t>(start, 0, extent)
                     : std::clamp<int64_t>(start, 0, extent - 1);
    g.start[*axis] = start;
    g.step[*axis] = step;
  }
  return g;
}

llvm::Error checkSlice(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return sliceGeometry(node, shapeOf(node.getOperand(0)), 1).takeError();
}

llvm::Error runSlice(CudaCall &call) {
  Shape in = shapeOf(call.in(0)), out = shapeOf(call.out(0));
  auto g = sliceGeometry(call.node, in, 1);
  if (!g)
    return g.takeError();
  Shape inStrides = contiguousStrides(in), strides;
  int64_t offset = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    offset += g->start[d] * inStrides[d];
    strides.push_back(inStrides[d] * g->step[d]);
  }
  int64_t bytes = elementBytes(call.out(0));
  return launchCopyWith(call, call.inAs<uint8_t>(0) + offset * bytes,
                        call.outPtr(0), out, strides, contiguousStrides(out),
                        bytes);
}

/// SliceGrad(dY, shape, starts, ends, axes?, steps?): zeros, then dY into
/// the sliced region.
llvm::Error checkSliceGrad(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return sliceGeometry(node, shapeOf(node.getResult(0)), 2).takeError();
}

llvm::Error runSliceGrad(CudaCall &call) {
  Shape full = shapeOf(call.out(0)), dy = shapeOf(call.in(0));
  auto g = sliceGeometry(call.node, full, 2);
  if (!g)
    return g.takeError();
  if (llvm::Error err =
          call.check(cudaMemsetAsync(call.outPtr(0), 0,
                                     call.out(0)->getType().getSizeInBytes(),
                                     call.ctx.stream),
                     "cudaMemsetAsync"))
    return err;
  Shape fullStrides = contiguousStrides(full), strides;
  int64_t offset = 0;
  for (size_t d = 0; d < full.size(); ++d) {
    offset += g->start[d] * fullStrides[d];
    strides.push_back(fullStrides[d] * g->step[d]);
  }
  int64_t bytes = elementBytes(call.out(0));
  return launchCopyWith(call, call.inPtr(0),
                        call.outAs<uint8_t>(0) + offset * bytes, dy,
                        contiguousStrides(dy), strides, bytes);
}

std::optional<CompareOp> compareOpOf(const Node &node) {
  llvm::StringRef op = node.getOpType();
  if (op == "IsInf") {
    bool negative = node.getIntAttr("detect_negative", 1) != 0;
    bool positive = node.getIntAttr("detect_positive", 1) != 0;
    return negative && positive ? CompareOp::IsInf
           : positive           ? CompareOp::IsPositiveInf
                                : CompareOp::IsNegativeInf;
  }
  return llvm::StringSwitch<std::optional<CompareOp>>(op)
      .Case("Equal", CompareOp::Equal)
      .Case("Less", CompareOp::Less)
      .Case("Greater", CompareOp::Greater)
      .Case("LessOrEqual", CompareOp::LessOrEqual)
      .Case("GreaterOrEqual", CompareOp::GreaterOrEqual)
      .Case("And", CompareOp::And)
      .Case("Or", CompareOp::Or)
      .Case("Xor", CompareOp::Xor)
      .Case("IsNaN", CompareOp::IsNaN)
      .Case("Not", CompareOp::Not)
      .Default(std::nullopt);
}

llvm::Error checkCompare(const Node &node) {
  DType a = node.getOperand(0)->getType().getDType();
  for (Value *operand : node.getOperands())
    if (operand->getType().getDType() != a)
      return nodeError(node, "operand element types differ");
  llvm::StringRef op = node.getOpType();
  if ((op == "And" || op == "Or" || op == "Xor" || op == "Not") &&
      a != DType::Bool)
    return nodeError(node, "the logical ops take bool operands");
  if (node.getOpType() == "IsInf" &&
      node.getIntAttr("detect_negative", 1) == 0 &&
      node.getIntAttr("detect_positive", 1) == 0)
    return nodeError(node, "IsInf detects neither sign");
  if (!storageOf(a))
    return nodeError(node,
                     "element type " + dtypeName(a) + " is not supported");
  if (node.getResult(0)->getType().getDType() != DType::Bool)
    return nodeError(node, "the result must be bool");
  Shape out = shapeOf(node.getResult(0)), strides;
  for (Value *operand : node.getOperands())
    if (!broadcastStrides(shapeOf(operand), out, strides))
      return nodeError(node, "operand shapes do not broadcast");
  return llvm::Error::success();
}

llvm::Error runCompare(CudaCall &call) {
  Shape out = shapeOf(call.out(0));
  // The one-operand tests read a twice.
  unsigned second = call.node.getNumOperands() > 1 ? 1 : 0;
  auto ix = broadcastIndexing(
      call.node, {shapeOf(call.in(0)), shapeOf(call.in(second))}, out);
  if (!ix)
    return ix.takeError();
  return call.check(launchCompare(*compareOpOf(call.node),
                                  *storageOf(call.in(0)->getType().getDType()),
                                  call.inPtr(0), call.inPtr(second),
                                  call.outAs<uint8_t>(0), product(out), *ix,
                                  call.ctx.stream),
                    "predicate kernel");
}

/// ConstantOfShape: the `value` attribute's one element (float 0 without
/// it) in every element of the static result.
llvm::Expected<uint64_t> constantOfShapePattern(const Node &node) {
  const Value *out = node.getResult(0);
  uint64_t pattern = 0;
  if (const Attribute *value = node.getAttr("value")) {
    if (value->getKind() != Attribute::Kind::Tensor ||
        value->getTensor().getNumElements() != 1)
      return nodeError(node, "attribute 'value' must be a one-element tensor");
    const TensorData &data = value->getTensor();
    if (data.getType().getDType() != out->getType().getDType())
      return nodeError(node, "attribute 'value' has another element type "
                             "than the output");
    llvm::ArrayRef<uint8_t> bytes = data.getBytes();
    if (bytes.size() > sizeof(pattern))
      return nodeError(node, "the element type is too wide");
    std::memcpy(&pattern, bytes.data(), bytes.size());
  } else if (out->getType().getDType() != DType::F32) {
    return nodeError(node, "without 'value' the output must be f32");
  }
  return pattern;
}

llvm::Error checkConstantOfShape(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return constantOfShapePattern(node).takeError();
}

llvm::Error runConstantOfShape(CudaCall &call) {
  auto pattern = constantOfShapePattern(call.node);
  if (!pattern)
    return pattern.takeError();
  return call.check(
      launchFill(elementBytes(call.out(0)), *pattern, call.outPtr(0),
                 call.out(0)->getType().getNumElements(), call.ctx.stream),
      "fill kernel");
}

/// Where(cond, X, Y) with broadcasting.
llvm::Error checkWhere(const Node &node) {
  if (node.getOperand(0)->getType().getDType() != DType::Bool)
    return nodeError(node, "the condition must be bool");
  if (node.getOperand(1)->getType().getDType() !=
          node.getOperand(2)->getType().getDType() ||
      node.getOperand(1)->getType().getDType() !=
          node.getResult(0)->getType().getDType())
    return nodeError(node, "X, Y and the result differ in element type");
  if (llvm::Error err = checkAnyElement(node))
    return err;
  Shape out = shapeOf(node.getResult(0));
  for (Value *operand : node.getOperands()) {
    Shape strides;
    if (!broadcastStrides(shapeOf(operand), out, strides))
      return nodeError(node, "operand shapes do not broadcast");
  }
  return llvm::Error::success();
}

llvm::Error runWhere(CudaCall &call) {
  Shape out = shapeOf(call.out(0));
  auto ix = broadcastIndexing(
      call.node,
      {shapeOf(call.in(0)), shapeOf(call.in(1)), shapeOf(call.in(2))}, out);
  if (!ix)
    return ix.takeError();
  return call.check(launchWhere(elementBytes(call.out(0)),
                                call.inAs<uint8_t>(0), call.inPtr(1),
                                call.inPtr(2), call.outPtr(0), product(out),
                                *ix, call.ctx.stream),
                    "Where kernel");
}

/// Concat / ConcatTraining: each input copied into its slab of the output;
/// ConcatTraining's optional second output holds each input's extent along
/// the axis (int64), copied from host memory that outlives the copy.
llvm::Error checkConcat(const Node &node) {
  if (node.getNumResults() > 1 && node.getResult(1) &&
      node.getResult(1)->getType().getDType() != DType::I64)
    return nodeError(node, "the per-input lengths output must be int64");
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return normalizeAxis(node, node.getIntAttr("axis", 0),
                       node.getResult(0)->getType().getRank())
      .takeError();
}

llvm::Error runConcat(CudaCall &call) {
  Shape out = shapeOf(call.out(0));
  int64_t axis =
      *normalizeAxis(call.node, call.node.getIntAttr("axis", 0), out.size());
  Shape outStrides = contiguousStrides(out);
  int64_t bytes = elementBytes(call.out(0)), offset = 0;
  for (unsigned i = 0; i < call.node.getNumOperands(); ++i) {
    if (!call.in(i))
      continue;
    Shape in = shapeOf(call.in(i));
    if (llvm::Error err = launchCopyWith(
            call, call.inPtr(i), call.outAs<uint8_t>(0) + offset * bytes, in,
            contiguousStrides(in), outStrides, bytes))
      return err;
    offset += in[axis] * outStrides[axis];
  }
  const Value *lengths = call.out(1);
  if (!lengths)
    return llvm::Error::success();
  std::vector<int64_t> &values = call.ctx.hostConstants[&call.node];
  if (values.empty())
    for (unsigned i = 0; i < call.node.getNumOperands(); ++i)
      if (call.in(i))
        values.push_back(shapeOf(call.in(i))[axis]);
  uint64_t lengthBytes = lengths->getType().getSizeInBytes();
  if (lengthBytes != values.size() * sizeof(int64_t))
    return nodeError(call.node, "the lengths output does not hold one "
                                "extent per input");
  return call.check(cudaMemcpyAsync(call.outPtr(1), values.data(), lengthBytes,
                                    cudaMemcpyHostToDevice, call.ctx.stream),
                    "cudaMemcpyAsync");
}

/// Split / SplitTraining: each output copied from its slab of the input.
llvm::Error checkSplit(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return normalizeAxis(node, node.getIntAttr("axis", 0),
                       node.getOperand(0)->getType().getRank())
      .takeError();
}

llvm::Error runSplit(CudaCall &call) {
  Shape in = shapeOf(call.in(0));
  int64_t axis =
      *normalizeAxis(call.node, call.node.getIntAttr("axis", 0), in.size());
  Shape inStrides = contiguousStrides(in);
  int64_t bytes = elementBytes(call.in(0)), offset = 0;
  for (unsigned i = 0; i < call.node.getNumResults(); ++i) {
    const Value *result = call.out(i);
    if (!result)
      continue;
    Shape out = shapeOf(result);
    if (llvm::Error err = launchCopyWith(
            call, call.inAs<uint8_t>(0) + offset * bytes, call.outPtr(i), out,
            inStrides, contiguousStrides(out), bytes))
      return err;
    offset += out[axis] * inStrides[axis];
  }
  return llvm::Error::success();
}

/// Shape: the static shape, copied from host memory that outlives the copy.
llvm::Error checkShape(const Node &node) {
  if (node.getResult(0)->getType().getDType() != DType::I64)
    return nodeError(node, "the result must be int64");
  return llvm::Error::success();
}

llvm::Error runShape(CudaCall &call) {
  std::vector<int64_t> &values = call.ctx.hostConstants[&call.node];
  if (values.empty()) {
    Shape in = shapeOf(call.in(0));
    int64_t rank = in.size();
    int64_t start = call.node.getIntAttr("start", 0);
    int64_t end = call.node.getIntAttr("end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    for (int64_t d = start; d < end; ++d)
      values.push_back(in[d]);
  }
  uint64_t bytes = call.out(0)->getType().getSizeInBytes();
  if (bytes != values.size() * sizeof(int64_t))
    return nodeError(call.node, "the result does not hold the shape");
  return call.check(cudaMemcpyAsync(call.outPtr(0), values.data(), bytes,
                                    cudaMemcpyHostToDevice, call.ctx.stream),
                    "cudaMemcpyAsync");
}

llvm::Error checkCast(const Node &node) {
  for (const Value *value : {node.getOperand(0), node.getResult(0)})
    if (!storageOf(value->getType().getDType()))
      return nodeError(node, "element type " +
                                 dtypeName(value->getType().getDType()) +
                                 " is not supported");
  return llvm::Error::success();
}

llvm::Error runCast(CudaCall &call) {
  Storage from = *storageOf(call.in(0)->getType().getDType());
  Storage to = *storageOf(call.out(0)->getType().getDType());
  int64_t n = call.out(0)->getType().getNumElements();
  if (from == to)
    return runCopy(call);
  return call.check(
      launchCast(from, to, call.inPtr(0), call.outPtr(0), n, call.ctx.stream),
      "Cast kernel");
}

//===----------------------------------------------------------------------===//
// Softmax, norms, reductions
//===----------------------------------------------------------------------===//

/// [outer, n, inner] of a softmax-family node over \p shape.
llvm::Expected<RowShape> softmaxRows(const Node &node, const Shape &shape,
                                     bool coerced) {
  int64_t rank = shape.size();
  auto axis =
      normalizeAxis(node, node.getIntAttr("axis", coerced ? 1 : -1), rank);
  if (!axis)
    return axis.takeError();
  llvm::ArrayRef<int64_t> dims(shape);
  RowShape rows;
  rows.outer = product(dims.take_front(*axis));
  if (coerced) {
    rows.n = product(dims.drop_front(*axis));
  } else {
    rows.n = rank ? shape[*axis] : 1;
    rows.inner = product(dims.drop_front(*axis + 1));
  }
  return rows;
}

bool softmaxIsCoerced(const Node &node) {
  llvm::StringRef op = node.getOpType();
  if (node.getDomain() == kMsDomain)
    return !op.ends_with("_13");
  int64_t version = node.getOpsetVersion();
  return version > 0 && version < 13;
}

llvm::Error checkSoftmax(const Node &node) {
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  return softmaxRows(node, shapeOf(node.getOperand(0)), softmaxIsCoerced(node))
      .takeError();
}

llvm::Error runSoftmax(CudaCall &call) {
  Storage storage = *commonFloatStorage(call.node);
  bool log = call.node.getOpType().starts_with("Log");
  auto rows =
      softmaxRows(call.node, shapeOf(call.in(0)), softmaxIsCoerced(call.node));
  if (!rows)
    return rows.takeError();
  if (call.node.getDomain() == kMsDomain)
    // SoftmaxGrad(dY, Y) -> dX.
    return call.check(launchSoftmaxGrad(storage, call.inPtr(0), call.inPtr(1),
                                        call.outPtr(0), *rows, log,
                                        call.ctx.stream),
                      "SoftmaxGrad kernel");
  return call.check(launchSoftmax(storage, call.inPtr(0), call.outPtr(0), *rows,
                                  log, call.ctx.stream),
                    "Softmax kernel");
}

bool isSimplifiedNorm(const Node &node) {
  return node.getOpType().starts_with("Simplified");
}

/// Rows and width of a layer norm over \p shape split at `axis`.
llvm::Expected<std::pair<int64_t, int64_t>> normRows(const Node &node,
                                                     const Shape &shape) {
  auto axis = normalizeAxis(node, node.getIntAttr("axis", -1), shape.size());
  if (!axis)
    return axis.takeError();
  llvm::ArrayRef<int64_t> dims(shape);
  return std::make_pair(product(dims.take_front(*axis)),
                        product(dims.drop_front(*axis)));
}

llvm::Error checkLayerNorm(const Node &node) {
  bool simplified = isSimplifiedNorm(node);
  // Statistics outputs are fp32.
  llvm::SmallVector<unsigned, 2> stats =
      simplified ? llvm::SmallVector<unsigned, 2>{1}
                 : llvm::SmallVector<unsigned, 2>{1, 2};
  for (unsigned i : stats)
    if (i < node.getNumResults() && node.getResult(i) &&
        node.getResult(i)->getType().getDType() != DType::F32)
      return nodeError(node, "statistics outputs must be float32");
  if (auto storage = commonFloatStorage(node, {}, stats); !storage)
    return storage.takeError();
  auto rows = normRows(node, shapeOf(node.getOperand(0)));
  if (!rows)
    return rows.takeError();
  for (unsigned i : {1u, 2u})
    if (i < node.getNumOperands() && node.getOperand(i) &&
        !(simplified && i == 2) &&
        static_cast<int64_t>(node.getOperand(i)->getType().getNumElements()) !=
            rows->second)
      return nodeError(node, "scale and bias must have one element per "
                             "normalized element");
  return llvm::Error::success();
}

llvm::Error runLayerNorm(CudaCall &call) {
  bool simplified = isSimplifiedNorm(call.node);
  Storage storage =
      *commonFloatStorage(call.node, {},
                          simplified ? llvm::ArrayRef<unsigned>{1}
                                     : llvm::ArrayRef<unsigned>{1, 2});
  auto rows = normRows(call.node, shapeOf(call.in(0)));
  if (!rows)
    return rows.takeError();
  float epsilon = call.node.getFloatAttr("epsilon", 1e-5f);
  return call.check(
      launchLayerNorm(storage, call.inPtr(0), call.inPtr(1),
                      simplified ? nullptr : call.inPtr(2), call.outPtr(0),
                      simplified ? nullptr : call.outAs<float>(1),
                      call.outAs<float>(simplified ? 1 : 2), rows->first,
                      rows->second, epsilon, simplified, call.ctx.stream),
      "LayerNormalization kernel");
}

/// LayerNormalizationGrad(dY, X, scale, mean, inv_std) and
/// SimplifiedLayerNormalizationGrad(dY, X, scale, inv_std).
llvm::Error checkLayerNormGrad(const Node &node) {
  bool simplified = isSimplifiedNorm(node);
  llvm::SmallVector<unsigned, 2> stats =
      simplified ? llvm::SmallVector<unsigned, 2>{3}
                 : llvm::SmallVector<unsigned, 2>{3, 4};
  for (unsigned i : stats)
    if (!node.getOperand(i) ||
        node.getOperand(i)->getType().getDType() != DType::F32)
      return nodeError(node, "saved statistics must be present float32");
  if (auto storage = commonFloatStorage(node, stats); !storage)
    return storage.takeError();
  return normRows(node, shapeOf(node.getOperand(1))).takeError();
}

llvm::Error runLayerNormGrad(CudaCall &call) {
  bool simplified = isSimplifiedNorm(call.node);
  Storage storage = *commonFloatStorage(
      call.node, simplified ? llvm::ArrayRef<unsigned>{3}
                            : llvm::ArrayRef<unsigned>{3, 4});
  auto rows = normRows(call.node, shapeOf(call.in(1)));
  if (!rows)
    return rows.takeError();
  return call.check(launchLayerNormGrad(
                        storage, call.inPtr(0), call.inPtr(1), call.inPtr(2),
                        simplified ? nullptr : call.inAs<float>(3),
                        call.inAs<float>(simplified ? 3 : 4), call.outPtr(0),
                        call.outPtr(1), simplified ? nullptr : call.outPtr(2),
                        rows->first, rows->second, simplified, call.ctx.stream),
                    "LayerNormalizationGrad kernel");
}

std::optional<ReduceKind> reduceKindOf(llvm::StringRef op) {
  return llvm::StringSwitch<std::optional<ReduceKind>>(op)
      .Cases("ReduceSum", "ReduceSumTraining", ReduceKind::Sum)
      .Case("ReduceMean", ReduceKind::Mean)
      .Case("ReduceMax", ReduceKind::Max)
      .Case("ReduceMin", ReduceKind::Min)
      .Case("ReduceSumSquare", ReduceKind::SumSquare)
      .Default(std::nullopt);
}

/// The reduced axes of a Reduce* node as one contiguous [outer, n, inner]
/// (axes from the attribute, or the constant second operand from opset 18
/// and for ReduceSum from 13).
llvm::Expected<RowShape> reduceRows(const Node &node) {
  Shape shape = shapeOf(node.getOperand(0));
  int64_t rank = shape.size();
  std::vector<int64_t> axes;
  if (node.getNumOperands() > 1 && node.getOperand(1)) {
    auto values = constantInts(node, 1, "axes");
    if (!values)
      return values.takeError();
    axes = *values;
  } else {
    axes = node.getIntsAttr("axes", {});
  }
  if (axes.empty()) {
    if (node.getIntAttr("noop_with_empty_axes", 0))
      return RowShape{product(shape), 1, 1};
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  llvm::SmallVector<int64_t, 6> normalized;
  for (int64_t axis : axes) {
    auto a = normalizeAxis(node, axis, rank);
    if (!a)
      return a.takeError();
    normalized.push_back(*a);
  }
  llvm::sort(normalized);
  normalized.erase(std::unique(normalized.begin(), normalized.end()),
                   normalized.end());
  // Unit dimensions between reduced axes do not break contiguity.
  int64_t first = normalized.front(), last = normalized.back();
  for (int64_t d = first; d <= last; ++d)
    if (!llvm::is_contained(normalized, d) && shape[d] != 1)
      return nodeError(node, "reducing non-adjacent axes is not supported "
                             "by the CUDA kernels yet");
  llvm::ArrayRef<int64_t> dims(shape);
  RowShape rows;
  rows.outer = product(dims.take_front(first));
  rows.n = product(dims.slice(first, last - first + 1));
  rows.inner = product(dims.drop_front(last + 1));
  return rows;
}

llvm::Error checkReduce(const Node &node) {
  if (auto storage = commonFloatStorage(node, {1}); !storage)
    return storage.takeError();
  return reduceRows(node).takeError();
}

llvm::Error runReduce(CudaCall &call) {
  Storage storage = *commonFloatStorage(call.node, {1});
  auto rows = reduceRows(call.node);
  if (!rows)
    return rows.takeError();
  return call.check(launchReduce(*reduceKindOf(call.node.getOpType()), storage,
                                 call.inPtr(0), call.outPtr(0), *rows,
                                 call.ctx.stream),
                    "Reduce kernel");
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// The loss geometry and options of a (Grad) SoftmaxCrossEntropyLoss node
/// with log-prob / scores operand \p scoresIndex and labels
/// \p labelsIndex; \p ignoreInput is the Internal variants' ignore_index
/// operand (a constant).
llvm::Expected<SoftmaxCrossEntropyParams>
crossEntropyParams(const Node &node, unsigned scoresIndex, unsigned labelsIndex,
                   std::optional<unsigned> ignoreInput) {
  SoftmaxCrossEntropyParams p;
  Shape scores = shapeOf(node.getOperand(scoresIndex));
  Shape labels = shapeOf(node.getOperand(labelsIndex));
  if (scores.size() < 2 || labels.size() + 1 != scores.size())
    return nodeError(node, "scores and labels do not match");
  p.batch = scores[0];
  p.classes = scores[1];
  p.inner = product(llvm::ArrayRef<int64_t>(scores).drop_front(2));
  llvm::StringRef reduction = node.getStringAttr("reduction", "mean");
  p.reduction = reduction == "none" ? 0 : reduction == "sum" ? 1 : 2;
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return nodeError(node, "unknown reduction '" + reduction + "'");
  DType labelType = node.getOperand(labelsIndex)->getType().getDType();
  if (labelType != DType::I64 && labelType != DType::I32)
    return nodeError(node, "labels must be int64 or int32");
  p.labels32 = labelType == DType::I32;
  if (ignoreInput && *ignoreInput < node.getNumOperands() &&
      node.getOperand(*ignoreInput)) {
    auto value = constantInts(node, *ignoreInput, "ignore_index");
    if (!value)
      return value.takeError();
    if (value->size() != 1)
      return nodeError(node, "ignore_index must be a scalar");
    p.hasIgnoreIndex = true;
    p.ignoreIndex = value->front();
  } else if (node.hasAttr("ignore_index")) {
    p.hasIgnoreIndex = true;
    p.ignoreIndex = node.getIntAttr("ignore_index", 0);
  }
  for (const Value *value : node.getOperands())
    if (value && value != node.getOperand(labelsIndex) &&
        (!ignoreInput || value != node.getOperand(*ignoreInput)) &&
        value->getType().getDType() != DType::F32)
      return nodeError(node, "scores, weights and gradients must be float32");
  for (const Value *value : node.getResults())
    if (value && value->getType().getDType() != DType::F32)
      return nodeError(node, "outputs must be float32");
  return p;
}

bool isInternalLoss(const Node &node) {
  return node.getOpType().contains("Internal");
}

llvm::Error checkCrossEntropy(const Node &node) {
  return crossEntropyParams(node, 0, 1,
                            isInternalLoss(node) ? std::optional<unsigned>(3)
                                                 : std::nullopt)
      .takeError();
}

llvm::Error runCrossEntropy(CudaCall &call) {
  auto p = crossEntropyParams(
      call.node, 0, 1,
      isInternalLoss(call.node) ? std::optional<unsigned>(3) : std::nullopt);
  if (!p)
    return p.takeError();
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchSoftmaxCrossEntropy(call.inAs<float>(0), call.inPtr(1),
                                call.inAs<float>(2), call.outAs<float>(0),
                                call.outAs<float>(1), *p, call.ctx.stream),
      "SoftmaxCrossEntropyLoss kernel");
}

llvm::Error checkCrossEntropyGrad(const Node &node) {
  return crossEntropyParams(node, 1, 2,
                            isInternalLoss(node) ? std::optional<unsigned>(4)
                                                 : std::nullopt)
      .takeError();
}

llvm::Error runCrossEntropyGrad(CudaCall &call) {
  bool internal = isInternalLoss(call.node);
  auto p = crossEntropyParams(
      call.node, 1, 2, internal ? std::optional<unsigned>(4) : std::nullopt);
  if (!p)
    return p.takeError();
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(
      launchSoftmaxCrossEntropyGrad(call.inAs<float>(0), call.inAs<float>(1),
                                    call.inPtr(2), call.inAs<float>(3),
                                    internal ? call.inAs<float>(5) : nullptr,
                                    call.outAs<float>(0), *p, call.ctx.stream),
      "SoftmaxCrossEntropyLossGrad kernel");
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

/// outer, axis extent, index count and inner of Gather(data, indices) over
/// \p dataShape.
struct GatherGeometry {
  int64_t outer, axisExtent, indexCount, inner;
  bool indices32;
};

llvm::Expected<GatherGeometry>
gatherGeometry(const Node &node, const Shape &dataShape, const Value *indices) {
  auto axis = normalizeAxis(node, node.getIntAttr("axis", 0), dataShape.size());
  if (!axis)
    return axis.takeError();
  DType type = indices->getType().getDType();
  if (type != DType::I64 && type != DType::I32)
    return nodeError(node, "indices must be int64 or int32");
  llvm::ArrayRef<int64_t> dims(dataShape);
  GatherGeometry g;
  g.outer = product(dims.take_front(*axis));
  g.axisExtent = dataShape[*axis];
  g.indexCount = indices->getType().getNumElements();
  g.inner = product(dims.drop_front(*axis + 1));
  g.indices32 = type == DType::I32;
  return g;
}

llvm::Error checkGather(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return gatherGeometry(node, shapeOf(node.getOperand(0)), node.getOperand(1))
      .takeError();
}

llvm::Error runGather(CudaCall &call) {
  auto g = gatherGeometry(call.node, shapeOf(call.in(0)), call.in(1));
  if (!g)
    return g.takeError();
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchGather(call.inPtr(0), call.inPtr(1), g->indices32,
                                 call.outPtr(0), g->outer, g->axisExtent,
                                 g->indexCount, g->inner,
                                 elementBytes(call.in(0)), call.ctx.stream),
                    "Gather kernel");
}

/// GatherGrad(shape, indices, dY) -> dX (fp32).
llvm::Error checkGatherGrad(const Node &node) {
  if (node.getOperand(2)->getType().getDType() != DType::F32 ||
      node.getResult(0)->getType().getDType() != DType::F32)
    return nodeError(node, "dY and dX must be float32");
  return gatherGeometry(node, shapeOf(node.getResult(0)), node.getOperand(1))
      .takeError();
}

llvm::Error runGatherGrad(CudaCall &call) {
  auto g = gatherGeometry(call.node, shapeOf(call.out(0)), call.in(1));
  if (!g)
    return g.takeError();
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchGatherGrad(call.inAs<float>(2), call.inPtr(1),
                                     g->indices32, call.outAs<float>(0),
                                     g->outer, g->axisExtent, g->indexCount,
                                     g->inner, call.ctx.stream),
                    "GatherGrad kernel");
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// The ratio and training mode of a dropout-like node into \p p: ratio and
/// training mode operands at \p ratioIndex and \p trainingIndex. A constant
/// ratio is read (and checked) here, any other on the device; without a
/// training_mode operand the op is the identity.
llvm::Error setDropoutMode(CudaCall &call, unsigned ratioIndex,
                           unsigned trainingIndex, DropoutParams &p) {
  const Value *ratio = call.in(ratioIndex);
  if (ratio && ratio->isInitializer()) {
    if (llvm::Error err = ratio->getData().load())
      return err;
    p.ratioValue = static_cast<float>(ratio->getData().getFloatElement(0));
  } else if (ratio) {
    p.ratio = call.inAs<float>(ratioIndex);
  } else {
    p.ratioValue = call.node.getFloatAttr("ratio", 0.5f);
  }
  if (!ratio || ratio->isInitializer())
    if (!(p.ratioValue >= 0.0f && p.ratioValue < 1.0f))
      return nodeError(call.node, "ratio " + std::to_string(p.ratioValue) +
                                      " is outside [0, 1)");
  p.training = call.inAs<uint8_t>(trainingIndex);
  p.inference = !call.in(trainingIndex);
  return llvm::Error::success();
}

/// Dropout's parameters: the random stream and the mode.
llvm::Expected<DropoutParams> dropoutParams(CudaCall &call, unsigned ratioIndex,
                                            unsigned trainingIndex) {
  DropoutParams p;
  std::optional<uint64_t> streamId = call.node.getStreamId();
  if (!streamId)
    return nodeError(call.node, "the random node has no stream id");
  p.seed = call.ctx.seed;
  p.streamId = *streamId;
  p.step = call.ctx.step;
  if (llvm::Error err = setDropoutMode(call, ratioIndex, trainingIndex, p))
    return err;
  return p;
}

bool isBitmaskDropout(const Node &node) {
  return node.getOpType().starts_with("Bitmask");
}

llvm::Error checkDropout(const Node &node) {
  if (node.getNumOperands() > 1 && node.getOperand(1) &&
      node.getOperand(1)->getType().getDType() != DType::F32)
    return nodeError(node, "ratio must be float32");
  DType maskType = isBitmaskDropout(node) ? DType::U32 : DType::Bool;
  if (node.getNumResults() > 1 && node.getResult(1)) {
    const TensorType &mask = node.getResult(1)->getType();
    if (mask.getDType() != maskType)
      return nodeError(node, "the mask must be " + dtypeName(maskType));
    uint64_t elements = node.getResult(0)->getType().getNumElements();
    if (maskType == DType::U32 && mask.getNumElements() != (elements + 31) / 32)
      return nodeError(node, "the mask must have one word per 32 elements");
  }
  if (!node.getStreamId())
    return nodeError(node, "the random node has no stream id");
  return commonFloatStorage(node, {1, 2}, {1}).takeError();
}

llvm::Error runDropout(CudaCall &call) {
  Storage storage = *commonFloatStorage(call.node, {1, 2}, {1});
  auto p = dropoutParams(call, 1, 2);
  if (!p)
    return p.takeError();
  if (isBitmaskDropout(call.node))
    return call.check(
        launchBitmaskDropout(
            storage, call.inPtr(0), call.outPtr(0), call.outAs<uint32_t>(1),
            call.out(0)->getType().getNumElements(), *p, call.ctx.stream),
        "BitmaskDropout kernel");
  return call.check(launchDropout(storage, call.inPtr(0), call.outPtr(0),
                                  call.outAs<uint8_t>(1),
                                  call.out(0)->getType().getNumElements(), *p,
                                  call.ctx.stream),
                    "Dropout kernel");
}

/// DropoutGrad(dY, mask, ratio?, training_mode?).
llvm::Error checkDropoutGrad(const Node &node) {
  DType maskType = isBitmaskDropout(node) ? DType::U32 : DType::Bool;
  if (node.getOperand(1)->getType().getDType() != maskType)
    return nodeError(node, "the mask must be " + dtypeName(maskType));
  return commonFloatStorage(node, {1, 2, 3}).takeError();
}

llvm::Error runDropoutGrad(CudaCall &call) {
  Storage storage = *commonFloatStorage(call.node, {1, 2, 3});
  DropoutParams p;
  if (llvm::Error err = setDropoutMode(call, 2, 3, p))
    return err;
  return call.check(launchDropoutGrad(storage, call.inPtr(0), call.inPtr(1),
                                      isBitmaskDropout(call.node),
                                      call.outPtr(0),
                                      call.out(0)->getType().getNumElements(),
                                      p, call.ctx.stream),
                    "DropoutGrad kernel");
}

//===----------------------------------------------------------------------===//
// Accumulators and optimizers
//===----------------------------------------------------------------------===//

/// InPlaceAccumulatorV2(buffer, value, overwrite?) -> (updated,
/// buffer_out?).
llvm::Error checkAccumulator(const Node &node) {
  for (unsigned i : {0u, 1u}) {
    std::optional<Storage> s =
        storageOf(node.getOperand(i)->getType().getDType());
    if (!s || !isFloatStorage(*s))
      return nodeError(node, "buffer and value must be float tensors");
  }
  if (node.getResult(0)->getType().getDType() != DType::Bool)
    return nodeError(node, "the updated flag must be bool");
  if (node.getNumResults() > 1 && node.getResult(1) &&
      node.getResult(1)->getType().getDType() !=
          node.getOperand(0)->getType().getDType())
    return nodeError(node, "buffer_out must have the buffer's type");
  return llvm::Error::success();
}

llvm::Error runAccumulator(CudaCall &call) {
  Storage buffer = *storageOf(call.in(0)->getType().getDType());
  Storage value = *storageOf(call.in(1)->getType().getDType());
  return call.check(
      launchAccumulate(buffer, const_cast<void *>(call.inPtr(0)), value,
                       call.inPtr(1), call.inAs<uint8_t>(2),
                       call.outAs<uint8_t>(0), call.outPtr(1),
                       call.in(0)->getType().getNumElements(), call.ctx.stream),
      "InPlaceAccumulatorV2 kernel");
}

llvm::Error checkOptimizer(const Node &node) {
  OptimizerOperands layout(node);
  if (!layout.isWellFormed())
    return nodeError(node, "operands do not form the optimizer's groups");
  bool adamW = layout.getKind() == OptimizerKind::AdamW;
  if (node.getOperand(0)->getType().getDType() != DType::F32 ||
      (adamW && node.getOperand(1)->getType().getDType() != DType::I64))
    return nodeError(node, "lr must be float32 and step int64");
  for (unsigned i = 0; i < layout.size(); ++i) {
    llvm::SmallVector<unsigned, 4> indices = {layout.paramIndex(i),
                                              layout.gradIndex(i)};
    for (unsigned k = 0; k < OptimizerOperands::numStates(layout.getKind());
         ++k)
      indices.push_back(layout.stateIndex(k, i));
    uint64_t elements = node.getOperand(indices[0])->getType().getNumElements();
    for (unsigned index : indices) {
      const Value *value = node.getOperand(index);
      if (!value || value->getType().getDType() != DType::F32 ||
          value->getType().getNumElements() != elements)
        return nodeError(node, "the weights, gradients and moments of "
                               "parameter " +
                                   llvm::Twine(i) +
                                   " must be float32 of one shape");
    }
  }
  if (adamW) {
    int64_t mode = node.getIntAttr("adam_mode", 0);
    if (mode != 0 && mode != 1)
      return nodeError(node, "adam_mode must be 0 or 1");
  }
  return llvm::Error::success();
}

llvm::Error runOptimizer(CudaCall &call) {
  OptimizerOperands layout(call.node);
  bool adamW = layout.getKind() == OptimizerKind::AdamW;
  const uint8_t *signal = call.inAs<uint8_t>(
      OptimizerOperands::updateSignalIndex(layout.getKind()));
  AdamWParams params;
  params.alpha = call.node.getFloatAttr("alpha", 0.9f);
  params.beta = call.node.getFloatAttr("beta", 0.999f);
  params.epsilon = call.node.getFloatAttr("epsilon", 1e-8f);
  params.weightDecay = call.node.getFloatAttr("weight_decay", 1e-2f);
  params.mode = static_cast<int32_t>(call.node.getIntAttr("adam_mode", 0));
  params.correctBias = call.node.getIntAttr("correct_bias", 1) == 1;
  params.lr = call.inAs<float>(0);
  params.step = adamW ? call.inAs<int64_t>(1) : nullptr;
  params.updateSignal = signal;
  llvm::SmallVector<OptimizerTensor, kOptimizerTensorsPerLaunch> batch;
  auto flush = [&]() -> llvm::Error {
    if (batch.empty())
      return llvm::Error::success();
    cudaError_t status =
        adamW ? launchAdamW(batch.data(), batch.size(), params, call.ctx.stream)
              : launchSgd(batch.data(), batch.size(), params.lr, signal,
                          call.ctx.stream);
    batch.clear();
    return call.check(status, adamW ? "AdamW kernel" : "SGD kernel");
  };
  for (unsigned i = 0; i < layout.size(); ++i) {
    OptimizerTensor t;
    t.weight = const_cast<float *>(call.inAs<float>(layout.paramIndex(i)));
    t.grad = call.inAs<float>(layout.gradIndex(i));
    if (adamW) {
      t.m1 = const_cast<float *>(call.inAs<float>(layout.stateIndex(0, i)));
      t.m2 = const_cast<float *>(call.inAs<float>(layout.stateIndex(1, i)));
    }
    t.elements = call.in(layout.paramIndex(i))->getType().getNumElements();
    batch.push_back(t);
    if (batch.size() == kOptimizerTensorsPerLaunch)
      if (llvm::Error err = flush())
        return err;
  }
  if (llvm::Error err = flush())
    return err;
  if (!call.out(0))
    return llvm::Error::success();
  std::optional<Storage> flagStorage =
      storageOf(call.out(0)->getType().getDType());
  return call.check(launchOptimizerFlag(flagStorage.value_or(Storage::F32),
                                        call.outPtr(0),
                                        call.out(0)->getType().getNumElements(),
                                        signal, call.ctx.stream),
                    "optimizer flag kernel");
}

llvm::Error runMatMul(CudaCall &call) {
  return runCudaMatMul(call.launch, call.ctx);
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

const llvm::StringMap<KernelEntry> &getTable() {
  static const llvm::StringMap<KernelEntry> table = [] {
    llvm::StringMap<KernelEntry> t;
    auto add = [&](llvm::StringRef domain, llvm::StringRef op, CheckFn check,
                   RunFn run) {
      t[(domain + "::" + op).str()] = {check, run};
    };
    for (const char *op :
         {"Relu", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh",
          "Sigmoid", "Erf", "Gelu", "Add", "Sub", "Mul", "Div", "Pow", "Max",
          "Min", "Sum"})
      add("", op, checkElementwise, runElementwise);
    for (const char *op :
         {"Gelu", "FastGelu", "BiasGelu", "ReluGrad", "GeluGrad",
          "FastGeluGrad", "SigmoidGrad", "TanhGrad", "BiasGeluGrad_dX",
          "BiasFastGeluGrad_dX", "QuickGelu", "QuickGeluGrad", "Scale"})
      add(kMsDomain, op, checkElementwise, runElementwise);
    for (const char *op :
         {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
      add("", op, checkAnyElement, runCopy);
    add("", "Transpose", checkTranspose, runTranspose);
    add("", "Expand", checkAnyElement, runExpand);
    add("", "Slice", checkSlice, runSlice);
    add("", "Tile", checkTile, runTile);
    add("", "Pad", checkPad, runPad);
    add(kMsDomain, "SliceGrad", checkSliceGrad, runSliceGrad);
    add("", "Concat", checkConcat, runConcat);
    add(kMsDomain, "ConcatTraining", checkConcat, runConcat);
    add("", "Split", checkSplit, runSplit);
    add(kMsDomain, "SplitTraining", checkSplit, runSplit);
    add("", "Shape", checkShape, runShape);
    add("", "Where", checkWhere, runWhere);
    for (const char *op :
         {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
          "Or", "Xor", "IsNaN", "IsInf", "Not"})
      add("", op, checkCompare, runCompare);
    add("", "ConstantOfShape", checkConstantOfShape, runConstantOfShape);
    add("", "Cast", checkCast, runCast);
    for (const char *op : {"Softmax", "LogSoftmax"})
      add("", op, checkSoftmax, runSoftmax);
    for (const char *op : {"SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                           "LogSoftmaxGrad_13"})
      add(kMsDomain, op, checkSoftmax, runSoftmax);
    add("", "LayerNormalization", checkLayerNorm, runLayerNorm);
    add("", "SimplifiedLayerNormalization", checkLayerNorm, runLayerNorm);
    add(kMsDomain, "SimplifiedLayerNormalization", checkLayerNorm,
        runLayerNorm);
    add(kMsDomain, "LayerNormalizationGrad", checkLayerNormGrad,
        runLayerNormGrad);
    add(kMsDomain, "SimplifiedLayerNormalizationGrad", checkLayerNormGrad,
        runLayerNormGrad);
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                           "ReduceSumSquare"})
      add("", op, checkReduce, runReduce);
    add(kMsDomain, "ReduceSumTraining", checkReduce, runReduce);
    add("", "SoftmaxCrossEntropyLoss", checkCrossEntropy, runCrossEntropy);
    add(kMsDomain, "SoftmaxCrossEntropyLossInternal", checkCrossEntropy,
        runCrossEntropy);
    add(kMsDomain, "SoftmaxCrossEntropyLossGrad", checkCrossEntropyGrad,
        runCrossEntropyGrad);
    add(kMsDomain, "SoftmaxCrossEntropyLossInternalGrad", checkCrossEntropyGrad,
        runCrossEntropyGrad);
    add("", "Gather", checkGather, runGather);
    add(kMsDomain, "GatherGrad", checkGatherGrad, runGatherGrad);
    add("", "Dropout", checkDropout, runDropout);
    add(kMsDomain, "DropoutGrad", checkDropoutGrad, runDropoutGrad);
    add(kMsDomain, "BitmaskDropout", checkDropout, runDropout);
    add(kMsDomain, "BitmaskDropoutGrad", checkDropoutGrad, runDropoutGrad);
    add(kMsDomain, "InPlaceAccumulatorV2", checkAccumulator, runAccumulator);
    add(kMsDomain, "AdamWOptimizer", checkOptimizer, runOptimizer);
    add(kMsDomain, "SGDOptimizerV2", checkOptimizer, runOptimizer);
    for (const char *op : {"MatMul", "Gemm"})
      add("", op, checkCudaMatMul, runMatMul);
    add(kMsDomain, "FusedMatMul", checkCudaMatMul, runMatMul);
    return t;
  }();
  return table;
}

const KernelEntry *lookup(const Node &node) {
  llvm::StringRef domain = node.getDomain();
  if (domain == "ai.onnx")
    domain = "";
  auto it = getTable().find((domain + "::" + node.getOpType()).str());
  return it == getTable().end() ? nullptr : &it->second;
}

} // namespace

llvm::Error cuda::checkCudaKernel(const Node &node) {
  const KernelEntry *entry = lookup(node);
  if (!entry)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no CUDA kernel for '" + node.getOp().str() +
                                       "' yet (node " + node.describe() +
                                       "); run it with --backend=cpu");
  for (const Value *value : node.getOperands())
    if (value && !value->getType().hasStaticShape())
      return nodeError(node, "shapes must be static");
  return entry->check(node);
}

llvm::Error cuda::runCudaKernel(const NodeLaunch &launch,
                                CudaKernelContext &ctx) {
  const KernelEntry *entry = lookup(*launch.node);
  if (!entry)
    return checkCudaKernel(*launch.node);
  CudaCall call{*launch.node, launch, ctx};
  return entry->run(call);
}

bool gmopt::hasCudaKernelFor(llvm::StringRef domain, llvm::StringRef opType) {
  if (domain == "ai.onnx")
    domain = "";
  return getTable().count((domain + "::" + opType).str()) != 0;
}

llvm::Error gmopt::checkCudaNode(const Node &node) {
  return cuda::checkCudaKernel(node);
}
