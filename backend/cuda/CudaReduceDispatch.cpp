//===- CudaReduceDispatch.cpp - The CUDA table's reduction entries --------===//
//
// The Reduce* family (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceSumSquare, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp, com.microsoft ReduceSumTraining), ArgMax / ArgMin,
// InstanceNormalization, com.microsoft InvertibleLayerNormalizationGrad and
// com.microsoft DivGrad on CUDA (ReduceKernels.cu). Float tensors (f32, f16,
// bf16) only, accumulated as ReduceMath.h says. The reduced axes may be any
// set: the kernels read them through a ReduceIndexing, so nothing is
// transposed first. Axes given as an operand must be initializers (read on
// the host when the node is prepared: each node is decoded once into the
// plan its launches read). The checks refuse at prepare time what
// the CPU kernels (backend/cpu/ReduceKernels.cpp, NormKernels.cpp,
// TrainingKernels.cpp) would refuse at run time and can be seen from the
// static types.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/ReduceKernels.h"
#include "ir/ops/NormRows.h"
#include "ir/ops/ReduceAxes.h"

#include "llvm/ADT/StringSwitch.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

namespace {

/// The ReduceIndexing of \p extents reducing the dimensions flagged in
/// \p reduced, slot s reading with \p strides[s].
llvm::Expected<ReduceIndexing> planFor(const Node &node,
                                       llvm::ArrayRef<int64_t> extents,
                                       llvm::ArrayRef<bool> reduced,
                                       llvm::ArrayRef<Shape> strides) {
  assert(strides.size() <= static_cast<size_t>(kReduceSlots) &&
         "three slots at most");
  std::vector<ReduceDim> dims(extents.size());
  for (size_t d = 0; d < extents.size(); ++d) {
    dims[d].extent = extents[d];
    dims[d].reduced = reduced[d];
    for (size_t s = 0; s < strides.size(); ++s)
      dims[d].stride[s] = strides[s][d];
  }
  ReduceIndexing ix;
  if (!planReduction(dims, ix))
    return nodeError(node, "more than " + llvm::Twine(kMaxRank) +
                               " kept or reduced dimensions after collapsing");
  return ix;
}

/// Errors unless result 0 has \p elements elements.
llvm::Error checkResultElements(const Node &node, int64_t elements) {
  if (static_cast<int64_t>(node.getResult(0)->getType().getNumElements()) !=
      elements)
    return nodeError(node, "the output does not have the reduced shape");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Reduce*
//===----------------------------------------------------------------------===//

std::optional<ReduceKind> reduceKindOf(llvm::StringRef op) {
  return llvm::StringSwitch<std::optional<ReduceKind>>(op)
      .Cases("ReduceSum", "ReduceSumTraining", ReduceKind::Sum)
      .Case("ReduceMean", ReduceKind::Mean)
      .Case("ReduceMax", ReduceKind::Max)
      .Case("ReduceMin", ReduceKind::Min)
      .Case("ReduceSumSquare", ReduceKind::SumSquare)
      .Case("ReduceProd", ReduceKind::Prod)
      .Case("ReduceL1", ReduceKind::L1)
      .Case("ReduceL2", ReduceKind::L2)
      .Case("ReduceLogSum", ReduceKind::LogSum)
      .Case("ReduceLogSumExp", ReduceKind::LogSumExp)
      .Default(std::nullopt);
}

/// The plan of a Reduce* node: axes from the attribute, or the constant
/// second operand (opset 18, and ReduceSum from 13); no axes reduce every
/// dimension unless noop_with_empty_axes.
llvm::Expected<ReduceIndexing> reducePlan(const Node &node) {
  Shape shape = shapeOf(node.getOperand(0));
  ops::ReduceSpec spec = ops::getReduceSpec(node);
  std::vector<int64_t> operandAxes;
  if (spec.axesFromOperand) {
    auto values = constantInts(node, 1, "axes");
    if (!values)
      return values.takeError();
    operandAxes = std::move(*values);
  }
  auto axes = spec.resolve(shape.size(), operandAxes);
  if (!axes)
    return nodeError(node, llvm::toString(axes.takeError()));
  return planFor(node, shape, axes->reduced, {contiguousStrides(shape)});
}

/// A Reduce* node decoded once.
struct ReducePlan {
  ReduceKind kind = ReduceKind::Sum;
  Storage storage = Storage::F32;
  ReduceIndexing indexing;
};

llvm::Expected<ReducePlan> decodeReduce(const Node &node) {
  auto storage = commonFloatStorage(node, {1});
  if (!storage)
    return storage.takeError();
  std::optional<ReduceKind> kind = reduceKindOf(node.getOpType());
  if (!kind)
    return nodeError(node, "not a reduction");
  auto ix = reducePlan(node);
  if (!ix)
    return ix.takeError();
  if (llvm::Error err = checkResultElements(node, ix->outputs))
    return err;
  return ReducePlan{*kind, *storage, *ix};
}

llvm::Error launchReducePlan(CudaCall &call, const ReducePlan &p) {
  return call.check(launchStridedReduce(p.kind, p.storage, call.inPtr(0),
                                        call.outPtr(0), p.indexing,
                                        call.ctx.stream),
                    "Reduce kernel");
}

//===----------------------------------------------------------------------===//
// ArgMax / ArgMin
//===----------------------------------------------------------------------===//

/// The plan of an ArgMax / ArgMin node: its one reduced axis.
llvm::Expected<ReduceIndexing> argReducePlan(const Node &node,
                                             const ops::ArgReduceSpec &spec) {
  Shape shape = shapeOf(node.getOperand(0));
  auto axes = spec.resolve(shape.size());
  if (!axes)
    return nodeError(node, llvm::toString(axes.takeError()));
  return planFor(node, shape, axes->reduced, {contiguousStrides(shape)});
}

/// An ArgMax / ArgMin node decoded once.
struct ArgReducePlan {
  Storage storage = Storage::F32;
  ReduceIndexing indexing;
  bool max = false;
  bool selectLastIndex = false;
};

llvm::Expected<ArgReducePlan> decodeArgReduce(const Node &node) {
  std::optional<Storage> storage =
      storageOf(node.getOperand(0)->getType().getDType());
  if (!storage || !isFloatStorage(*storage))
    return nodeError(node,
                     "element type " +
                         dtypeName(node.getOperand(0)->getType().getDType()) +
                         " is not supported (f32, f16, bf16)");
  if (node.getResult(0)->getType().getDType() != DType::I64)
    return nodeError(node, "the output must be int64");
  ops::ArgReduceSpec spec = ops::getArgReduceSpec(node);
  auto ix = argReducePlan(node, spec);
  if (!ix)
    return ix.takeError();
  if (ix->count == 0 && ix->outputs)
    return nodeError(node, "cannot take an arg-reduction over an empty axis");
  if (llvm::Error err = checkResultElements(node, ix->outputs))
    return err;
  ArgReducePlan p;
  p.storage = *storage;
  p.indexing = *ix;
  p.max = node.getOpType() == "ArgMax";
  p.selectLastIndex = spec.selectLastIndex;
  return p;
}

llvm::Error launchArgReducePlan(CudaCall &call, const ArgReducePlan &p) {
  return call.check(launchArgReduce(p.storage, call.inPtr(0),
                                    call.outAs<int64_t>(0), p.indexing, p.max,
                                    p.selectLastIndex, call.ctx.stream),
                    "ArgMax/ArgMin kernel");
}

//===----------------------------------------------------------------------===//
// InstanceNormalization
//===----------------------------------------------------------------------===//

/// InstanceNormalization(input, scale, B) -> Y, decoded once.
struct InstanceNormPlan {
  Storage storage = Storage::F32;
  /// batch x channels planes of `channels` channels and `spatial` elements.
  int64_t planes = 0, channels = 0, spatial = 0;
  float epsilon = 1e-5f;
};

llvm::Expected<InstanceNormPlan> decodeInstanceNorm(const Node &node) {
  auto storage = commonFloatStorage(node);
  if (!storage)
    return storage.takeError();
  Shape shape = shapeOf(node.getOperand(0));
  if (shape.size() < 3)
    return nodeError(node, "input must have rank >= 3");
  for (unsigned i : {1u, 2u})
    if (!node.getOperand(i) ||
        static_cast<int64_t>(node.getOperand(i)->getType().getNumElements()) !=
            shape[1])
      return nodeError(node, "scale and B must have one element per channel");
  if (shapeOf(node.getResult(0)) != shape)
    return nodeError(node, "the output must have the input's shape");
  InstanceNormPlan p;
  p.storage = *storage;
  p.planes = shape[0] * shape[1];
  p.channels = shape[1];
  p.spatial = product(llvm::ArrayRef<int64_t>(shape).drop_front(2));
  p.epsilon = node.getFloatAttr("epsilon", 1e-5f);
  return p;
}

llvm::Error launchInstanceNormPlan(CudaCall &call, const InstanceNormPlan &p) {
  return call.check(launchInstanceNorm(p.storage, call.inPtr(0), call.inPtr(1),
                                       call.inPtr(2), call.outPtr(0), p.planes,
                                       p.channels, p.spatial, p.epsilon,
                                       call.ctx.stream),
                    "InstanceNormalization kernel");
}

//===----------------------------------------------------------------------===//
// InvertibleLayerNormalizationGrad
//===----------------------------------------------------------------------===//

/// Rows and columns of InvertibleLayerNormalizationGrad(dY, Y, scale, bias,
/// inv_std_var) -> (dX, dScale?, dBias?), split at `axis`.
llvm::Expected<std::pair<int64_t, int64_t>>
invertibleNormRows(const Node &node) {
  auto rows = norm::getNormRows(node, shapeOf(node.getOperand(1)));
  if (!rows)
    return nodeError(node, llvm::toString(rows.takeError()));
  return std::make_pair(rows->rows, rows->cols);
}

/// Errors when \p value is a constant holding a zero.
llvm::Error checkNoZeroScale(const Node &node, const Value *scale) {
  if (!scale->isInitializer())
    return llvm::Error::success();
  if (llvm::Error err = scale->getData().load())
    return err;
  for (uint64_t i = 0; i < scale->getType().getNumElements(); ++i)
    if (scale->getData().getFloatElement(i) == 0)
      return nodeError(node, "a zero scale makes the norm not invertible");
  return llvm::Error::success();
}

/// InvertibleLayerNormalizationGrad decoded once.
struct InvertibleNormGradPlan {
  Storage storage = Storage::F32;
  int64_t rows = 0, cols = 0;
};

llvm::Expected<InvertibleNormGradPlan>
decodeInvertibleNormGrad(const Node &node) {
  for (unsigned i = 0; i < 5; ++i)
    if (!node.getOperand(i))
      return nodeError(node, "dY, Y, scale, bias and inv_std_var are required");
  if (node.getOperand(4)->getType().getDType() != DType::F32)
    return nodeError(node, "inv_std_var must be float32");
  if (auto storage = commonFloatStorage(node, {4}); !storage)
    return storage.takeError();
  Shape shape = shapeOf(node.getOperand(1));
  if (shapeOf(node.getOperand(0)) != shape ||
      shapeOf(node.getResult(0)) != shape)
    return nodeError(node, "dY, Y and dX must have one shape");
  auto rows = invertibleNormRows(node);
  if (!rows)
    return rows.takeError();
  auto [count, cols] = *rows;
  auto elements = [](const Value *value) {
    return static_cast<int64_t>(value->getType().getNumElements());
  };
  if (elements(node.getOperand(2)) != cols ||
      elements(node.getOperand(3)) != cols)
    return nodeError(node, "scale and bias must have one element per "
                           "normalized column");
  if (elements(node.getOperand(4)) != count)
    return nodeError(node, "inv_std_var must have one element per row");
  for (unsigned i = 1; i < node.getNumResults(); ++i)
    if (node.getResult(i) && elements(node.getResult(i)) != cols)
      return nodeError(node, "parameter gradients must have one element per "
                             "column");
  if (llvm::Error err = checkNoZeroScale(node, node.getOperand(2)))
    return err;
  return InvertibleNormGradPlan{*commonFloatStorage(node, {4}), count, cols};
}

llvm::Error launchInvertibleNormGrad(CudaCall &call,
                                     const InvertibleNormGradPlan &p) {
  return call.check(launchInvertibleLayerNormGrad(
                        p.storage, call.inPtr(0), call.inPtr(1), call.inPtr(2),
                        call.inPtr(3), call.inAs<float>(4), call.outPtr(0),
                        call.outPtr(1), call.outPtr(2), p.rows, p.cols,
                        call.ctx.stream),
                    "InvertibleLayerNormalizationGrad kernel");
}

//===----------------------------------------------------------------------===//
// DivGrad
//===----------------------------------------------------------------------===//

/// The plan of DivGrad(dY, A, B)'s output \p result (0: dA, 1: dB) over
/// dY's space: slots dY, A, B; reduced where the output's operand is
/// broadcast.
llvm::Expected<ReduceIndexing> divGradPlan(const Node &node, unsigned result) {
  Shape dy = shapeOf(node.getOperand(0));
  Shape a = shapeOf(node.getOperand(1)), b = shapeOf(node.getOperand(2));
  llvm::ArrayRef<int64_t> shapes[] = {a, b};
  std::optional<ops::StaticShape> full = ops::broadcastStaticShapes(shapes);
  if (!full || llvm::ArrayRef<int64_t>(*full) != llvm::ArrayRef<int64_t>(dy))
    return nodeError(node, "dY's shape is not the broadcast of A's and B's");
  Shape strideA, strideB;
  if (!broadcastStrides(a, dy, strideA) || !broadcastStrides(b, dy, strideB))
    return nodeError(node, "A and B do not broadcast to dY");
  const Shape &own = result == 0 ? strideA : strideB;
  llvm::SmallVector<bool, 6> reduced(dy.size());
  for (size_t d = 0; d < dy.size(); ++d)
    reduced[d] = own[d] == 0;
  return planFor(node, dy, reduced, {contiguousStrides(dy), strideA, strideB});
}

/// DivGrad(dY, A, B) -> (dA?, dB?) decoded once: one reduction per
/// present result.
struct DivGradPlan {
  Storage storage = Storage::F32;
  /// dA's and dB's plans, none for an absent result.
  std::optional<ReduceIndexing> results[2];
};

llvm::Expected<DivGradPlan> decodeDivGrad(const Node &node) {
  auto storage = commonFloatStorage(node);
  if (!storage)
    return storage.takeError();
  DivGradPlan p;
  p.storage = *storage;
  for (unsigned result : {0u, 1u}) {
    if (result >= node.getNumResults() || !node.getResult(result))
      continue;
    if (shapeOf(node.getResult(result)) != shapeOf(node.getOperand(result + 1)))
      return nodeError(node, result == 0 ? "dA must have A's shape"
                                         : "dB must have B's shape");
    auto ix = divGradPlan(node, result);
    if (!ix)
      return ix.takeError();
    p.results[result] = *ix;
  }
  return p;
}

llvm::Error launchDivGradPlan(CudaCall &call, const DivGradPlan &p) {
  for (unsigned result : {0u, 1u}) {
    if (!p.results[result])
      continue;
    if (llvm::Error err = call.check(
            launchDivGrad(p.storage, call.inPtr(0), call.inPtr(1),
                          call.inPtr(2), call.outPtr(result),
                          *p.results[result], result == 1, call.ctx.stream),
            "DivGrad kernel"))
      return err;
  }
  return llvm::Error::success();
}

} // namespace

void cuda::dispatch::addReduceKernels(llvm::StringMap<KernelEntry> &table) {
  KernelEntry reduce =
      decodedEntry<ReducePlan, decodeReduce, launchReducePlan>();
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                         "ReduceSumSquare", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})
    addEntry(table, "", op, reduce);
  addEntry(table, kMsDomain, "ReduceSumTraining", reduce);
  KernelEntry argReduce =
      decodedEntry<ArgReducePlan, decodeArgReduce, launchArgReducePlan>();
  addEntry(table, "", "ArgMax", argReduce);
  addEntry(table, "", "ArgMin", argReduce);
  addEntry(table, "", "InstanceNormalization",
           decodedEntry<InstanceNormPlan, decodeInstanceNorm,
                        launchInstanceNormPlan>());
  addEntry(table, kMsDomain, "InvertibleLayerNormalizationGrad",
           decodedEntry<InvertibleNormGradPlan, decodeInvertibleNormGrad,
                        launchInvertibleNormGrad>());
  addEntry(table, kMsDomain, "DivGrad",
           decodedEntry<DivGradPlan, decodeDivGrad, launchDivGradPlan>());
}
