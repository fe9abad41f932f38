//===- MicrosoftTrainingOps.cpp - ONNX Runtime training-support schemas ---===//
//
// The com.microsoft ops that carry a training step rather than a layer: the
// scatter-style gradients of data movement (GatherGrad, SliceGrad, ...),
// whose result shape comes from a shape *operand*; the broadcast-gradient
// helpers (BroadcastGradientArgs, ReduceSumTraining, DivGrad, Scale); the
// training variants of Concat/Split; gradient accumulation
// (InPlaceAccumulatorV2 writes its buffer operand in place, a side effect);
// the optimizers AdamWOptimizer and SGDOptimizerV2, whose tensor-sequence
// inputs are groups of operands (ir/OptimizerOps.h) and whose weights and
// moments are written in place; and the mixed-precision helpers
// (IsAllFinite, MixedPrecisionScale) and YieldOp. Semantics follow ONNX
// Runtime's training_op_defs.cc.
//
//===----------------------------------------------------------------------===//

#include "ir/OptimizerOps.h"
#include "ir/ops/OpDefs.h"
#include "ir/ops/ShapeEval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>

using namespace gmopt;
using namespace gmopt::ops;

namespace {

const DType kBoolOnly[] = {DType::Bool};

/// The type whose shape is the value of input \p index (a 1-D shape tensor),
/// as far as it is known.
llvm::Expected<TensorType> typeFromShapeInput(const InferenceContext &ctx,
                                              unsigned index, DType dtype) {
  if (auto err = checkDTypeIn(ctx, index, indexDTypes(), "shape"))
    return err;
  std::optional<SymIntVector> shape = shapeValueInput(ctx, index);
  if (!shape) {
    if (std::optional<int64_t> length = staticLength(ctx, index))
      return TensorType(dtype, DimVector(*length, Dim::unknown()));
    return TensorType::unranked(dtype);
  }
  DimVector dims;
  for (const SymInt &element : *shape) {
    if (element.isConstant() && element.getValue() < 0)
      return ctx.error(
          llvm::formatv("shape element {0} is negative", element.getValue()));
    dims.push_back(element.toDim());
  }
  return TensorType(dtype, dims);
}

/// True when two ranked dim lists provably describe different shapes.
bool shapesConflict(llvm::ArrayRef<Dim> a, llvm::ArrayRef<Dim> b) {
  if (a.size() != b.size())
    return true;
  for (size_t i = 0; i != a.size(); ++i)
    if (!unifyDims(a[i], b[i]))
      return true;
  return false;
}

//===----------------------------------------------------------------------===//
// Gradients of data movement
//===----------------------------------------------------------------------===//

llvm::Error inferGatherGrad(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, indexDTypes(), "indices"))
    return err;
  const TensorType &dy = ctx.getInputType(2);
  auto type = typeFromShapeInput(ctx, 0, dy.getDType());
  if (!type)
    return type.takeError();
  const TensorType &indices = ctx.getInputType(1);
  if (type->hasRank() && type->getRank() > 0 && indices.hasRank() &&
      dy.hasRank()) {
    auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), type->getRank());
    if (!axis)
      return axis.takeError();
    llvm::ArrayRef<Dim> dims = type->getDims();
    DimVector expected(dims.begin(), dims.begin() + *axis);
    expected.append(indices.getDims().begin(), indices.getDims().end());
    expected.append(dims.begin() + *axis + 1, dims.end());
    if (shapesConflict(expected, dy.getDims()))
      return ctx.error("gradient " + dy.str() +
                       " does not match the gather "
                       "output " +
                       shapeString(expected));
  }
  setOutput(ctx, 0, *type);
  return llvm::Error::success();
}

llvm::Error inferGatherElementsGrad(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 2, indexDTypes(), "indices"))
    return err;
  const TensorType &dy = ctx.getInputType(0);
  const TensorType &indices = ctx.getInputType(2);
  if (dy.hasRank() && indices.hasRank() &&
      shapesConflict(dy.getDims(), indices.getDims()))
    return ctx.error("gradient " + dy.str() +
                     " must have the shape of the "
                     "indices " +
                     indices.str());
  auto type = typeFromShapeInput(ctx, 1, dy.getDType());
  if (!type)
    return type.takeError();
  setOutput(ctx, 0, *type);
  return llvm::Error::success();
}

