//===- CudaMovementDispatch.cpp - The CUDA table's data-movement entries --===//
//
// Entries of the kernel table (CudaDispatch.cpp) for the ops that move or
// select bytes: copies and views, Transpose, Expand, Tile, Pad, Slice and
// SliceGrad, Concat, Split, Shape, Where, the comparisons, ConstantOfShape,
// Cast and CastLike. Geometry (offsets, collapsed strides) is worked out
// once, when a node is prepared, from its static shapes and constant
// operands into a MovementPlan; each launch enqueues the plan's strided
// copies, fills or element kernels.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "ir/ops/Axes.h"
#include "ir/ops/SliceSpec.h"

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
/// One strided copy of a movement plan: operand \p operand, from byte
/// \p inOffset, to result \p result at byte \p outOffset, over the
/// collapsed indexing \p ix of \p elements elements.
struct StridedCopy {
  unsigned operand = 0, result = 0;
  int64_t inOffset = 0, outOffset = 0;
  int64_t elements = 0;
  BroadcastIndexing ix;
};

/// A data-movement node decoded once: the copies, fills and element
/// kernels its launch enqueues, with every offset, stride and element type
/// worked out.
struct MovementPlan {
  /// Bytes of one output element.
  int64_t elementBytes = 0;
  /// Elements of result 0.
  int64_t elements = 0;
  /// Bytes of result 0 (whole-tensor copies and clears).
  uint64_t outputBytes = 0;
  llvm::SmallVector<StridedCopy, 4> copies;
  /// Fill value (Pad, ConstantOfShape).
  uint64_t pattern = 0;
  /// Pad's mode and, for reflect / edge / wrap, its source indexing.
  PadMode padMode = PadMode::Constant;
  PadIndexing padGather;
  /// Comparisons, Where: the broadcast indexing; the predicate and the
  /// operands' storage, and the operand read second (the one-operand tests
  /// read the first twice).
  BroadcastIndexing ix;
  CompareOp compare = CompareOp::Equal;
  Storage storage = Storage::F32;
  unsigned second = 0;
  /// Cast's target storage.
  Storage castTo = Storage::F32;
  /// Host values a launch copies to result \p hostResult (Shape's shape,
  /// ConcatTraining's lengths), kept here so they outlive the copy.
  std::vector<int64_t> hostValues;
  /// hostValues, page-locked for the launches' copies.
  PinnedCopy pinnedValues;
  unsigned hostResult = 0;
};

/// A strided copy of \p extents from operand \p operand (byte offset
/// \p inOffset, element strides \p inStrides) to result \p result.
llvm::Expected<StridedCopy>
planCopy(const Node &node, unsigned operand, unsigned result,
         const Shape &extents, const Shape &inStrides, const Shape &outStrides,
         int64_t inOffset = 0, int64_t outOffset = 0) {
  StridedCopy copy;
  copy.operand = operand;
  copy.result = result;
  copy.inOffset = inOffset;
  copy.outOffset = outOffset;
  copy.elements = product(extents);
  llvm::SmallVector<Shape, 4> strides = {inStrides, Shape(extents.size(), 0),
                                         Shape(extents.size(), 0), outStrides};
  if (!collapseIndexing(extents, strides, copy.ix))
    return nodeError(node, "too many dimensions");
  return copy;
}

/// The plan's strided copies.
llvm::Error launchCopies(CudaCall &call, const MovementPlan &p) {
  for (const StridedCopy &copy : p.copies)
    if (llvm::Error err = call.check(
            launchStridedCopy(p.elementBytes,
                              call.inAs<uint8_t>(copy.operand) + copy.inOffset,
                              call.outAs<uint8_t>(copy.result) + copy.outOffset,
                              copy.elements, copy.ix, call.ctx.stream),
            "strided copy kernel"))
      return err;
  return llvm::Error::success();
}

/// Identity, Reshape, Squeeze, Unsqueeze, Flatten (and a Cast to its own
/// type) when the plan gave the result its own bytes: a device-to-device
/// copy.
llvm::Error launchCopy(CudaCall &call, const MovementPlan &p) {
  if (call.outPtr(0) == call.inPtr(0))
    return llvm::Error::success();
  return call.check(cudaMemcpyAsync(call.outPtr(0), call.inPtr(0),
                                    p.outputBytes, cudaMemcpyDeviceToDevice,
                                    call.ctx.stream),
                    "cudaMemcpyAsync");
}

