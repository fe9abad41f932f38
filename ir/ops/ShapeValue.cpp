//===- ShapeValue.cpp - Values of small integer tensors at compile time ---===//
//
// Evaluates the small integer subgraphs that compute shapes, axes and
// split sizes, keeping symbolic dimensions symbolic. Only ops whose result
// is exactly determined by the tracked elements are evaluated; anything
// else stops the trace (the caller then falls back to a less precise type).
// The walk follows producers upward, memoized and bounded in depth and in
// visits, so a query stays cheap even on adversarial graphs.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/ShapeValue.h"
#include "ir/IR.h"
#include "ir/ops/ShapeEval.h"
#include "ir/ops/ShapeInference.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <limits>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

/// Tensors with more elements than this are not shape data.
constexpr uint64_t kMaxTrackedElements = 4096;
/// Bound on the producer chain followed by one query.
constexpr unsigned kMaxDepth = 48;
/// Bound on the values one query visits.
constexpr unsigned kMaxVisits = 1024;

bool isStandardOp(const Node &node, llvm::StringRef type) {
  // Import and the text parser store the standard domain as "".
  return node.getDomain().empty() && node.getOpType() == type;
}

bool isIntegerLike(DType dtype) {
  return isInteger(dtype) || dtype == DType::Bool;
}

/// The state of one getShapeValue query: a memo (graphs share values, so an
/// unmemoized walk could be exponential in the depth) and a visit budget.
struct TraceState {
  unsigned budget = kMaxVisits;
  llvm::DenseMap<const Value *, std::optional<SymIntVector>> memo;
};

std::optional<SymIntVector> traceValue(const Value *value, TraceState &state,
                                       unsigned depth);

std::optional<SymIntVector> traceOperand(const Node &node, unsigned index,
                                         TraceState &state, unsigned depth) {
  if (index >= node.getNumOperands() || !node.getOperand(index))
    return std::nullopt;
  return traceValue(node.getOperand(index), state, depth + 1);
}

std::optional<std::vector<int64_t>> constantsOf(const SymIntVector &values) {
  std::vector<int64_t> result;
  for (const SymInt &v : values) {
    if (!v.isConstant())
      return std::nullopt;
    result.push_back(v.getValue());
  }
  return result;
}

std::optional<std::vector<int64_t>> operandConstants(const Node &node,
                                                     unsigned index,
                                                     TraceState &state,
                                                     unsigned depth) {
  std::optional<SymIntVector> values = traceOperand(node, index, state, depth);
  if (!values)
    return std::nullopt;
  return constantsOf(*values);
}

/// Elementwise integer arithmetic with the identities that keep symbols.
SymInt applyArith(llvm::StringRef op, const SymInt &a, const SymInt &b) {
  if (a.isConstant() && b.isConstant()) {
    int64_t x = a.getValue(), y = b.getValue(), result = 0;
    bool overflow = false;
    if (op == "Add")
      overflow = llvm::AddOverflow(x, y, result);
    else if (op == "Sub")
      overflow = llvm::SubOverflow(x, y, result);
    else if (op == "Mul")
      overflow = llvm::MulOverflow(x, y, result);
    else if (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1))
      overflow = true;
    else
      result = x / y;
    return overflow ? SymInt::unknown() : SymInt::constant(result);
  }
  auto isConst = [](const SymInt &v, int64_t c) {
    return v.isConstant() && v.getValue() == c;
  };
  if ((op == "Add" || op == "Sub") && isConst(b, 0))
    return a;
  if (op == "Add" && isConst(a, 0))
    return b;
  if ((op == "Mul" || op == "Div") && isConst(b, 1))
    return a;
  if (op == "Mul" && isConst(a, 1))
    return b;
  if (op == "Mul" && (isConst(a, 0) || isConst(b, 0)))
    return SymInt::constant(0);
  if (op == "Sub" && a.isSymbol() && a.provablyEqual(b))
    return SymInt::constant(0);
  if (op == "Div" && a.isSymbol() && a.provablyEqual(b))
    return SymInt::constant(1);
  return SymInt::unknown();
}