/// dX = zeros(shape) with dY scattered in: the shape operand is \p shapeIndex,
/// the gradient \p gradIndex.
InferenceFn inferFromShapeOperand(unsigned shapeIndex, unsigned gradIndex) {
  return [shapeIndex, gradIndex](InferenceContext &ctx) -> llvm::Error {
    const TensorType &dy = ctx.getInputType(gradIndex);
    auto type = typeFromShapeInput(ctx, shapeIndex, dy.getDType());
    if (!type)
      return type.takeError();
    if (type->hasRank() && dy.hasRank() && type->getRank() != dy.getRank() &&
        ctx.getNode().getOpType() == "SliceGrad")
      return ctx.error("gradient " + dy.str() + " and shape " +
                       shapeString(type->getDims()) +
                       " must have the same rank");
    setOutput(ctx, 0, *type);
    return llvm::Error::success();
  };
}

/// Scatter-style gradients zero their output and add each dY element once.
OpCost scatterGradCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i) {
    const Value *operand = node.getOperand(i);
    if (operand && isFloatingPoint(operand->getType().getDType()))
      cost.flops += staticElements(operand->getType());
  }
  return cost;
}

void registerMovementGrads(OpRegistry &registry) {
  SchemaBuilder(kMsDomain, "GatherGrad", 1)
      .inputs(3)
      .outputs(1)
      .attrInt("axis", 0)
      .amp(AmpClass::Follow)
      .infer(inferGatherGrad)
      .cost(scatterGradCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "GatherElementsGrad", 1)
      .inputs(3)
      .outputs(1)
      .attrInt("axis", 0)
      .amp(AmpClass::Follow)
      .infer(inferGatherElementsGrad)
      .cost(scatterGradCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "GatherNDGrad", 1)
      .inputs(3)
      .outputs(1)
      .attrInt("batch_dims", 0)
      .amp(AmpClass::Follow)
      .infer(inferFromShapeOperand(0, 2))
      .cost(scatterGradCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "SliceGrad", 1)
      .inputs(4, 6)
      .outputs(1)
      .amp(AmpClass::Follow)
      .infer(inferFromShapeOperand(1, 0))
      .cost(scatterGradCost)
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Broadcast gradients, Concat/Split training variants
//===----------------------------------------------------------------------===//

llvm::Error inferBroadcastGradientArgs(InferenceContext &ctx) {
  for (unsigned i : {0u, 1u})
    if (auto err = checkDTypeIn(ctx, i, kInt64Only, "shape"))
      return err;
  // The axes lists are computable when the shapes are (see getShapeValue).
  for (unsigned i = 0, e = ctx.getNumOutputs(); i != e; ++i) {
    Dim length = Dim::unknown();
    if (const Value *result = ctx.getNode().getResult(i))
      if (std::optional<SymIntVector> axes = getShapeValue(*result))
        length = Dim::fixed(axes->size());
    setOutput(ctx, i, TensorType(DType::I64, {length}));
  }
  return llvm::Error::success();
}

llvm::Error inferDivGrad(InferenceContext &ctx) {
  auto dtype = checkSameDType(ctx, {0, 1, 2});
  if (!dtype)
    return dtype.takeError();
  for (unsigned out : {0u, 1u}) {
    TensorType type = ctx.getInputType(out + 1);
    type.setDType(*dtype);
    setOutput(ctx, out, std::move(type));
  }
  return llvm::Error::success();
}

llvm::Error inferScale(InferenceContext &ctx) {
  const TensorType &scale = ctx.getInputType(1);
  if (scale.hasStaticShape() && scale.getNumElements() != 1)
    return ctx.error("scale must hold one element, got " + scale.str());
  setOutput(ctx, 0, ctx.getInputType(0));
  return llvm::Error::success();
}

llvm::Error inferConcatTraining(InferenceContext &ctx) {
  if (auto err = inferConcatResult(ctx))
    return err;
  setOutput(ctx, 1, TensorType::get(DType::I64, {ctx.getNumInputs()}));
  return llvm::Error::success();
}

/// SplitTraining: sizes from the `split` operand; an empty list splits
/// evenly, the first outputs taking one extra element of any remainder.
llvm::Error inferSplitTraining(InferenceContext &ctx) {
  if (auto err = checkDTypeIn(ctx, 1, kInt64Only, "split"))
    return err;
  const TensorType &data = ctx.getInputType(0);
  unsigned numOutputs = ctx.getNumOutputs();
  if (!data.hasRank()) {
    for (unsigned i = 0; i != numOutputs; ++i)
      setOutput(ctx, i, TensorType::unranked(data.getDType()));
    return llvm::Error::success();
  }
  auto axis = normalizeAxis(ctx, ctx.getIntAttr("axis", 0), data.getRank());
  if (!axis)
    return axis.takeError();
  const Dim &dim = data.getDim(*axis);
  std::optional<std::vector<int64_t>> split = intValuesInput(ctx, 1);
  DimVector sizes(numOutputs, Dim::unknown());
  // Sizes that are symbolic dimensions (the per_input_length of a
  // ConcatTraining whose inputs have symbolic extents) keep their symbols.
  std::optional<SymIntVector> symbolicSplit;
  if (!split)
    symbolicSplit = shapeValueInput(ctx, 1);
  if (symbolicSplit && !symbolicSplit->empty()) {
    if (symbolicSplit->size() != numOutputs)
      return ctx.error(llvm::formatv("split has {0} values but the node has "
                                     "{1} outputs",
                                     symbolicSplit->size(), numOutputs));
    for (unsigned i = 0; i != numOutputs; ++i) {
      const SymInt &size = (*symbolicSplit)[i];
      if (size.isConstant() && size.getValue() < 0)
        return ctx.error("split sizes must not be negative");
      sizes[i] = size.toDim();
    }
  } else if (split && !split->empty()) {
    std::optional<int64_t> extent;
    if (dim.isStatic())
      extent = dim.getExtent();
    if (auto total = checkSplitSizes(*split, numOutputs, *axis, extent); !total)
      return ctx.error(llvm::toString(total.takeError()));
    for (unsigned i = 0; i != numOutputs; ++i)
      sizes[i] = Dim::fixed((*split)[i]);
  } else if (split && dim.isStatic()) {
    int64_t chunk = dim.getExtent() / numOutputs;
    int64_t leftover = dim.getExtent() - chunk * numOutputs;
    for (unsigned i = 0; i != numOutputs; ++i)
      sizes[i] = Dim::fixed(i < leftover ? chunk + 1 : chunk);
  } else if (split && numOutputs == 1) {
    sizes[0] = dim;
  }
  for (unsigned i = 0; i != numOutputs; ++i) {
    DimVector dims(data.getDims().begin(), data.getDims().end());
    dims[*axis] = sizes[i];
    setOutput(ctx, i, TensorType(data.getDType(), dims));
  }
  return llvm::Error::success();
}

void registerBroadcastAndShapeHelpers(OpRegistry &registry) {
  SchemaBuilder(kMsDomain, "BroadcastGradientArgs", 1)
      .inputs(2)
      .outputs(1, 2)
      .traits(TraitShapeOnly)
      .amp(AmpClass::None)
      .infer(inferBroadcastGradientArgs)
      .cost(zeroCost())
      .add(registry);
  SchemaBuilder(kMsDomain, "ReduceSumTraining", 1)
      .inputs(2)
      .outputs(1)
      .attrInt("keepdims", 1)
      .attrInt("noop_with_empty_axes", 0)
      .allowUnknownAttributes()
      .amp(AmpClass::Deny)
      .infer(inferReduce(true))
      .cost(costPerInputElement(1))
      .add(registry);
  SchemaBuilder(kMsDomain, "DivGrad", 1)
      .inputs(3)
      .outputs(1, 2)
      .amp(AmpClass::Follow)
      .infer(inferDivGrad)
      .cost(costPerInputElement(4))
      .add(registry);
  SchemaBuilder(kMsDomain, "Scale", 1)
      .inputs(2)
      .outputs(1)
      .attrInt("scale_down", 0)
      .traits(TraitElementwise)
      .inPlace(0)
      .amp(AmpClass::Follow)
      .infer(inferScale)
      .add(registry);
  SchemaBuilder(kMsDomain, "ConcatTraining", 1)
      .inputs(1, kVariadic)
      .outputs(1, 2)
      .requiredAttr("axis", Attribute::Kind::Int)
      .amp(AmpClass::Follow)
      .infer(inferConcatTraining)
      .add(registry);
  SchemaBuilder(kMsDomain, "SplitTraining", 1)
      .inputs(2)
      .outputs(1, kVariadic)
      .attrInt("axis", 0)
      .allowUnknownAttributes()
      .amp(AmpClass::Follow)
      .infer(inferSplitTraining)
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Accumulation, mixed precision, YieldOp
//===----------------------------------------------------------------------===//

llvm::Error checkAccumulation(const InferenceContext &ctx) {
  const TensorType &buffer = ctx.getInputType(0);
  const TensorType &value = ctx.getInputType(1);
  if (buffer.hasRank() && value.hasRank() &&
      shapesConflict(buffer.getDims(), value.getDims()))
    return ctx.error("value " + value.str() +
                     " does not match the accumulation buffer " + buffer.str());
  return checkDTypeIn(ctx, 2, kBoolOnly, "flag");
}

/// Accumulators add every value element into the buffer, which they write.
OpCost accumulateCost(const Node &node) {
  OpCost cost = memoryTraffic(node);
  const TensorType &buffer = node.getOperand(0)->getType();
  cost.flops = staticElements(node.getOperand(1)->getType());
  if (node.getNumResults() < 2 || !node.getResult(1))
    cost.bytesWritten += staticBytes(buffer);
  return cost;
}

llvm::Error inferMixedPrecisionScale(InferenceContext &ctx) {
  const TensorType &scale = ctx.getInputType(0);
  if (scale.hasStaticShape() && scale.getNumElements() != 1)
    return ctx.error("scale must hold one element, got " + scale.str());
  int64_t to = ctx.getIntAttr("to", 0);
  std::optional<DType> dtype = dtypeFromOnnx(to);
  if (!dtype || !isFloatingPoint(*dtype))
    return ctx.error(llvm::formatv("attribute 'to' = {0} is not a "
                                   "floating-point element type",
                                   to));
  unsigned numTensors = ctx.getNumInputs() - 1;
  if (ctx.getIntAttr("fuse_outputs", 0) != 0) {
    if (ctx.getNumOutputs() != 1)
      return ctx.error("fuse_outputs needs exactly one output");
    uint64_t total = 0;
    bool known = true;
    for (unsigned i = 1; i <= numTensors; ++i) {
      const TensorType &type = ctx.getInputType(i);
      known &= type.hasStaticShape();
      if (known)
        total += type.getNumElements();
    }
    known &= total <= static_cast<uint64_t>(INT64_MAX);
    setOutput(ctx, 0,
              TensorType(*dtype, {known ? Dim::fixed(total) : Dim::unknown()}));
    return llvm::Error::success();
  }
  if (ctx.getNumOutputs() != numTensors)
    return ctx.error(llvm::formatv("expected one output per scaled input "
                                   "({0}), got {1}",
                                   numTensors, ctx.getNumOutputs()));
  for (unsigned i = 0; i != numTensors; ++i) {
    TensorType type = ctx.getInputType(i + 1);
    type.setDType(*dtype);
    setOutput(ctx, i, std::move(type));
  }
  return llvm::Error::success();
}

llvm::Error inferYieldOp(InferenceContext &ctx) {
  std::set<int64_t> nonDifferentiable;
  for (int64_t i : ctx.getIntsAttr("non_differentiable_outputs"))
    nonDifferentiable.insert(i);
  std::set<int64_t> fullShape;
  for (int64_t i : ctx.getIntsAttr("full_shape_outputs"))
    fullShape.insert(i);
  unsigned numInputs = ctx.getNumInputs();
  if (numInputs != ctx.getNumOutputs() + nonDifferentiable.size())
    return ctx.error(llvm::formatv("{0} module outputs with {1} "
                                   "non-differentiable need {2} gradient "
                                   "outputs, got {3}",
                                   numInputs, nonDifferentiable.size(),
                                   numInputs - nonDifferentiable.size(),
                                   ctx.getNumOutputs()));
  unsigned out = 0;
  for (unsigned i = 0; i != numInputs; ++i) {
    if (nonDifferentiable.count(i))
      continue;
    const TensorType &type = ctx.getInputType(i);
    // Only full-shape outputs promise their gradient has the output's shape.
    setOutput(ctx, out++,
              fullShape.count(i) ? type
                                 : TensorType::unranked(type.getDType()));
  }
  return llvm::Error::success();
}

void registerAccumulationAndAmp(OpRegistry &registry) {
  // Writes operand 0 in place; result 0 is only a completion flag, so the
  // in-place relation is a side effect (writes), not inPlaceOperand.
  SchemaBuilder(kMsDomain, "InPlaceAccumulatorV2", 1)
      .inputs(2, 3)
      .outputs(1, 2)
      .traits(TraitSideEffect)
      .writes(0)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        if (auto err = checkAccumulation(ctx))
          return err;
        setOutput(ctx, 0, TensorType::get(DType::Bool, {1}));
        setOutput(ctx, 1, ctx.getInputType(0));
        return llvm::Error::success();
      })
      .cost(accumulateCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "InPlaceAccumulator", 1)
      .inputs(2, 3)
      .outputs(1)
      .inPlace(0)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        if (auto err = checkAccumulation(ctx))
          return err;
        setOutput(ctx, 0, ctx.getInputType(0));
        return llvm::Error::success();
      })
      .cost(accumulateCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "ZeroGradient", 1)
      .inputs(2)
      .outputs(1)
      .inPlace(0)
      .amp(AmpClass::None)
      .infer(inferSameAs(0))
      .add(registry);

  SchemaBuilder(kMsDomain, "IsAllFinite", 1)
      .inputs(1, kVariadic)
      .outputs(1)
      .attrInt("isinf_only", 0)
      .attrInt("isnan_only", 0)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
          if (auto err = checkDTypeIn(ctx, i, floatDTypes(), "tensor"))
            return err;
        setOutput(ctx, 0, TensorType::get(DType::Bool, {}));
        return llvm::Error::success();
      })
      .cost([](const Node &node) {
        OpCost cost = memoryTraffic(node);
        for (unsigned i = 0, e = node.getNumOperands(); i != e; ++i)
          cost.flops += staticElements(node.getOperand(i)->getType());
        return cost;
      })
      .add(registry);
  SchemaBuilder(kMsDomain, "IsFinite", 1)
      .inputs(1)
      .outputs(1)
      .traits(TraitElementwise)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        TensorType type = ctx.getInputType(0);
        type.setDType(DType::Bool);
        setOutput(ctx, 0, std::move(type));
        return llvm::Error::success();
      })
      .add(registry);
  SchemaBuilder(kMsDomain, "MixedPrecisionScale", 1)
      .inputs(2, kVariadic)
      .outputs(1, kVariadic)
      .requiredAttr("to", Attribute::Kind::Int)
      .attrInt("fuse_outputs", 0)
      .amp(AmpClass::None)
      .infer(inferMixedPrecisionScale)
      .add(registry);

  SchemaBuilder(kMsDomain, "YieldOp", 1)
      .inputs(1, kVariadic)
      .outputs(0, kVariadic)
      .optionalAttr("non_differentiable_outputs", Attribute::Kind::Ints)
      .requiredAttr("full_shape_outputs", Attribute::Kind::Ints)
      .traits(TraitSideEffect)
      .amp(AmpClass::None)
      .infer(inferYieldOp)
      .cost(zeroCost())
      .add(registry);
  SchemaBuilder(kMsDomain, "PassThrough", 1)
      .inputs(1, kVariadic)
      .outputs(1, kVariadic)
      .amp(AmpClass::None)
      .infer([](InferenceContext &ctx) -> llvm::Error {
        if (ctx.getNumInputs() != ctx.getNumOutputs())
          return ctx.error("needs as many outputs as inputs");
        for (unsigned i = 0, e = ctx.getNumInputs(); i != e; ++i)
          setOutput(ctx, i, ctx.getInputType(i));
        return llvm::Error::success();
      })
      .cost(zeroCost())
      .add(registry);
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// Errors unless input \p index is a one-element tensor of \p allowed.
llvm::Error checkScalarInput(const InferenceContext &ctx, unsigned index,
                             llvm::ArrayRef<DType> allowed,
                             llvm::StringRef role) {
  if (auto err = checkDTypeIn(ctx, index, allowed, role))
    return err;
  if (!ctx.hasInput(index))
    return llvm::Error::success();
  const TensorType &type = ctx.getInputType(index);
  if (type.hasStaticShape() && type.getNumElements() != 1)
    return ctx.error(role + " must hold one element, got " + type.str());
  return llvm::Error::success();
}

