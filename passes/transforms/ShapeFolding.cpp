//===- ShapeFolding.cpp - Compile-time evaluation of shape arithmetic -----===//
//
// One evaluator per op, each following the ONNX operator definition
// (opset-dependent forms included: Slice and Squeeze/Unsqueeze moved their
// parameters from attributes to inputs in opsets 10 and 13). Anything the
// evaluator is unsure of - an out-of-range index, a division by zero, an
// overflow, a malformed shape - yields "not foldable" rather than a guess,
// leaving the node for the runtime to execute and report.
//
//===----------------------------------------------------------------------===//

#include "passes/transforms/ShapeFolding.h"

#include "ir/IR.h"
#include "ir/ops/Axes.h"
#include "ir/ops/ShapeEval.h"
#include "ir/ops/SliceSpec.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <limits>

using namespace gmopt;

using ShapeVector = llvm::SmallVector<int64_t, 4>;

//===----------------------------------------------------------------------===//
// IntTensor
//===----------------------------------------------------------------------===//

bool gmopt::isFoldableDType(DType type) {
  return type == DType::I64 || type == DType::I32 || type == DType::Bool;
}

std::optional<IntTensor> IntTensor::fromData(const TensorData &data) {
  const TensorType &type = data.getType();
  if (data.isNull() || !isFoldableDType(type.getDType()) ||
      !type.hasStaticShape() || !data.hasFoldableBytes() ||
      data.getBytes().size() <
          dtypeStorageBytes(type.getDType(), type.getNumElements()))
    return std::nullopt;
  IntTensor tensor;
  tensor.dtype = type.getDType();
  tensor.shape = type.getStaticShape();
  tensor.values = data.getIntValues();
  if (tensor.values.size() != type.getNumElements())
    return std::nullopt;
  return tensor;
}

TensorData IntTensor::toData() const {
  switch (dtype) {
  case DType::I64:
    return TensorData::fromValues<int64_t>(dtype, shape, values);
  case DType::I32: {
    std::vector<int32_t> narrow(values.begin(), values.end());
    return TensorData::fromValues<int32_t>(dtype, shape, narrow);
  }
  case DType::Bool: {
    std::vector<uint8_t> bytes;
    for (int64_t v : values)
      bytes.push_back(v != 0);
    return TensorData::fromValues<uint8_t>(dtype, shape, bytes);
  }
  default:
    llvm_unreachable("IntTensor holds only i64, i32 or bool");
  }
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

/// Element count of \p shape, or nullopt for a negative extent or overflow.
std::optional<uint64_t> countElements(llvm::ArrayRef<int64_t> shape) {
  uint64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0 ||
        __builtin_mul_overflow(count, static_cast<uint64_t>(extent), &count))
      return std::nullopt;
  }
  return count;
}

uint64_t product(llvm::ArrayRef<int64_t> shape) {
  uint64_t count = 1;
  for (int64_t extent : shape)
    count *= static_cast<uint64_t>(extent);
  return count;
}

/// True if \p value fits the integer element type \p type.
bool representable(DType type, int64_t value) {
  if (type == DType::I32)
    return value >= std::numeric_limits<int32_t>::min() &&
           value <= std::numeric_limits<int32_t>::max();
  if (type == DType::Bool)
    return value == 0 || value == 1;
  return true;
}

/// For each element of \p outShape in row-major order, the flat index of
/// the element of an \p inShape tensor broadcast to it.
std::vector<uint64_t> broadcastIndices(llvm::ArrayRef<int64_t> inShape,
                                       llvm::ArrayRef<int64_t> outShape) {
  size_t rank = outShape.size(), offset = rank - inShape.size();
  ShapeVector strides(rank, 0);
  int64_t stride = 1;
  for (size_t d = inShape.size(); d-- > 0;) {
    strides[offset + d] = inShape[d] == 1 ? 0 : stride;
    stride *= inShape[d];
  }
  std::vector<uint64_t> indices;
  uint64_t count = product(outShape);
  indices.reserve(count);
  ShapeVector position(rank, 0);
  for (uint64_t i = 0; i != count; ++i) {
    uint64_t flat = 0;
    for (size_t d = 0; d != rank; ++d)
      flat += position[d] * strides[d];
    indices.push_back(flat);
    for (size_t d = rank; d-- > 0;) {
      if (++position[d] < outShape[d])
        break;
      position[d] = 0;
    }
  }
  return indices;
}