/// Pairs up two element lists with numpy broadcasting of length-1 lists.
template <typename Fn>
std::optional<SymIntVector> zipBroadcast(const SymIntVector &a,
                                         const SymIntVector &b, Fn fn) {
  if (a.size() != b.size() && a.size() != 1 && b.size() != 1)
    return std::nullopt;
  size_t n = std::max(a.size(), b.size());
  SymIntVector result;
  for (size_t i = 0; i != n; ++i)
    result.push_back(fn(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]));
  return result;
}

std::optional<SymIntVector> traceShape(const Node &node) {
  const Value *input = node.getOperand(0);
  if (!input || !input->getType().hasRank())
    return std::nullopt;
  llvm::ArrayRef<Dim> dims = input->getType().getDims();
  ops::ShapeSlice slice = ops::getShapeSlice(node, dims.size());
  SymIntVector result;
  for (int64_t i = slice.start; i < slice.end; ++i)
    result.push_back(SymInt::fromDim(dims[i]));
  return result;
}

std::optional<SymIntVector> traceGather(const Node &node, TraceState &state,
                                        unsigned depth) {
  if (node.getIntAttr("axis", 0) != 0)
    return std::nullopt;
  std::optional<SymIntVector> data = traceOperand(node, 0, state, depth);
  std::optional<std::vector<int64_t>> indices =
      operandConstants(node, 1, state, depth);
  if (!data || !indices)
    return std::nullopt;
  SymIntVector result;
  int64_t size = data->size();
  for (int64_t index : *indices) {
    if (index < -size || index >= size)
      return std::nullopt;
    result.push_back((*data)[index < 0 ? index + size : index]);
  }
  return result;
}

std::optional<SymIntVector> traceSlice(const Node &node, TraceState &state,
                                       unsigned depth) {
  std::optional<SymIntVector> data = traceOperand(node, 0, state, depth);
  auto starts = operandConstants(node, 1, state, depth);
  auto ends = operandConstants(node, 2, state, depth);
  if (!data || !starts || !ends || starts->size() != 1 || ends->size() != 1)
    return std::nullopt;
  if (node.getNumOperands() > 3 && node.getOperand(3)) {
    auto axes = operandConstants(node, 3, state, depth);
    if (!axes || axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1))
      return std::nullopt;
  }
  int64_t step = 1;
  if (node.getNumOperands() > 4 && node.getOperand(4)) {
    auto steps = operandConstants(node, 4, state, depth);
    if (!steps || steps->size() != 1 || (*steps)[0] == 0)
      return std::nullopt;
    step = (*steps)[0];
  }
  auto [first, count] =
      sliceRange(data->size(), (*starts)[0], (*ends)[0], step);
  SymIntVector result;
  // Every index taken lies in [0, size), so first + k * step cannot overflow.
  for (int64_t k = 0; k != count; ++k)
    result.push_back((*data)[first + k * step]);
  return result;
}

std::optional<SymIntVector> traceConcat(const Node &node, TraceState &state,
                                        unsigned depth) {
  int64_t axis = node.getIntAttr("axis", 0);
  if (axis != 0 && axis != -1)
    return std::nullopt;
  SymIntVector result;
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    std::optional<SymIntVector> part = traceOperand(node, i, state, depth);
    if (!part)
      return std::nullopt;
    result.append(part->begin(), part->end());
  }
  return result;
}

/// ConcatTraining's per_input_length result: every input's extent along the
/// concatenation axis (what SplitTraining in the backward graph splits by).
std::optional<SymIntVector> traceConcatLengths(const Node &node) {
  int64_t axis = node.getIntAttr("axis", 0);
  SymIntVector result;
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *input = node.getOperand(i);
    if (!input || !input->getType().hasRank())
      return std::nullopt;
    std::optional<unsigned> inputAxis =
        ops::normalizeAxis(axis, input->getType().getRank());
    if (!inputAxis)
      return std::nullopt;
    result.push_back(SymInt::fromDim(input->getType().getDim(*inputAxis)));
  }
  return result;
}