/// AdamWOptimizer / SGDOptimizerV2: the operand groups must fit the layout,
/// every group entry must be present, and parameter i's gradient and
/// moments must have its shape. Result 0 is the flag: AdamW's int64 with
/// the step's shape, SGD's bool with the learning rate's shape (ONNX
/// Runtime's kernels allocate it so).
llvm::Error inferOptimizer(InferenceContext &ctx) {
  OptimizerOperands layout(ctx.getNode());
  OptimizerKind kind = layout.getKind();
  if (!layout.isWellFormed())
    return ctx.error(llvm::formatv(
        "needs {0} leading operands and {1} groups of N >= 1 operands "
        "(weights, gradients{2}), got {3} operands",
        OptimizerOperands::numLeading(kind), OptimizerOperands::numGroups(kind),
        kind == OptimizerKind::AdamW ? ", first and second moments" : "",
        ctx.getNumInputs()));
  if (!ctx.hasInput(0))
    return ctx.error("the learning rate is required");
  if (auto err = checkScalarInput(ctx, 0, {DType::F32}, "learning rate"))
    return err;
  if (kind == OptimizerKind::AdamW) {
    if (!ctx.hasInput(1))
      return ctx.error("the step count is required");
    if (auto err = checkScalarInput(ctx, 1, kInt64Only, "step"))
      return err;
  }
  if (auto err =
          checkScalarInput(ctx, OptimizerOperands::updateSignalIndex(kind),
                           kBoolOnly, "update signal"))
    return err;
  for (unsigned i = 0, n = layout.size(); i != n; ++i) {
    llvm::SmallVector<unsigned, 4> group = {layout.paramIndex(i),
                                            layout.gradIndex(i)};
    for (unsigned k = 0, e = OptimizerOperands::numStates(kind); k != e; ++k)
      group.push_back(layout.stateIndex(k, i));
    for (unsigned index : group) {
      if (!ctx.hasInput(index))
        return ctx.error(llvm::formatv("operand {0} (of parameter {1}) is "
                                       "missing",
                                       index, i));
      if (auto err = checkDTypeIn(ctx, index, floatDTypes(), "tensor"))
        return err;
    }
    const TensorType &param = ctx.getInputType(group[0]);
    for (unsigned index : llvm::drop_begin(group)) {
      const TensorType &other = ctx.getInputType(index);
      if (param.hasRank() && other.hasRank() &&
          shapesConflict(param.getDims(), other.getDims()))
        return ctx.error(llvm::formatv("parameter {0} is {1} but operand {2} "
                                       "is {3}",
                                       i, param.str(), index, other.str()));
    }
  }
  if (kind == OptimizerKind::AdamW) {
    TensorType flag = ctx.getInputType(1);
    flag.setDType(DType::I64);
    setOutput(ctx, 0, std::move(flag));
  } else {
    TensorType flag = ctx.getInputType(0);
    flag.setDType(DType::Bool);
    setOutput(ctx, 0, std::move(flag));
  }
  return llvm::Error::success();
}