/// Evaluates one node; see foldShapeNode.
class Folder {
public:
  Folder(const Node &node, llvm::ArrayRef<const TensorData *> constants,
         const ShapeFoldLimits &limits)
      : node(node), constants(constants), limits(limits) {}

  std::optional<IntTensor> fold() {
    llvm::StringRef op = node.getOpType();
    if (op == "Shape")
      return foldShape();
    if (op == "Size")
      return foldSize();
    if (op == "Gather")
      return foldGather();
    if (op == "Concat")
      return foldConcat();
    if (op == "Slice")
      return foldSlice();
    if (op == "Unsqueeze")
      return foldUnsqueeze();
    if (op == "Squeeze")
      return foldSqueeze();
    if (op == "Reshape")
      return foldReshape();
    if (op == "Cast")
      return foldCast();
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod")
      return foldArithmetic(op);
    if (op == "Equal" || op == "Less" || op == "LessOrEqual" ||
        op == "Greater" || op == "GreaterOrEqual")
      return foldComparison(op);
    if (op == "Where")
      return foldWhere();
    if (op == "ConstantOfShape")
      return foldConstantOfShape();
    if (op == "Range")
      return foldRange();
    return std::nullopt;
  }

private:
  bool hasOperand(unsigned i) const {
    return i < node.getNumOperands() && node.getOperand(i);
  }
  bool fits(uint64_t numElements) const {
    return numElements <= limits.maxElements;
  }

  /// Operand \p i as a foldable constant within the limits.
  std::optional<IntTensor> operand(unsigned i) const {
    if (!hasOperand(i) || i >= constants.size() || !constants[i])
      return std::nullopt;
    std::optional<IntTensor> tensor = IntTensor::fromData(*constants[i]);
    if (!tensor || !fits(tensor->values.size()))
      return std::nullopt;
    return tensor;
  }

  /// Operand \p i as a list of int64/int32 values (a 0-D or 1-D tensor).
  std::optional<std::vector<int64_t>> intList(unsigned i) const {
    std::optional<IntTensor> tensor = operand(i);
    if (!tensor || tensor->dtype == DType::Bool || tensor->shape.size() > 1)
      return std::nullopt;
    return tensor->values;
  }

  static IntTensor makeTensor(DType dtype, ShapeVector shape) {
    IntTensor tensor;
    tensor.dtype = dtype;
    tensor.shape = std::move(shape);
    return tensor;
  }

  std::optional<IntTensor> foldShape() {
    if (!hasOperand(0))
      return std::nullopt;
    const TensorType &type = node.getOperand(0)->getType();
    if (!type.hasRank())
      return std::nullopt;
    ops::ShapeSlice slice = ops::getShapeSlice(node, type.getRank());
    IntTensor result = makeTensor(DType::I64, {slice.size()});
    for (int64_t d = slice.start; d < slice.end; ++d) {
      if (!type.getDim(d).isStatic())
        return std::nullopt;
      result.values.push_back(type.getDim(d).getExtent());
    }
    return result;
  }