std::optional<SymIntVector> traceBroadcastGradientArgs(const Node &node,
                                                       unsigned resultIndex,
                                                       TraceState &state,
                                                       unsigned depth) {
  std::optional<SymIntVector> a = traceOperand(node, 0, state, depth);
  std::optional<SymIntVector> b = traceOperand(node, 1, state, depth);
  if (!a || !b)
    return std::nullopt;
  // Only a dimension known to differ from 1 on the other side is safe: a
  // symbol might be 1 at run time and change which side reduces.
  auto classify = [](const SymInt &da, const SymInt &db) {
    if (da.provablyEqual(db))
      return ops::BroadcastPair::Same;
    if (!da.isConstant() || !db.isConstant())
      return ops::BroadcastPair::Unknown;
    return ops::classifyBroadcastPair(da.getValue(), db.getValue());
  };
  ops::GradientAxesResult walk = ops::walkBroadcastGradient(
      llvm::ArrayRef<SymInt>(*a), llvm::ArrayRef<SymInt>(*b), classify);
  if (walk.stop != ops::BroadcastPair::Same)
    return std::nullopt;
  SymIntVector aAxes, bAxes;
  for (int64_t axis : walk.axes.a)
    aAxes.push_back(SymInt::constant(axis));
  for (int64_t axis : walk.axes.b)
    bAxes.push_back(SymInt::constant(axis));
  return resultIndex == 0 ? aAxes : bAxes;
}