/// Reads every operand once and writes every weight and moment: AdamW does
/// about 12 flops per weight element, SGD 2.
OpCost optimizerCost(const Node &node) {
  OptimizerOperands layout(node);
  OpCost cost;
  if (!layout.isWellFormed())
    return memoryTraffic(node);
  cost = memoryTraffic(node);
  uint64_t perElement = layout.getKind() == OptimizerKind::AdamW ? 12 : 2;
  for (unsigned index : layout.writtenOperands())
    cost.bytesWritten += staticBytes(node.getOperand(index)->getType());
  for (unsigned i = 0, n = layout.size(); i != n; ++i)
    cost.flops += perElement * staticElements(layout.getParam(i)->getType());
  return cost;
}

void registerOptimizers(OpRegistry &registry) {
  auto written = [](const Node &node) {
    OptimizerOperands layout(node);
    return layout.isWellFormed() ? layout.writtenOperands()
                                 : llvm::SmallVector<unsigned, 8>();
  };
  // ONNX Runtime's defaults (training_op_defs.cc).
  // Variadic: every operand is present, update_signal included (see
  // ir/OptimizerOps.h); inferOptimizer checks the groups.
  SchemaBuilder(kMsDomain, "AdamWOptimizer", 1)
      .inputs(2, kVariadic)
      .outputs(1)
      .attrFloat("alpha", 0.9f)
      .attrFloat("beta", 0.999f)
      .attrFloat("epsilon", 1e-8f)
      .attrFloat("weight_decay", 1e-2f)
      .attrInt("correct_bias", 1)
      .attrInt("adam_mode", 0)
      .traits(TraitSideEffect)
      .writesOperands(written)
      .amp(AmpClass::None)
      .infer(inferOptimizer)
      .cost(optimizerCost)
      .add(registry);
  SchemaBuilder(kMsDomain, "SGDOptimizerV2", 1)
      .inputs(1, kVariadic)
      .outputs(1)
      .traits(TraitSideEffect)
      .writesOperands(written)
      .amp(AmpClass::None)
      .infer(inferOptimizer)
      .cost(optimizerCost)
      .add(registry);
}

} // namespace

void ops::registerMicrosoftTrainingOps(OpRegistry &registry) {
  registerMovementGrads(registry);
  registerBroadcastAndShapeHelpers(registry);
  registerAccumulationAndAmp(registry);
  registerOptimizers(registry);
}