/// Bytes and elements of \p node's result 0, common to every plan.
MovementPlan planFor(const Node &node) {
  MovementPlan p;
  const Value *out = node.getResult(0);
  p.elementBytes = elementBytes(out);
  p.elements = out->getType().getNumElements();
  p.outputBytes = out->getType().getSizeInBytes();
  return p;
}

llvm::Expected<MovementPlan> decodeCopy(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return planFor(node);
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

llvm::Expected<MovementPlan> decodeTranspose(const Node &node) {
  if (llvm::Error err = checkTranspose(node))
    return err;
  Shape perm = *transposePermutation(node);
  Shape in = shapeOf(node.getOperand(0)), out = shapeOf(node.getResult(0));
  Shape inStrides = contiguousStrides(in), strides;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()))
      return nodeError(node, "perm names a dimension the input lacks");
    strides.push_back(inStrides[p]);
  }
  MovementPlan p = planFor(node);
  auto copy = planCopy(node, 0, 0, out, strides, contiguousStrides(out));
  if (!copy)
    return copy.takeError();
  p.copies.push_back(*copy);
  return p;
}

llvm::Expected<MovementPlan> decodeExpand(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  Shape out = shapeOf(node.getResult(0)), strides;
  if (!broadcastStrides(shapeOf(node.getOperand(0)), out, strides))
    return nodeError(node, "the input does not broadcast to the output");
  MovementPlan p = planFor(node);
  auto copy = planCopy(node, 0, 0, out, strides, contiguousStrides(out));
  if (!copy)
    return copy.takeError();
  p.copies.push_back(*copy);
  return p;
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

llvm::Expected<MovementPlan> decodeTile(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  auto ix = tileGeometry(node);
  if (!ix)
    return ix.takeError();
  MovementPlan p = planFor(node);
  if (p.elements) {
    StridedCopy copy;
    copy.elements = p.elements;
    copy.ix = *ix;
    p.copies.push_back(copy);
  }
  return p;
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

llvm::Expected<MovementPlan> decodePad(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  auto g = padGeometry(node);
  if (!g)
    return g.takeError();
  MovementPlan p = planFor(node);
  p.padMode = g->mode;
  p.padGather = g->gather;
  p.pattern = g->pattern;
  if (g->mode == PadMode::Constant && product(g->copy.extents)) {
    int64_t bytes = p.elementBytes;
    auto copy = planCopy(node, 0, 0, g->copy.extents,
                         contiguousStrides(shapeOf(node.getOperand(0))),
                         contiguousStrides(shapeOf(node.getResult(0))),
                         g->copy.inOffset * bytes, g->copy.outOffset * bytes);
    if (!copy)
      return copy.takeError();
    p.copies.push_back(*copy);
  }
  return p;
}

llvm::Error launchPadPlan(CudaCall &call, const MovementPlan &p) {
  if (!p.elements)
    return llvm::Error::success();
  if (p.padMode != PadMode::Constant)
    return call.check(launchPad(p.elementBytes, call.inPtr(0), call.outPtr(0),
                                p.elements, p.padGather, p.pattern,
                                call.ctx.stream),
                      "pad kernel");
  if (llvm::Error err =
          call.check(launchFill(p.elementBytes, p.pattern, call.outPtr(0),
                                p.elements, call.ctx.stream),
                     "fill kernel"))
    return err;
  return launchCopies(call, p);
}

/// Where Slice's (or SliceGrad's) result sits in \p inShape: ops::resolveSlice
/// (ir/ops/SliceSpec.h, the shape folder's and the CPU kernels' reading)
/// of its constant starts, ends, axes and steps (operands \p firstOperand..,
/// opset 10+) or attributes (opset 1), checked against \p sliceShape, the
/// node's static slice extents.
llvm::Expected<ops::SliceSpec> sliceSpec(const Node &node, const Shape &inShape,
                                         const Shape &sliceShape,
                                         unsigned firstOperand) {
  std::vector<int64_t> lists[4];
  if (node.getNumOperands() > firstOperand) {
    const char *names[4] = {"starts", "ends", "axes", "steps"};
    for (unsigned k = 0; k < 4; ++k) {
      unsigned index = firstOperand + k;
      if (k >= 2 && (index >= node.getNumOperands() || !node.getOperand(index)))
        continue;
      auto values = constantInts(node, index, names[k]);
      if (!values)
        return values.takeError();
      lists[k] = std::move(*values);
    }
  } else {
    lists[0] = node.getIntsAttr("starts", {});
    lists[1] = node.getIntsAttr("ends", {});
    lists[2] = node.getIntsAttr("axes", {});
  }
  auto spec =
      ops::resolveSlice(inShape, lists[0], lists[1], lists[2], lists[3]);
  if (!spec)
    return nodeError(node, llvm::toString(spec.takeError()));
  if (llvm::ArrayRef<int64_t>(spec->shape) !=
      llvm::ArrayRef<int64_t>(sliceShape))
    return nodeError(node, "the slice's extents differ from its static shape");
  return std::move(*spec);
}

/// The element offset of \p spec's first element in a contiguous tensor
/// of \p shape, and the strides that step through the slice there.
std::pair<int64_t, Shape> sliceStrides(const ops::SliceSpec &spec,
                                       const Shape &shape) {
  Shape contiguous = contiguousStrides(shape), strides;
  int64_t offset = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    offset += spec.begin[d] * contiguous[d];
    strides.push_back(contiguous[d] * spec.step[d]);
  }
  return {offset, strides};
}

llvm::Expected<MovementPlan> decodeSlice(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  Shape in = shapeOf(node.getOperand(0)), out = shapeOf(node.getResult(0));
  auto spec = sliceSpec(node, in, out, 1);
  if (!spec)
    return spec.takeError();
  auto [offset, strides] = sliceStrides(*spec, in);
  MovementPlan p = planFor(node);
  auto copy = planCopy(node, 0, 0, out, strides, contiguousStrides(out),
                       offset * p.elementBytes);
  if (!copy)
    return copy.takeError();
  p.copies.push_back(*copy);
  return p;
}

/// SliceGrad(dY, shape, starts, ends, axes?, steps?): zeros, then dY into
/// the sliced region.
llvm::Expected<MovementPlan> decodeSliceGrad(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  Shape full = shapeOf(node.getResult(0)), dy = shapeOf(node.getOperand(0));
  auto spec = sliceSpec(node, full, dy, 2);
  if (!spec)
    return spec.takeError();
  auto [offset, strides] = sliceStrides(*spec, full);
  MovementPlan p = planFor(node);
  auto copy = planCopy(node, 0, 0, dy, contiguousStrides(dy), strides, 0,
                       offset * p.elementBytes);
  if (!copy)
    return copy.takeError();
  p.copies.push_back(*copy);
  return p;
}

/// SliceGrad: zeros, then dY into the sliced region.
llvm::Error launchSliceGrad(CudaCall &call, const MovementPlan &p) {
  if (llvm::Error err = call.check(
          cudaMemsetAsync(call.outPtr(0), 0, p.outputBytes, call.ctx.stream),
          "cudaMemsetAsync"))
    return err;
  return launchCopies(call, p);
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

llvm::Expected<MovementPlan> decodeCompare(const Node &node) {
  if (llvm::Error err = checkCompare(node))
    return err;
  std::optional<CompareOp> op = compareOpOf(node);
  if (!op)
    return nodeError(node, "not a comparison");
  Shape out = shapeOf(node.getResult(0));
  MovementPlan p = planFor(node);
  p.compare = *op;
  p.storage = *storageOf(node.getOperand(0)->getType().getDType());
  p.second = node.getNumOperands() > 1 ? 1 : 0;
  auto ix = broadcastIndexing(
      node, {shapeOf(node.getOperand(0)), shapeOf(node.getOperand(p.second))},
      out);
  if (!ix)
    return ix.takeError();
  p.ix = *ix;
  return p;
}

llvm::Error launchComparePlan(CudaCall &call, const MovementPlan &p) {
  return call.check(launchCompare(p.compare, p.storage, call.inPtr(0),
                                  call.inPtr(p.second), call.outAs<uint8_t>(0),
                                  p.elements, p.ix, call.ctx.stream),
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

llvm::Expected<MovementPlan> decodeConstantOfShape(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  auto pattern = constantOfShapePattern(node);
  if (!pattern)
    return pattern.takeError();
  MovementPlan p = planFor(node);
  p.pattern = *pattern;
  return p;
}

llvm::Error launchFillPlan(CudaCall &call, const MovementPlan &p) {
  return call.check(launchFill(p.elementBytes, p.pattern, call.outPtr(0),
                               p.elements, call.ctx.stream),
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

llvm::Expected<MovementPlan> decodeWhere(const Node &node) {
  if (llvm::Error err = checkWhere(node))
    return err;
  MovementPlan p = planFor(node);
  auto ix = broadcastIndexing(node,
                              {shapeOf(node.getOperand(0)),
                               shapeOf(node.getOperand(1)),
                               shapeOf(node.getOperand(2))},
                              shapeOf(node.getResult(0)));
  if (!ix)
    return ix.takeError();
  p.ix = *ix;
  return p;
}

llvm::Error launchWherePlan(CudaCall &call, const MovementPlan &p) {
  return call.check(launchWhere(p.elementBytes, call.inAs<uint8_t>(0),
                                call.inPtr(1), call.inPtr(2), call.outPtr(0),
                                p.elements, p.ix, call.ctx.stream),
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

llvm::Expected<MovementPlan> decodeConcat(const Node &node) {
  if (llvm::Error err = checkConcat(node))
    return err;
  Shape out = shapeOf(node.getResult(0));
  int64_t axis = *normalizeAxis(node, node.getIntAttr("axis", 0), out.size());
  Shape outStrides = contiguousStrides(out);
  MovementPlan p = planFor(node);
  int64_t offset = 0;
  for (unsigned i = 0; i < node.getNumOperands(); ++i) {
    const Value *input = node.getOperand(i);
    if (!input)
      continue;
    Shape in = shapeOf(input);
    if (in.size() != out.size())
      return nodeError(node, "the inputs must have the output's rank");
    auto copy = planCopy(node, i, 0, in, contiguousStrides(in), outStrides, 0,
                         offset * p.elementBytes);
    if (!copy)
      return copy.takeError();
    p.copies.push_back(*copy);
    offset += in[axis] * outStrides[axis];
    p.hostValues.push_back(in[axis]);
  }
  const Value *lengths = node.getNumResults() > 1 ? node.getResult(1) : nullptr;
  if (!lengths) {
    p.hostValues.clear();
    return p;
  }
  if (lengths->getType().getSizeInBytes() !=
      p.hostValues.size() * sizeof(int64_t))
    return nodeError(node, "the lengths output does not hold one extent per "
                           "input");
  p.hostResult = 1;
  return p;
}

/// Concat: the copies, then ConcatTraining's lengths from the plan.
llvm::Error launchConcat(CudaCall &call, const MovementPlan &p) {
  if (llvm::Error err = launchCopies(call, p))
    return err;
  if (p.hostValues.empty())
    return llvm::Error::success();
  return p.pinnedValues.upload(call, call.outPtr(p.hostResult),
                               p.hostValues.data(),
                               p.hostValues.size() * sizeof(int64_t));
}

/// Split / SplitTraining: each output copied from its slab of the input.
llvm::Error checkSplit(const Node &node) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  return normalizeAxis(node, node.getIntAttr("axis", 0),
                       node.getOperand(0)->getType().getRank())
      .takeError();
}

llvm::Expected<MovementPlan> decodeSplit(const Node &node) {
  if (llvm::Error err = checkSplit(node))
    return err;
  Shape in = shapeOf(node.getOperand(0));
  int64_t axis = *normalizeAxis(node, node.getIntAttr("axis", 0), in.size());
  Shape inStrides = contiguousStrides(in);
  MovementPlan p;
  p.elementBytes = elementBytes(node.getOperand(0));
  int64_t offset = 0;
  for (unsigned i = 0; i < node.getNumResults(); ++i) {
    const Value *result = node.getResult(i);
    if (!result)
      continue;
    Shape out = shapeOf(result);
    if (out.size() != in.size())
      return nodeError(node, "the outputs must have the input's rank");
    auto copy = planCopy(node, 0, i, out, inStrides, contiguousStrides(out),
                         offset * p.elementBytes);
    if (!copy)
      return copy.takeError();
    p.copies.push_back(*copy);
    offset += out[axis] * inStrides[axis];
  }
  return p;
}

/// Shape: the static shape, copied from host memory that outlives the copy.
llvm::Error checkShape(const Node &node) {
  if (node.getResult(0)->getType().getDType() != DType::I64)
    return nodeError(node, "the result must be int64");
  return llvm::Error::success();
}

llvm::Expected<MovementPlan> decodeShape(const Node &node) {
  if (llvm::Error err = checkShape(node))
    return err;
  MovementPlan p = planFor(node);
  Shape in = shapeOf(node.getOperand(0));
  ops::ShapeSlice slice = ops::getShapeSlice(node, in.size());
  for (int64_t d = slice.start; d < slice.end; ++d)
    p.hostValues.push_back(in[d]);
  if (p.outputBytes != p.hostValues.size() * sizeof(int64_t))
    return nodeError(node, "the result does not hold the shape");
  return p;
}

/// Shape: the static shape, copied from the plan, which outlives the copy.
llvm::Error launchShape(CudaCall &call, const MovementPlan &p) {
  if (!p.outputBytes)
    return llvm::Error::success();
  return p.pinnedValues.upload(call, call.outPtr(0), p.hostValues.data(),
                               p.outputBytes);
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

llvm::Expected<MovementPlan> decodeCastOrLike(const Node &node, bool like) {
  if (llvm::Error err = like ? checkCastLike(node) : checkCast(node))
    return err;
  MovementPlan p = planFor(node);
  p.storage = *storageOf(node.getOperand(0)->getType().getDType());
  p.castTo = *storageOf(node.getResult(0)->getType().getDType());
  return p;
}

llvm::Expected<MovementPlan> decodeCast(const Node &node) {
  return decodeCastOrLike(node, false);
}

llvm::Expected<MovementPlan> decodeCastLike(const Node &node) {
  return decodeCastOrLike(node, true);
}

llvm::Error launchCastPlan(CudaCall &call, const MovementPlan &p) {
  if (p.storage == p.castTo)
    return launchCopy(call, p);
  return call.check(launchCast(p.storage, p.castTo, call.inPtr(0),
                               call.outPtr(0), p.elements, call.ctx.stream),
                    "Cast kernel");
}

} // namespace

void cuda::dispatch::addMovementKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry copy = decodedEntry<MovementPlan, decodeCopy, launchCopy>();
  for (const char *op :
       {"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
    addEntry(table, "", op, copy);
  addEntry(table, "", "Transpose",
           decodedEntry<MovementPlan, decodeTranspose, launchCopies>());
  addEntry(table, "", "Expand",
           decodedEntry<MovementPlan, decodeExpand, launchCopies>());
  addEntry(table, "", "Slice",
           decodedEntry<MovementPlan, decodeSlice, launchCopies>());
  addEntry(table, "", "Tile",
           decodedEntry<MovementPlan, decodeTile, launchCopies>());
  addEntry(table, "", "Pad",
           decodedEntry<MovementPlan, decodePad, launchPadPlan>());
  addEntry(table, kMsDomain, "SliceGrad",
           decodedEntry<MovementPlan, decodeSliceGrad, launchSliceGrad>());
  KernelEntry concat = decodedEntry<MovementPlan, decodeConcat, launchConcat>();
  addEntry(table, "", "Concat", concat);
  addEntry(table, kMsDomain, "ConcatTraining", concat);
  KernelEntry split = decodedEntry<MovementPlan, decodeSplit, launchCopies>();
  addEntry(table, "", "Split", split);
  addEntry(table, kMsDomain, "SplitTraining", split);
  addEntry(table, "", "Shape",
           decodedEntry<MovementPlan, decodeShape, launchShape>());
  addEntry(table, "", "Where",
           decodedEntry<MovementPlan, decodeWhere, launchWherePlan>());
  KernelEntry compare =
      decodedEntry<MovementPlan, decodeCompare, launchComparePlan>();
  for (const char *op :
       {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
        "Or", "Xor", "IsNaN", "IsInf", "Not"})
    addEntry(table, "", op, compare);
  addEntry(table, "", "ConstantOfShape",
           decodedEntry<MovementPlan, decodeConstantOfShape, launchFillPlan>());
  addEntry(table, "", "Cast",
           decodedEntry<MovementPlan, decodeCast, launchCastPlan>());
  addEntry(table, "", "CastLike",
           decodedEntry<MovementPlan, decodeCastLike, launchCastPlan>());
}