std::optional<SymIntVector> traceNode(const Node &node, unsigned resultIndex,
                                      TraceState &state, unsigned depth) {
  if (node.getDomain() == "com.microsoft") {
    if (node.getOpType() == "ConcatTraining" && resultIndex == 0)
      return traceConcat(node, state, depth);
    if (node.getOpType() == "ConcatTraining" && resultIndex == 1)
      return traceConcatLengths(node);
    if (node.getOpType() == "BroadcastGradientArgs")
      return traceBroadcastGradientArgs(node, resultIndex, state, depth);
    return std::nullopt;
  }
  if (resultIndex != 0 || node.getNumOperands() == 0)
    return std::nullopt;
  if (isStandardOp(node, "Shape"))
    return traceShape(node);
  if (isStandardOp(node, "Size")) {
    const Value *input = node.getOperand(0);
    if (!input || !input->getType().hasRank())
      return std::nullopt;
    return SymIntVector{
        SymInt::fromDim(multiplyDims(input->getType().getDims()))};
  }
  // Ops that keep the elements (and their order) of their first operand.
  if (isStandardOp(node, "Identity") || isStandardOp(node, "Unsqueeze") ||
      isStandardOp(node, "Squeeze") || isStandardOp(node, "Reshape") ||
      isStandardOp(node, "Flatten"))
    return traceOperand(node, 0, state, depth);
  if (isStandardOp(node, "Cast")) {
    std::optional<DType> to = dtypeFromOnnx(node.getIntAttr("to", 0));
    if (!to || !isIntegerLike(*to))
      return std::nullopt;
    return traceOperand(node, 0, state, depth);
  }
  if (isStandardOp(node, "Concat"))
    return traceConcat(node, state, depth);
  if (isStandardOp(node, "Gather"))
    return traceGather(node, state, depth);
  if (isStandardOp(node, "Slice"))
    return traceSlice(node, state, depth);
  for (llvm::StringRef op : {"Add", "Sub", "Mul", "Div"}) {
    if (!isStandardOp(node, op))
      continue;
    auto a = traceOperand(node, 0, state, depth);
    auto b = traceOperand(node, 1, state, depth);
    if (!a || !b)
      return std::nullopt;
    return zipBroadcast(*a, *b, [&](const SymInt &x, const SymInt &y) {
      return applyArith(op, x, y);
    });
  }
  if (isStandardOp(node, "Neg")) {
    // ONNX Runtime's Pad gradient pads by Neg(pads). A symbol's negation is
    // not an extent, so only constants stay known.
    auto a = traceOperand(node, 0, state, depth);
    if (!a)
      return std::nullopt;
    SymIntVector result;
    for (const SymInt &v : *a)
      result.push_back(v.isConstant() && v.getValue() !=
                                             std::numeric_limits<int64_t>::min()
                           ? SymInt::constant(-v.getValue())
                           : SymInt::unknown());
    return result;
  }
  if (isStandardOp(node, "Equal")) {
    auto a = traceOperand(node, 0, state, depth);
    auto b = traceOperand(node, 1, state, depth);
    if (!a || !b)
      return std::nullopt;
    return zipBroadcast(*a, *b, [](const SymInt &x, const SymInt &y) {
      if (x.provablyEqual(y))
        return SymInt::constant(1);
      if (x.isConstant() && y.isConstant())
        return SymInt::constant(0);
      // A dimension is never negative.
      if ((x.isSymbol() && y.isConstant() && y.getValue() < 0) ||
          (y.isSymbol() && x.isConstant() && x.getValue() < 0))
        return SymInt::constant(0);
      return SymInt::unknown();
    });
  }
  if (isStandardOp(node, "Where")) {
    auto cond = traceOperand(node, 0, state, depth);
    auto x = traceOperand(node, 1, state, depth);
    auto y = traceOperand(node, 2, state, depth);
    if (!cond || !x || !y)
      return std::nullopt;
    size_t n = std::max({cond->size(), x->size(), y->size()});
    for (size_t size : {cond->size(), x->size(), y->size()})
      if (size != n && size != 1)
        return std::nullopt;
    SymIntVector result;
    for (size_t i = 0; i != n; ++i) {
      const SymInt &c = (*cond)[cond->size() == 1 ? 0 : i];
      const SymInt &a = (*x)[x->size() == 1 ? 0 : i];
      const SymInt &b = (*y)[y->size() == 1 ? 0 : i];
      if (c.isConstant())
        result.push_back(c.getValue() ? a : b);
      else
        result.push_back(a.provablyEqual(b) ? a : SymInt::unknown());
    }
    return result;
  }
  if (isStandardOp(node, "ReduceProd")) {
    auto data = traceOperand(node, 0, state, depth);
    if (!data || node.getNumOperands() > 1)
      return std::nullopt;
    SymInt product = SymInt::constant(1);
    for (const SymInt &v : *data)
      product = applyArith("Mul", product, v);
    return SymIntVector{product};
  }
  if (isStandardOp(node, "ConstantOfShape")) {
    auto shape = operandConstants(node, 0, state, depth);
    if (!shape || shape->size() > 1)
      return std::nullopt;
    int64_t count = shape->empty() ? 1 : (*shape)[0];
    if (count < 0 || static_cast<uint64_t>(count) > kMaxTrackedElements)
      return std::nullopt;
    int64_t fill = 0;
    if (const Attribute *attr = node.getAttr("value")) {
      if (attr->getKind() != Attribute::Kind::Tensor)
        return std::nullopt;
      const TensorData &data = attr->getTensor();
      if (!isIntegerLike(data.getType().getDType()) ||
          !data.getType().hasStaticShape() || data.getNumElements() != 1 ||
          data.getBytes().size() <
              dtypeStorageBytes(data.getType().getDType(), 1))
        return std::nullopt;
      fill = data.getIntElement(0);
    }
    return SymIntVector(count, SymInt::constant(fill));
  }
  return std::nullopt;
}

