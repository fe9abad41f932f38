//===- OpDefs.cpp - Building blocks for op schema definitions -------------===//
//
// The SchemaBuilder, the inference and cost functions shared by the op
// families, and registerOnnxOps, which gathers the ai.onnx families.
//
//===----------------------------------------------------------------------===//

#include "ir/ops/OpDefs.h"

#include <cassert>

using namespace gmopt;
using namespace gmopt::ops;

llvm::ArrayRef<DType> ops::floatDTypes() {
  static const DType types[] = {DType::F16, DType::F32, DType::F64,
                                DType::BF16};
  return types;
}

//===----------------------------------------------------------------------===//
// SchemaBuilder
//===----------------------------------------------------------------------===//

SchemaBuilder::SchemaBuilder(llvm::StringRef domain, llvm::StringRef name,
                             int64_t sinceVersion) {
  schema.domain = domain.str();
  schema.name = name.str();
  schema.sinceVersion = sinceVersion;
}

SchemaBuilder &SchemaBuilder::inputs(unsigned min, unsigned max) {
  assert(min <= max && "inverted input arity");
  schema.minInputs = min;
  schema.maxInputs = max;
  return *this;
}

SchemaBuilder &SchemaBuilder::outputs(unsigned min, unsigned max) {
  assert(min <= max && "inverted output arity");
  schema.minOutputs = min;
  schema.maxOutputs = max;
  return *this;
}

SchemaBuilder &SchemaBuilder::attr(llvm::StringRef name,
                                   Attribute defaultValue) {
  Attribute::Kind kind = defaultValue.getKind();
  schema.attributes.push_back(
      AttrSpec{name.str(), kind, std::move(defaultValue), false});
  return *this;
}

SchemaBuilder &SchemaBuilder::optionalAttr(llvm::StringRef name,
                                           Attribute::Kind kind) {
  schema.attributes.push_back(AttrSpec{name.str(), kind, std::nullopt, false});
  return *this;
}

SchemaBuilder &SchemaBuilder::requiredAttr(llvm::StringRef name,
                                           Attribute::Kind kind) {
  schema.attributes.push_back(AttrSpec{name.str(), kind, std::nullopt, true});
  return *this;
}

SchemaBuilder &SchemaBuilder::allowUnknownAttributes() {
  schema.allowUnknownAttributes = true;
  return *this;
}

SchemaBuilder &SchemaBuilder::traits(uint32_t traits) {
  schema.traits = traits;
  return *this;
}

SchemaBuilder &SchemaBuilder::inPlace(int operand, unsigned result) {
  schema.inPlaceOperand = operand;
  schema.inPlaceResult = result;
  return *this;
}

SchemaBuilder &SchemaBuilder::writes(int operand) {
  schema.writesOperand = operand;
  return *this;
}

SchemaBuilder &SchemaBuilder::writesOperands(WrittenOperandsFn fn) {
  schema.writtenOperands = std::move(fn);
  return *this;
}

SchemaBuilder &SchemaBuilder::amp(AmpClass amp) {
  schema.amp = amp;
  return *this;
}

SchemaBuilder &
SchemaBuilder::ampOperands(std::initializer_list<unsigned> operands) {
  schema.ampOperands = 0;
  for (unsigned operand : operands) {
    assert(operand < 31 && "ampOperands names operands below 31");
    schema.ampOperands |= 1u << operand;
  }
  return *this;
}

SchemaBuilder &SchemaBuilder::infer(InferenceFn fn) {
  schema.infer = std::move(fn);
  return *this;
}

SchemaBuilder &SchemaBuilder::cost(CostFn fn) {
  schema.cost = std::move(fn);
  return *this;
}

void SchemaBuilder::add(OpRegistry &registry) const {
  assert(schema.infer && "every schema needs an inference function");
  registry.add(schema);
}

void SchemaBuilder::addAt(OpRegistry &registry, int64_t sinceVersion) const {
  assert(schema.infer && "every schema needs an inference function");
  OpSchema copy = schema;
  copy.sinceVersion = sinceVersion;
  registry.add(std::move(copy));
}

//===----------------------------------------------------------------------===//
// Common inference functions
//===----------------------------------------------------------------------===//