  std::optional<IntTensor> foldSize() {
    if (!hasOperand(0) || !node.getOperand(0)->getType().hasStaticShape())
      return std::nullopt;
    std::optional<uint64_t> count =
        countElements(node.getOperand(0)->getType().getStaticShape());
    if (!count || *count > uint64_t(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    IntTensor result = makeTensor(DType::I64, {});
    result.values.push_back(static_cast<int64_t>(*count));
    return result;
  }

  std::optional<IntTensor> foldGather() {
    std::optional<IntTensor> data = operand(0), indices = operand(1);
    if (!data || !indices || indices->dtype == DType::Bool ||
        data->shape.empty())
      return std::nullopt;
    int64_t rank = data->shape.size();
    std::optional<int64_t> axis =
        ops::normalizeAxis(node.getIntAttr("axis", 0), rank);
    if (!axis)
      return std::nullopt;
    ShapeVector shape(data->shape.begin(), data->shape.begin() + *axis);
    shape.append(indices->shape.begin(), indices->shape.end());
    shape.append(data->shape.begin() + *axis + 1, data->shape.end());
    std::optional<uint64_t> count = countElements(shape);
    if (!count || !fits(*count))
      return std::nullopt;
    int64_t axisExtent = data->shape[*axis];
    uint64_t outer = product(llvm::ArrayRef(data->shape).take_front(*axis));
    uint64_t inner = product(llvm::ArrayRef(data->shape).drop_front(*axis + 1));
    IntTensor result = makeTensor(data->dtype, shape);
    for (uint64_t o = 0; o != outer; ++o) {
      for (int64_t index : indices->values) {
        if (index < -axisExtent || index >= axisExtent)
          return std::nullopt;
        if (index < 0)
          index += axisExtent;
        uint64_t base = (o * axisExtent + index) * inner;
        for (uint64_t i = 0; i != inner; ++i)
          result.values.push_back(data->values[base + i]);
      }
    }
    return result;
  }

  std::optional<IntTensor> foldConcat() {
    if (node.getNumOperands() == 0 || !node.hasAttr("axis"))
      return std::nullopt;
    std::vector<IntTensor> inputs;
    for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
      std::optional<IntTensor> input = operand(i);
      if (!input)
        return std::nullopt;
      if (!inputs.empty() && (input->dtype != inputs[0].dtype ||
                              input->shape.size() != inputs[0].shape.size()))
        return std::nullopt;
      inputs.push_back(std::move(*input));
    }
    llvm::SmallVector<llvm::ArrayRef<int64_t>, 4> shapes;
    for (const IntTensor &input : inputs)
      shapes.push_back(input.shape);
    int64_t axisAttr = node.getIntAttr("axis", 0);
    auto concatenated = ops::concatShape(shapes, axisAttr);
    if (!concatenated) {
      llvm::consumeError(concatenated.takeError());
      return std::nullopt;
    }
    ShapeVector shape(concatenated->begin(), concatenated->end());
    std::optional<unsigned> axis =
        ops::normalizeAxis(axisAttr, inputs[0].shape.size());
    std::optional<uint64_t> count = countElements(shape);
    if (!count || !fits(*count))
      return std::nullopt;
    uint64_t outer = product(llvm::ArrayRef(shape).take_front(*axis));
    uint64_t inner = product(llvm::ArrayRef(shape).drop_front(*axis + 1));
    IntTensor result = makeTensor(inputs[0].dtype, shape);
    for (uint64_t o = 0; o != outer; ++o) {
      for (const IntTensor &input : inputs) {
        uint64_t chunk = input.shape[*axis] * inner;
        auto first = input.values.begin() + o * chunk;
        result.values.insert(result.values.end(), first, first + chunk);
      }
    }
    return result;
  }

  std::optional<IntTensor> foldSlice() {
    std::optional<IntTensor> data = operand(0);
    if (!data)
      return std::nullopt;
    int64_t rank = data->shape.size();
    std::vector<int64_t> starts, ends, axes, steps;
    if (node.getOpsetVersion() < 10) {
      if (!node.hasAttr("starts") || !node.hasAttr("ends"))
        return std::nullopt;
      starts = node.getIntsAttr("starts", {});
      ends = node.getIntsAttr("ends", {});
      axes = node.getIntsAttr("axes", {});
    } else {
      std::optional<std::vector<int64_t>> s = intList(1), e = intList(2);
      if (!s || !e)
        return std::nullopt;
      starts = std::move(*s);
      ends = std::move(*e);
      if (hasOperand(3)) {
        std::optional<std::vector<int64_t>> a = intList(3);
        if (!a)
          return std::nullopt;
        axes = std::move(*a);
      }
      if (hasOperand(4)) {
        std::optional<std::vector<int64_t>> st = intList(4);
        if (!st)
          return std::nullopt;
        steps = std::move(*st);
      }
    }
    // A slice the kernel would refuse is left to it.
    llvm::Expected<ops::SliceSpec> spec =
        ops::resolveSlice(data->shape, starts, ends, axes, steps);
    if (!spec) {
      llvm::consumeError(spec.takeError());
      return std::nullopt;
    }
    llvm::ArrayRef<int64_t> first = spec->begin, stride = spec->step;
    ShapeVector shape(spec->shape.begin(), spec->shape.end());
    std::optional<uint64_t> count = countElements(shape);
    if (!count || !fits(*count))
      return std::nullopt;
    IntTensor result = makeTensor(data->dtype, shape);
    ShapeVector inStrides(rank, 1);
    for (int64_t d = rank - 1; d > 0; --d)
      inStrides[d - 1] = inStrides[d] * data->shape[d];
    ShapeVector position(rank, 0);
    for (uint64_t i = 0; i != *count; ++i) {
      int64_t flat = 0;
      for (int64_t d = 0; d != rank; ++d)
        flat += (first[d] + position[d] * stride[d]) * inStrides[d];
      result.values.push_back(data->values[flat]);
      for (int64_t d = rank; d-- > 0;) {
        if (++position[d] < shape[d])
          break;
        position[d] = 0;
      }
    }
    return result;
  }

  /// The axes of Squeeze/Unsqueeze (ops::getSqueezeAxesSource). Sets
  /// \p present to whether they were given.
  std::optional<std::vector<int64_t>> squeezeAxes(bool &present) const {
    ops::SqueezeAxesSource source = ops::getSqueezeAxesSource(node);
    present = source.given;
    if (!source.fromOperand)
      return source.attrAxes;
    if (!present)
      return std::vector<int64_t>();
    return intList(1);
  }

  /// \p data's values under \p shape (a view's result, as the shape
  /// evaluator gives it), or not foldable when the evaluator refused it.
  static std::optional<IntTensor>
  relabel(IntTensor data, llvm::Expected<ops::StaticShape> shape) {
    if (!shape) {
      llvm::consumeError(shape.takeError());
      return std::nullopt;
    }
    data.shape.assign(shape->begin(), shape->end());
    return data;
  }

  std::optional<IntTensor> foldUnsqueeze() {
    std::optional<IntTensor> data = operand(0);
    bool present = false;
    std::optional<std::vector<int64_t>> axes = squeezeAxes(present);
    if (!data || !axes || !present)
      return std::nullopt;
    auto shape = ops::unsqueezeShape(data->shape, *axes);
    return relabel(std::move(*data), std::move(shape));
  }

  std::optional<IntTensor> foldSqueeze() {
    std::optional<IntTensor> data = operand(0);
    bool present = false;
    std::optional<std::vector<int64_t>> axes = squeezeAxes(present);
    if (!data || !axes)
      return std::nullopt;
    std::optional<llvm::ArrayRef<int64_t>> selected;
    if (present)
      selected = llvm::ArrayRef<int64_t>(*axes);
    auto shape = ops::squeezeShape(data->shape, selected);
    return relabel(std::move(*data), std::move(shape));
  }

  std::optional<IntTensor> foldReshape() {
    std::optional<IntTensor> data = operand(0), target = operand(1);
    if (!data || !target || target->dtype != DType::I64 ||
        target->shape.size() != 1)
      return std::nullopt;
    auto shape = ops::reshapeTarget(data->shape, target->values,
                                    ops::reshapeAllowsZero(node));
    return relabel(std::move(*data), std::move(shape));
  }

  std::optional<IntTensor> foldCast() {
    std::optional<IntTensor> data = operand(0);
    std::optional<DType> to = dtypeFromOnnx(node.getIntAttr("to", 0));
    if (!data || !to || !isFoldableDType(*to))
      return std::nullopt;
    IntTensor result = makeTensor(*to, data->shape);
    for (int64_t v : data->values) {
      if (*to == DType::Bool)
        v = v != 0;
      else if (*to == DType::I32)
        v = static_cast<int32_t>(v); // Wraps like the runtime's static_cast.
      result.values.push_back(v);
    }
    return result;
  }

  /// Broadcasts \p inputs to one shape, within the limits.
  std::optional<ShapeVector>
  broadcastOperands(llvm::ArrayRef<const IntTensor *> inputs) {
    llvm::SmallVector<llvm::ArrayRef<int64_t>, 3> shapes;
    for (const IntTensor *input : inputs)
      shapes.push_back(input->shape);
    std::optional<ops::StaticShape> broadcast =
        ops::broadcastStaticShapes(shapes);
    if (!broadcast)
      return std::nullopt;
    std::optional<ShapeVector> shape(std::in_place, broadcast->begin(),
                                     broadcast->end());
    std::optional<uint64_t> count = countElements(*shape);
    if (!count || !fits(*count))
      return std::nullopt;
    return shape;
  }

  std::optional<IntTensor> foldArithmetic(llvm::StringRef op) {
    std::optional<IntTensor> lhs = operand(0), rhs = operand(1);
    if (!lhs || !rhs || lhs->dtype != rhs->dtype || lhs->dtype == DType::Bool)
      return std::nullopt;
    std::optional<ShapeVector> shape = broadcastOperands({&*lhs, &*rhs});
    if (!shape)
      return std::nullopt;
    std::vector<uint64_t> lhsIndex = broadcastIndices(lhs->shape, *shape);
    std::vector<uint64_t> rhsIndex = broadcastIndices(rhs->shape, *shape);
    IntTensor result = makeTensor(lhs->dtype, *shape);
    for (size_t i = 0; i != lhsIndex.size(); ++i) {
      int64_t a = lhs->values[lhsIndex[i]], b = rhs->values[rhsIndex[i]], r;
      bool overflow;
      if (op == "Add") {
        overflow = __builtin_add_overflow(a, b, &r);
      } else if (op == "Sub") {
        overflow = __builtin_sub_overflow(a, b, &r);
      } else if (op == "Mul") {
        overflow = __builtin_mul_overflow(a, b, &r);
      } else if (op == "Mod") {
        // fmod=0 (the default): the remainder takes the divisor's sign, as
        // Python's %; fmod=1: the dividend's, as C's.
        if (b == 0)
          return std::nullopt;
        overflow = a == std::numeric_limits<int64_t>::min() && b == -1;
        r = overflow ? 0 : a % b;
        if (!node.getIntAttr("fmod", 0) && r != 0 && ((r < 0) != (b < 0)))
          r += b;
      } else {
        // Integer Div truncates toward zero (ONNX reference and runtimes).
        if (b == 0)
          return std::nullopt;
        overflow = a == std::numeric_limits<int64_t>::min() && b == -1;
        r = overflow ? 0 : a / b;
      }
      if (overflow || !representable(lhs->dtype, r))
        return std::nullopt;
      result.values.push_back(r);
    }
    return result;
  }

  std::optional<IntTensor> foldComparison(llvm::StringRef op) {
    std::optional<IntTensor> lhs = operand(0), rhs = operand(1);
    if (!lhs || !rhs || lhs->dtype != rhs->dtype)
      return std::nullopt;
    std::optional<ShapeVector> shape = broadcastOperands({&*lhs, &*rhs});
    if (!shape)
      return std::nullopt;
    std::vector<uint64_t> lhsIndex = broadcastIndices(lhs->shape, *shape);
    std::vector<uint64_t> rhsIndex = broadcastIndices(rhs->shape, *shape);
    IntTensor result = makeTensor(DType::Bool, *shape);
    for (size_t i = 0; i != lhsIndex.size(); ++i) {
      int64_t a = lhs->values[lhsIndex[i]], b = rhs->values[rhsIndex[i]];
      bool holds = op == "Equal"         ? a == b
                   : op == "Less"        ? a < b
                   : op == "LessOrEqual" ? a <= b
                   : op == "Greater"     ? a > b
                                         : a >= b;
      result.values.push_back(holds);
    }
    return result;
  }

  std::optional<IntTensor> foldWhere() {
    std::optional<IntTensor> condition = operand(0), onTrue = operand(1),
                             onFalse = operand(2);
    if (!condition || !onTrue || !onFalse || condition->dtype != DType::Bool ||
        onTrue->dtype != onFalse->dtype)
      return std::nullopt;
    std::optional<ShapeVector> shape =
        broadcastOperands({&*condition, &*onTrue, &*onFalse});
    if (!shape)
      return std::nullopt;
    std::vector<uint64_t> condIndex =
        broadcastIndices(condition->shape, *shape);
    std::vector<uint64_t> trueIndex = broadcastIndices(onTrue->shape, *shape);
    std::vector<uint64_t> falseIndex = broadcastIndices(onFalse->shape, *shape);
    IntTensor result = makeTensor(onTrue->dtype, *shape);
    for (size_t i = 0; i != condIndex.size(); ++i)
      result.values.push_back(condition->values[condIndex[i]]
                                  ? onTrue->values[trueIndex[i]]
                                  : onFalse->values[falseIndex[i]]);
    return result;
  }

  std::optional<IntTensor> foldConstantOfShape() {
    std::optional<IntTensor> target = operand(0);
    if (!target || target->dtype != DType::I64 || target->shape.size() != 1)
      return std::nullopt;
    // Without `value` the result is float zeros: a float payload.
    const Attribute *value = node.getAttr("value");
    if (!value || value->getKind() != Attribute::Kind::Tensor)
      return std::nullopt;
    std::optional<IntTensor> fill = IntTensor::fromData(value->getTensor());
    if (!fill || fill->values.size() != 1)
      return std::nullopt;
    ShapeVector shape(target->values.begin(), target->values.end());
    std::optional<uint64_t> count = countElements(shape);
    if (!count || !fits(*count))
      return std::nullopt;
    IntTensor result = makeTensor(fill->dtype, shape);
    result.values.assign(*count, fill->values[0]);
    return result;
  }

  std::optional<IntTensor> foldRange() {
    std::optional<IntTensor> start = operand(0), limit = operand(1),
                             delta = operand(2);
    if (!start || !limit || !delta || start->dtype == DType::Bool ||
        start->dtype != limit->dtype || start->dtype != delta->dtype ||
        start->values.size() != 1 || limit->values.size() != 1 ||
        delta->values.size() != 1 || !start->shape.empty() ||
        !limit->shape.empty() || !delta->shape.empty())
      return std::nullopt;
    int64_t first = start->values[0], step = delta->values[0];
    if (step == 0)
      return std::nullopt;
    int64_t count = ops::rangeCount(first, limit->values[0], step);
    if (static_cast<uint64_t>(count) > limits.maxElements)
      return std::nullopt;
    IntTensor result = makeTensor(start->dtype, {count});
    // Every element lies between start and limit, so none overflows; the
    // arithmetic is unsigned to say so to the compiler.
    for (int64_t i = 0; i < count; ++i)
      result.values.push_back(static_cast<int64_t>(
          static_cast<uint64_t>(first) +
          static_cast<uint64_t>(i) * static_cast<uint64_t>(step)));
    return result;
  }

  const Node &node;
  llvm::ArrayRef<const TensorData *> constants;
  const ShapeFoldLimits &limits;
};

} // namespace

bool gmopt::isFoldableShapeOp(const Node &node) {
  if (node.getDomain() != kOnnxDomain)
    return false;
  return llvm::StringSwitch<bool>(node.getOpType())
      .Cases("Shape", "Size", "Gather", "Concat", "Slice", true)
      .Cases("Unsqueeze", "Squeeze", "Reshape", "Cast", true)
      .Cases("Add", "Sub", "Mul", "Div", "Mod", true)
      .Case("Where", true)
      .Cases("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", true)
      .Cases("ConstantOfShape", "Range", true)
      .Default(false);
}

std::optional<TensorData>
gmopt::foldShapeNode(const Node &node,
                     llvm::ArrayRef<const TensorData *> constantOperands,
                     const ShapeFoldLimits &limits) {
  if (!isFoldableShapeOp(node) || node.getNumResults() != 1)
    return std::nullopt;
  std::optional<IntTensor> result =
      Folder(node, constantOperands, limits).fold();
  if (!result || result->values.size() > limits.maxElements)
    return std::nullopt;
  assert(countElements(result->shape) == result->values.size() &&
         "folded tensor's shape and element count disagree");
  return result->toData();
}