std::optional<SymIntVector> computeValue(const Value *value, TraceState &state,
                                         unsigned depth) {
  const TensorType &type = value->getType();
  if (type.hasRank() && type.getRank() > 1)
    return std::nullopt;
  if (type.getDType() != DType::Undefined && !isIntegerLike(type.getDType()))
    return std::nullopt;
  if (std::optional<TensorData> data = getConstantData(*value)) {
    DType dtype = data->getType().getDType();
    if (!isIntegerLike(dtype) || !data->getType().hasStaticShape() ||
        data->getType().getRank() > 1 ||
        data->getNumElements() > kMaxTrackedElements ||
        data->getBytes().size() <
            dtypeStorageBytes(dtype, data->getNumElements()))
      return std::nullopt;
    SymIntVector result;
    for (uint64_t i = 0, e = data->getNumElements(); i != e; ++i)
      result.push_back(SymInt::constant(data->getIntElement(i)));
    return result;
  }
  if (const Node *producer = value->getDefiningNode())
    return traceNode(*producer, value->getResultIndex(), state, depth);
  return std::nullopt;
}

std::optional<SymIntVector> traceValue(const Value *value, TraceState &state,
                                       unsigned depth) {
  if (!value || depth > kMaxDepth)
    return std::nullopt;
  auto known = state.memo.find(value);
  if (known != state.memo.end())
    return known->second;
  if (state.budget == 0)
    return std::nullopt;
  --state.budget;
  std::optional<SymIntVector> result = computeValue(value, state, depth);
  state.memo[value] = result;
  return result;
}

} // namespace

SymInt SymInt::fromDim(const Dim &dim) {
  if (dim.isStatic())
    return constant(dim.getExtent());
  if (dim.isSymbolic())
    return symbol(dim.getSymbol());
  return unknown();
}

Dim SymInt::toDim() const {
  if (isConstant() && value >= 0)
    return Dim::fixed(value);
  if (isSymbol())
    return Dim::symbolic(name);
  return Dim::unknown();
}

bool SymInt::provablyEqual(const SymInt &other) const {
  if (isUnknown() || other.isUnknown())
    return false;
  return *this == other;
}

std::optional<TensorData> ops::getConstantData(const Value &value) {
  if (value.hasData()) {
    // Large external weights are never read at compile time, and missing
    // ones cannot be: the value is then simply not known.
    if (!value.getData().hasFoldableBytes())
      return std::nullopt;
    return value.getData();
  }
  const Node *producer = value.getDefiningNode();
  if (!producer || !isStandardOp(*producer, "Constant"))
    return std::nullopt;
  for (const NamedAttribute &attr : producer->getAttrs()) {
    const Attribute &a = attr.value;
    if (attr.name == "value" && a.getKind() == Attribute::Kind::Tensor) {
      if (!a.getTensor().hasFoldableBytes())
        return std::nullopt;
      return a.getTensor();
    }
    if (attr.name == "value_float" && a.getKind() == Attribute::Kind::Float) {
      float v = a.getFloat();
      return TensorData::fromValues<float>(DType::F32, {},
                                           llvm::ArrayRef<float>(v));
    }
    if (attr.name == "value_floats" && a.getKind() == Attribute::Kind::Floats) {
      const std::vector<float> &v = a.getFloats();
      return TensorData::fromValues<float>(DType::F32,
                                           {static_cast<int64_t>(v.size())}, v);
    }
    if (attr.name == "value_int" && a.getKind() == Attribute::Kind::Int) {
      int64_t v = a.getInt();
      return TensorData::fromValues<int64_t>(DType::I64, {},
                                             llvm::ArrayRef<int64_t>(v));
    }
    if (attr.name == "value_ints" && a.getKind() == Attribute::Kind::Ints) {
      const std::vector<int64_t> &v = a.getInts();
      return TensorData::fromValues<int64_t>(
          DType::I64, {static_cast<int64_t>(v.size())}, v);
    }
  }
  return std::nullopt;
}

std::optional<SymIntVector> ops::getShapeValue(const Value &value) {
  TraceState state;
  return traceValue(&value, state, 0);
}

std::optional<std::vector<int64_t>> ops::getIntValues(const Value &value) {
  std::optional<SymIntVector> values = getShapeValue(value);
  if (!values)
    return std::nullopt;
  return constantsOf(*values);
}