InferenceFn ops::inferSameAs(unsigned input) {
  return [input](InferenceContext &ctx) -> llvm::Error {
    if (input < ctx.getNumInputs() && ctx.hasInput(input))
      setOutput(ctx, 0, ctx.getInputType(input));
    return llvm::Error::success();
  };
}

InferenceFn ops::inferBroadcast(std::optional<DType> resultType) {
  return [resultType](InferenceContext &ctx) -> llvm::Error {
    llvm::SmallVector<unsigned, 4> indices;
    for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
      indices.push_back(i);
    auto dtype = checkSameDType(ctx, indices);
    if (!dtype)
      return dtype.takeError();
    auto shape = broadcastInputs(ctx, indices);
    if (!shape)
      return shape.takeError();
    setOutput(ctx, 0, makeType(resultType ? *resultType : *dtype, *shape));
    return llvm::Error::success();
  };
}

DType ops::inputDType(const InferenceContext &ctx, unsigned index) {
  if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
    return DType::Undefined;
  return ctx.getInputType(index).getDType();
}

std::optional<SymIntVector> ops::shapeValueInput(const InferenceContext &ctx,
                                                 unsigned index) {
  if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
    return std::nullopt;
  return getShapeValue(*ctx.getNode().getOperand(index));
}

std::optional<std::vector<int64_t>>
ops::intValuesInput(const InferenceContext &ctx, unsigned index) {
  if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
    return std::nullopt;
  return getIntValues(*ctx.getNode().getOperand(index));
}

std::optional<int64_t> ops::staticLength(const InferenceContext &ctx,
                                         unsigned index) {
  if (index >= ctx.getNumInputs() || !ctx.hasInput(index))
    return std::nullopt;
  const TensorType &type = ctx.getInputType(index);
  if (!type.hasRank() || type.getRank() != 1 || !type.getDim(0).isStatic())
    return std::nullopt;
  // The length becomes a rank; anything larger is not a real shape tensor
  // and must not make inference allocate without bound.
  constexpr int64_t kMaxRank = 4096;
  int64_t length = type.getDim(0).getExtent();
  if (length > kMaxRank)
    return std::nullopt;
  return length;
}

//===----------------------------------------------------------------------===//
// Common cost models
//===----------------------------------------------------------------------===//

OpCost ops::memoryTraffic(const Node &node) {
  OpCost cost;
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
    if (const Value *operand = node.getOperand(i))
      cost.bytesRead += staticBytes(operand->getType());
  for (unsigned i = 0, e = node.getNumResults(); i != e; ++i)
    if (const Value *result = node.getResult(i))
      cost.bytesWritten += staticBytes(result->getType());
  return cost;
}

CostFn ops::costPerOutputElement(uint64_t flopsPerElement) {
  return [flopsPerElement](const Node &node) {
    OpCost cost = memoryTraffic(node);
    if (node.getNumResults() > 0 && node.getResult(0))
      cost.flops =
          flopsPerElement * staticElements(node.getResult(0)->getType());
    return cost;
  };
}

CostFn ops::costPerInputElement(uint64_t flopsPerElement) {
  return [flopsPerElement](const Node &node) {
    OpCost cost = memoryTraffic(node);
    if (node.getNumOperands() > 0 && node.getOperand(0))
      cost.flops =
          flopsPerElement * staticElements(node.getOperand(0)->getType());
    return cost;
  };
}

uint64_t ops::convFlops(const TensorType &y, const TensorType &w) {
  if (!y.hasStaticShape() || !w.hasStaticShape() || w.getRank() < 2)
    return 0;
  // Each output element is a dot product over (C/group) x kernel window.
  llvm::SmallVector<int64_t, 4> weights = w.getStaticShape();
  uint64_t window = 1;
  for (int64_t extent : llvm::ArrayRef<int64_t>(weights).drop_front())
    window *= static_cast<uint64_t>(extent);
  return 2 * y.getNumElements() * window;
}

CostFn ops::zeroCost() {
  return [](const Node &) { return OpCost(); };
}

//===----------------------------------------------------------------------===//
// ai.onnx registration
//===----------------------------------------------------------------------===//

void gmopt::registerOnnxOps(OpRegistry &registry) {
  registerElementwiseOps(registry);
  registerTensorOps(registry);
  registerIndexingOps(registry);
  registerConstantOps(registry);
  registerReductionOps(registry);
  registerLinalgOps(registry);
  registerNnOps(registry);
  registerResizeOps(registry);
}
