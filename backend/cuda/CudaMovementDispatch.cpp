//===- CudaMovementDispatch.cpp - The CUDA table's data-movement entries --===//
//
// Check and run functions of the kernel table (CudaDispatch.cpp) for the
// ops that move or select bytes: copies and views, Transpose, Expand,
// Tile, Pad, Slice and SliceGrad, Concat, Split, Shape, Where, the
// comparisons, ConstantOfShape, Cast and CastLike. Geometry (offsets,
// strides) is worked out on the host from the node's static shapes and
// constant operands, then one strided-copy, fill or elementwise kernel runs.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "ir/ops/Axes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSwitch.h"

#include <cstring>
#include <numeric>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

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

/// Pad(data, pads, constant_value?, axes?). Constant mode: the output
/// filled with the constant (0 without it), then the overlapping region
/// copied (IndexingPlan's padCopy). Reflect, edge and wrap (the modes the
/// schema and the CPU kernel accept): one kernel reading each output
/// element's source (PadMath.h). pads, axes and the constant must be
/// initializers.
struct PadGeometry {
  PadMode mode = PadMode::Constant;
  PadCopy copy;
  PadIndexing gather;
  uint64_t pattern = 0;
};

llvm::Expected<PadGeometry> padGeometry(const Node &node) {
  std::string modeName = node.getStringAttr("mode", "constant").str();
  PadGeometry g;
  std::optional<PadMode> mode = parsePadMode(modeName);
  if (!mode)
    return nodeError(node, "unknown mode '" + modeName + "'");
  g.mode = *mode;
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
  if (!padCopy(in, out, begin, g.copy))
    return nodeError(node, "the output's rank differs from the input's");
  if (g.mode != PadMode::Constant &&
      !padIndexing(in, out, begin, g.mode, g.gather))
    return nodeError(node, "cannot reflect, extend or wrap an empty "
                           "dimension, or too many dimensions");
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
  if (g->mode != PadMode::Constant)
    return call.check(launchPad(bytes, call.inPtr(0), call.outPtr(0), elements,
                                g->gather, g->pattern, call.ctx.stream),
                      "pad kernel");
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
    ops::ShapeSlice slice = ops::getShapeSlice(call.node, in.size());
    for (int64_t d = slice.start; d < slice.end; ++d)
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

/// CastLike(input, target_type): Cast to the target's element type.
llvm::Error checkCastLike(const Node &node) {
  const Value *target = node.getOperand(1);
  if (!target ||
      target->getType().getDType() != node.getResult(0)->getType().getDType())
    return nodeError(node, "the output must have target_type's element type");
  return checkCast(node);
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

} // namespace

void cuda::dispatch::addMovementKernels(llvm::StringMap<KernelEntry> &table) {
  auto add = [&](llvm::StringRef domain, llvm::StringRef op, CheckFn check,
                 RunFn run) {
    table[(domain + "::" + op).str()] = {check, run};
  };
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
  add("", "CastLike", checkCastLike, runCast);
}
