//===- CudaDispatch.cpp - The CUDA kernel table ---------------------------===//
//
// One entry per (domain, op) with a CUDA kernel, found by the node's schema
// once, when the node is prepared: a prepare that decodes the node's static
// types, shapes and attributes into a descriptor (and chooses a GEMM's or a
// convolution's algorithm), a check that is the same decision without a
// device, a run that enqueues the launches of CudaKernels.h reading only the
// descriptor, and the scratch rule of the table's column
// (CudaKernelTable.h). Every entry decodes at prepare. Constant
// operands the kernels need on the host (Slice starts, Reduce axes, Split
// sizes) must be initializers; scalars the kernels can read themselves (dropout
// ratio, lr, step, flags) stay on the device so no launch waits for the host.
// What the table does not cover is refused by checkCudaKernel with the op's
// name and the node, never run wrongly. The data-movement entries live in
// CudaMovementDispatch.cpp, the helpers all entries share in
// CudaDispatchSupport.h.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/CudnnGeometry.h"
#include "backend/cuda/IndexingPlan.h"

#include "ir/OpRegistry.h"
#include "ir/OptimizerOps.h"
#include "ir/ops/Axes.h"
#include "ir/ops/NormRows.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstring>
#include <numeric>
#include <optional>
#include <tuple>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

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

//===----------------------------------------------------------------------===//
// Softmax, norms
//===----------------------------------------------------------------------===//

/// [outer, n, inner] of a softmax-family node over \p shape: its axis
/// convention, read once by ops::getSoftmaxAxes (ir/ops/Axes.h).
llvm::Expected<RowShape> softmaxRows(const Node &node, const Shape &shape) {
  auto axes = ops::getSoftmaxAxes(node, shape);
  if (!axes)
    return nodeError(node, llvm::toString(axes.takeError()));
  RowShape rows;
  rows.outer = axes->outer;
  rows.n = axes->axisDim;
  rows.inner = axes->inner;
  return rows;
}

llvm::Error checkSoftmax(const Node &node) {
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  return softmaxRows(node, shapeOf(node.getOperand(0))).takeError();
}

/// A softmax-family node decoded once.
struct SoftmaxDescriptor final : CudaKernelDescriptor {
  Storage storage = Storage::F32;
  RowShape rows;
  /// LogSoftmax(Grad).
  bool log = false;
  /// SoftmaxGrad(dY, Y) -> dX.
  bool grad = false;
};

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareSoftmax(const Node &node, const KernelPreparation &,
               CudaKernelContext &) {
  auto storage = commonFloatStorage(node);
  if (!storage)
    return storage.takeError();
  auto rows = softmaxRows(node, shapeOf(node.getOperand(0)));
  if (!rows)
    return rows.takeError();
  auto descriptor = std::make_unique<SoftmaxDescriptor>();
  descriptor->storage = *storage;
  descriptor->rows = *rows;
  descriptor->log = node.getOpType().starts_with("Log");
  descriptor->grad = node.getDomain() == kMsDomain;
  return descriptor;
}

llvm::Error runSoftmax(CudaCall &call) {
  const auto &d = call.getDescriptor<SoftmaxDescriptor>();
  if (d.grad)
    return call.check(launchSoftmaxGrad(d.storage, call.inPtr(0), call.inPtr(1),
                                        call.outPtr(0), d.rows, d.log,
                                        call.ctx.stream),
                      "SoftmaxGrad kernel");
  return call.check(launchSoftmax(d.storage, call.inPtr(0), call.outPtr(0),
                                  d.rows, d.log, call.ctx.stream),
                    "Softmax kernel");
}

bool isSimplifiedNorm(const Node &node) {
  return norm::getNormKind(node) == norm::NormKind::Rms;
}

/// Rows and width of a layer norm over \p shape split at `axis`.
llvm::Expected<std::pair<int64_t, int64_t>> normRows(const Node &node,
                                                     const Shape &shape) {
  auto rows = norm::getNormRows(node, shape);
  if (!rows)
    return nodeError(node, llvm::toString(rows.takeError()));
  return std::make_pair(rows->rows, rows->cols);
}

/// How the scale and bias (1 when absent) of a layer norm repeat along a
/// row (norm::getParamPeriod).
llvm::Expected<std::pair<int64_t, int64_t>> normParamPeriods(const Node &node) {
  Shape shape = shapeOf(node.getOperand(0));
  auto rows = norm::getNormRows(node, shape);
  if (!rows)
    return nodeError(node, llvm::toString(rows.takeError()));
  llvm::ArrayRef<int64_t> normalized =
      llvm::ArrayRef<int64_t>(shape).drop_front(rows->axis);
  int64_t periods[2] = {1, 1};
  for (unsigned i : {1u, 2u}) {
    const Value *param =
        i < node.getNumOperands() ? node.getOperand(i) : nullptr;
    if (!param || (isSimplifiedNorm(node) && i == 2))
      continue;
    std::optional<int64_t> period =
        norm::getParamPeriod(normalized, shapeOf(param));
    if (!period)
      return nodeError(node, "scale and bias must have the normalized shape "
                             "or a shape of its trailing dimensions");
    periods[i - 1] = rows->cols ? *period : 1;
  }
  return std::make_pair(periods[0], periods[1]);
}

/// A layer norm (LayerNormalization, SimplifiedLayerNormalization,
/// RMSNormalization) or its gradient, decoded once.
struct LayerNormPlan {
  Storage storage = Storage::F32;
  /// RMS: no mean, no bias.
  bool simplified = false;
  /// rows x cols (norm::getNormRows).
  int64_t rows = 0, cols = 0;
  /// How scale and bias repeat along a row (forward only).
  int64_t scalePeriod = 1, biasPeriod = 1;
  float epsilon = 1e-5f;
};

llvm::Expected<LayerNormPlan> decodeLayerNorm(const Node &node) {
  LayerNormPlan plan;
  plan.simplified = isSimplifiedNorm(node);
  // Statistics outputs are fp32.
  llvm::SmallVector<unsigned, 2> stats =
      plan.simplified ? llvm::SmallVector<unsigned, 2>{1}
                      : llvm::SmallVector<unsigned, 2>{1, 2};
  for (unsigned i : stats)
    if (i < node.getNumResults() && node.getResult(i) &&
        node.getResult(i)->getType().getDType() != DType::F32)
      return nodeError(node, "statistics outputs must be float32");
  auto storage = commonFloatStorage(node, {}, stats);
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;
  auto rows = normRows(node, shapeOf(node.getOperand(0)));
  if (!rows)
    return rows.takeError();
  std::tie(plan.rows, plan.cols) = *rows;
  auto periods = normParamPeriods(node);
  if (!periods)
    return periods.takeError();
  std::tie(plan.scalePeriod, plan.biasPeriod) = *periods;
  plan.epsilon = node.getFloatAttr("epsilon", 1e-5f);
  return plan;
}

llvm::Error launchLayerNormPlan(CudaCall &call, const LayerNormPlan &p) {
  bool simplified = p.simplified;
  return call.check(launchLayerNorm(p.storage, call.inPtr(0), call.inPtr(1),
                                    simplified ? nullptr : call.inPtr(2),
                                    call.outPtr(0),
                                    simplified ? nullptr : call.outAs<float>(1),
                                    call.outAs<float>(simplified ? 1 : 2),
                                    p.rows, p.cols, p.scalePeriod, p.biasPeriod,
                                    p.epsilon, simplified, call.ctx.stream),
                    "LayerNormalization kernel");
}

/// LayerNormalizationGrad(dY, X, scale, mean, inv_std) and
/// SimplifiedLayerNormalizationGrad(dY, X, scale, inv_std).
llvm::Expected<LayerNormPlan> decodeLayerNormGrad(const Node &node) {
  LayerNormPlan plan;
  plan.simplified = isSimplifiedNorm(node);
  llvm::SmallVector<unsigned, 2> stats =
      plan.simplified ? llvm::SmallVector<unsigned, 2>{3}
                      : llvm::SmallVector<unsigned, 2>{3, 4};
  for (unsigned i : stats)
    if (!node.getOperand(i) ||
        node.getOperand(i)->getType().getDType() != DType::F32)
      return nodeError(node, "saved statistics must be present float32");
  auto storage = commonFloatStorage(node, stats);
  if (!storage)
    return storage.takeError();
  plan.storage = *storage;
  auto rows = normRows(node, shapeOf(node.getOperand(1)));
  if (!rows)
    return rows.takeError();
  std::tie(plan.rows, plan.cols) = *rows;
  return plan;
}

llvm::Error launchLayerNormGradPlan(CudaCall &call, const LayerNormPlan &p) {
  bool simplified = p.simplified;
  return call.check(launchLayerNormGrad(
                        p.storage, call.inPtr(0), call.inPtr(1), call.inPtr(2),
                        simplified ? nullptr : call.inAs<float>(3),
                        call.inAs<float>(simplified ? 3 : 4), call.outPtr(0),
                        call.outPtr(1), simplified ? nullptr : call.outPtr(2),
                        p.rows, p.cols, simplified, call.ctx.stream),
                    "LayerNormalizationGrad kernel");
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

/// outer, axis extent, index count and inner of Gather(data, indices)
/// over \p dataShape.
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

/// A Gather or GatherGrad node decoded once.
struct GatherDescriptor final : CudaKernelDescriptor {
  GatherGeometry geometry;
  /// Gather: bytes of one data element.
  int64_t elementBytes = 0;
  /// GatherGrad: dY's storage, and whether its 16-bit sums go through the
  /// planned fp32 accumulator (the node's workspace slice).
  Storage storage = Storage::F32;
  bool plannedAccumulator = false;
};

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareGather(const Node &node, const KernelPreparation &,
              CudaKernelContext &) {
  if (llvm::Error err = checkAnyElement(node))
    return err;
  auto g =
      gatherGeometry(node, shapeOf(node.getOperand(0)), node.getOperand(1));
  if (!g)
    return g.takeError();
  auto d = std::make_unique<GatherDescriptor>();
  d->geometry = *g;
  d->elementBytes = elementBytes(node.getOperand(0));
  return d;
}

llvm::Error runGather(CudaCall &call) {
  const auto &d = call.getDescriptor<GatherDescriptor>();
  const GatherGeometry &g = d.geometry;
  if (llvm::Error err = call.markFaultable())
    return err;
  return call.check(launchGather(call.inPtr(0), call.inPtr(1), g.indices32,
                                 call.outPtr(0), g.outer, g.axisExtent,
                                 g.indexCount, g.inner, d.elementBytes,
                                 call.ctx.stream),
                    "Gather kernel");
}

/// GatherGrad(shape, indices, dY) -> dX (fp32, f16 or bf16; one type).
llvm::Error checkGatherGrad(const Node &node) {
  if (auto storage = commonFloatStorage(node, {0, 1}); !storage)
    return storage.takeError();
  return gatherGeometry(node, shapeOf(node.getResult(0)), node.getOperand(1))
      .takeError();
}

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareGatherGrad(const Node &node, const KernelPreparation &preparation,
                  CudaKernelContext &) {
  if (llvm::Error err = checkGatherGrad(node))
    return err;
  auto d = std::make_unique<GatherDescriptor>();
  d->geometry =
      *gatherGeometry(node, shapeOf(node.getResult(0)), node.getOperand(1));
  d->storage = *storageOf(node.getOperand(2)->getType().getDType());
  // 16-bit (CnnKernels.h): fp32 sums in the planned accumulator
  // (getScatterAccumulatorBytes), rounded once; eager: 16-bit adds.
  uint64_t needed = getScatterAccumulatorBytes(node);
  d->plannedAccumulator =
      needed && preparation.planned && preparation.workspaceBytes >= needed;
  return d;
}

llvm::Error runGatherGrad(CudaCall &call) {
  const auto &d = call.getDescriptor<GatherDescriptor>();
  const GatherGeometry &g = d.geometry;
  if (llvm::Error err = call.markFaultable())
    return err;
  if (d.storage != Storage::F32) {
    ScatterRows rows{g.outer, g.axisExtent, g.indexCount, g.inner};
    float *accumulator = d.plannedAccumulator
                             ? static_cast<float *>(call.launch.workspace)
                             : nullptr;
    return call.check(
        launchScatterAdd16(d.storage, call.inPtr(2), call.inPtr(1), g.indices32,
                           call.outPtr(0), accumulator, rows, call.ctx.stream),
        "GatherGrad kernel");
  }
  return call.check(launchGatherGrad(call.inAs<float>(2), call.inPtr(1),
                                     g.indices32, call.outAs<float>(0), g.outer,
                                     g.axisExtent, g.indexCount, g.inner,
                                     call.ctx.stream),
                    "GatherGrad kernel");
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

/// An InPlaceAccumulatorV2 node decoded once.
struct AccumulatorPlan {
  Storage buffer = Storage::F32, value = Storage::F32;
  int64_t elements = 0;
};

llvm::Expected<AccumulatorPlan> decodeAccumulator(const Node &node) {
  if (llvm::Error err = checkAccumulator(node))
    return err;
  AccumulatorPlan p;
  p.buffer = *storageOf(node.getOperand(0)->getType().getDType());
  p.value = *storageOf(node.getOperand(1)->getType().getDType());
  p.elements = node.getOperand(0)->getType().getNumElements();
  return p;
}

llvm::Error launchAccumulator(CudaCall &call, const AccumulatorPlan &p) {
  return call.check(launchAccumulate(p.buffer,
                                     const_cast<void *>(call.inPtr(0)), p.value,
                                     call.inPtr(1), call.inAs<uint8_t>(2),
                                     call.outAs<uint8_t>(0), call.outPtr(1),
                                     p.elements, call.ctx.stream),
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

/// An optimizer node decoded once: its attributes and operand groups.
struct OptimizerDescriptor final : CudaKernelDescriptor {
  bool adamW = false;
  unsigned signalIndex = 0;
  /// The attributes (the operand pointers are set per launch).
  AdamWParams params = {};
  /// One parameter's operand indices (m1, m2: AdamW only) and size.
  struct Group {
    unsigned weight = 0, grad = 0, m1 = 0, m2 = 0;
    int64_t elements = 0;
  };
  llvm::SmallVector<Group, 8> groups;
};

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareOptimizer(const Node &node, const KernelPreparation &,
                 CudaKernelContext &) {
  if (llvm::Error err = checkOptimizer(node))
    return err;
  OptimizerOperands layout(node);
  auto d = std::make_unique<OptimizerDescriptor>();
  d->adamW = layout.getKind() == OptimizerKind::AdamW;
  d->signalIndex = OptimizerOperands::updateSignalIndex(layout.getKind());
  AdamWParams &params = d->params;
  params.alpha = node.getFloatAttr("alpha", 0.9f);
  params.beta = node.getFloatAttr("beta", 0.999f);
  params.epsilon = node.getFloatAttr("epsilon", 1e-8f);
  params.weightDecay = node.getFloatAttr("weight_decay", 1e-2f);
  params.mode = static_cast<int32_t>(node.getIntAttr("adam_mode", 0));
  params.correctBias = node.getIntAttr("correct_bias", 1) == 1;
  for (unsigned i = 0; i < layout.size(); ++i) {
    OptimizerDescriptor::Group group;
    group.weight = layout.paramIndex(i);
    group.grad = layout.gradIndex(i);
    if (d->adamW) {
      group.m1 = layout.stateIndex(0, i);
      group.m2 = layout.stateIndex(1, i);
    }
    group.elements = node.getOperand(group.weight)->getType().getNumElements();
    d->groups.push_back(group);
  }
  return d;
}

llvm::Error runOptimizer(CudaCall &call) {
  const auto &d = call.getDescriptor<OptimizerDescriptor>();
  bool adamW = d.adamW;
  const uint8_t *signal = call.inAs<uint8_t>(d.signalIndex);
  AdamWParams params = d.params;
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
  for (const OptimizerDescriptor::Group &group : d.groups) {
    OptimizerTensor t;
    t.weight = const_cast<float *>(call.inAs<float>(group.weight));
    t.grad = call.inAs<float>(group.grad);
    if (adamW) {
      t.m1 = const_cast<float *>(call.inAs<float>(group.m1));
      t.m2 = const_cast<float *>(call.inAs<float>(group.m2));
    }
    t.elements = group.elements;
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
  return runCudaMatMul(*call.descriptor, call.launch, call.ctx);
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

const llvm::StringMap<KernelEntry> &getTable() {
  static const llvm::StringMap<KernelEntry> table = [] {
    llvm::StringMap<KernelEntry> t;
    // An entry that decodes its nodes once, when they are prepared.
    auto addPrepared = [&](llvm::StringRef domain, llvm::StringRef op,
                           CheckFn check, PrepareFn prepare, RunFn run) {
      t[(domain + "::" + op).str()] = {check, run, prepare};
    };
    addElementwiseKernels(t);
    addMovementKernels(t);
    addCnnKernels(t);
    addCollectiveKernels(t);
    addIndexKernels(t);
    addTrainingKernels(t);
    addScalingKernels(t);
    addLossKernels(t);
    addDropoutKernels(t);
    addReduceKernels(t);
    addShapeKernels(t);
    addResizeKernels(t);
    addFusedKernels(t);
    for (const char *op : {"Softmax", "LogSoftmax"})
      addPrepared("", op, checkSoftmax, prepareSoftmax, runSoftmax);
    for (const char *op : {"SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                           "LogSoftmaxGrad_13"})
      addPrepared(kMsDomain, op, checkSoftmax, prepareSoftmax, runSoftmax);
    KernelEntry layerNorm =
        decodedEntry<LayerNormPlan, decodeLayerNorm, launchLayerNormPlan>();
    t["::LayerNormalization"] = layerNorm;
    t["::SimplifiedLayerNormalization"] = layerNorm;
    t[(kMsDomain + "::SimplifiedLayerNormalization").str()] = layerNorm;
    t["::RMSNormalization"] = layerNorm;
    KernelEntry layerNormGrad = decodedEntry<LayerNormPlan, decodeLayerNormGrad,
                                             launchLayerNormGradPlan>();
    t[(kMsDomain + "::LayerNormalizationGrad").str()] = layerNormGrad;
    t[(kMsDomain + "::SimplifiedLayerNormalizationGrad").str()] = layerNormGrad;
    addPrepared("", "Gather", checkGather, prepareGather, runGather);
    addPrepared(kMsDomain, "GatherGrad", checkGatherGrad, prepareGatherGrad,
                runGatherGrad);
    addEntry(
        t, kMsDomain, "InPlaceAccumulatorV2",
        decodedEntry<AccumulatorPlan, decodeAccumulator, launchAccumulator>());
    addPrepared(kMsDomain, "AdamWOptimizer", checkOptimizer, prepareOptimizer,
                runOptimizer);
    addPrepared(kMsDomain, "SGDOptimizerV2", checkOptimizer, prepareOptimizer,
                runOptimizer);
    // The GEMMs choose their cuBLASLt algorithm at prepare, on the device.
    for (const char *op : {"MatMul", "Gemm"})
      addPrepared("", op, checkCudaMatMul, prepareCudaMatMul, runMatMul);
    addPrepared(kMsDomain, "FusedMatMul", checkCudaMatMul, prepareCudaMatMul,
                runMatMul);
    for (const char *op : {"::MatMul", "::Gemm", "com.microsoft::FusedMatMul"})
      t[op].preparesOnDevice = true;
    // Each entry's scratch rule, from the column the planner reads.
    for (auto &entry : t) {
      auto [domain, op] = entry.getKey().split("::");
      entry.second.scratch = getKernelScratchRule(domain, op);
    }
    assert(llvm::all_of(listKernelScratchOps(),
                        [&](const std::string &op) { return t.count(op); }) &&
           "a scratch rule for an op without a CUDA kernel");
    return t;
  }();
  return table;
}

/// The table's entries by schema (the registry's op identity): every
/// registered version of an op with an entry maps to it.
const llvm::DenseMap<const OpSchema *, const KernelEntry *> &getSchemaIndex() {
  static const llvm::DenseMap<const OpSchema *, const KernelEntry *> index =
      [] {
        llvm::DenseMap<const OpSchema *, const KernelEntry *> bySchema;
        const llvm::StringMap<KernelEntry> &table = getTable();
        for (const OpSchema *schema : OpRegistry::instance().all()) {
          auto it = table.find(schema->domain + "::" + schema->name);
          if (it != table.end())
            bySchema[schema] = &it->second;
        }
        return bySchema;
      }();
  return index;
}

/// \p node's entry after its arity is checked against its schema.
llvm::Expected<const KernelEntry *> findEntry(const Node &node) {
  auto schema = getKernelSchema(node, "CUDA");
  if (!schema)
    return schema.takeError();
  const KernelEntry *entry = getSchemaIndex().lookup(*schema);
  if (!entry)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no CUDA kernel for '" + node.getOp().str() +
                                       "' yet (node " + node.describe() +
                                       "); run it with --backend=cpu");
  for (const Value *value : node.getOperands())
    if (value && !value->getType().hasStaticShape())
      return nodeError(node, "shapes must be static");
  return entry;
}

} // namespace

CudaKernelDescriptor::~CudaKernelDescriptor() = default;

llvm::Error cuda::checkCudaKernel(const Node &node) {
  auto entry = findEntry(node);
  if (!entry)
    return entry.takeError();
  return (*entry)->check(node);
}

bool cuda::isCudaKernelDecodedAtPrepare(llvm::StringRef domain,
                                        llvm::StringRef opType) {
  auto it = getTable().find((domain + "::" + opType).str());
  return it != getTable().end() && it->second.prepare;
}

llvm::Expected<HostPreparedKernel>
cuda::prepareCudaKernelOnHost(const Node &node) {
  auto entry = findEntry(node);
  if (!entry)
    return entry.takeError();
  HostPreparedKernel prepared;
  prepared.decodedAtPrepare = (*entry)->prepare != nullptr;
  prepared.needsDevice = (*entry)->preparesOnDevice;
  prepared.scratchBytes = (*entry)->scratch ? (*entry)->scratch(node) : 0;
  if (!prepared.decodedAtPrepare || prepared.needsDevice) {
    if (llvm::Error err = (*entry)->check(node))
      return err;
    return prepared;
  }
  // A decode that needs no device takes an empty context.
  CudaKernelContext ctx;
  auto descriptor = (*entry)->prepare(node, KernelPreparation(), ctx);
  if (!descriptor)
    return descriptor.takeError();
  assert(*descriptor && "a decoding entry returns its descriptor");
  return prepared;
}

llvm::Expected<CudaPreparedKernel>
cuda::prepareCudaKernel(const Node &node, const KernelPreparation &preparation,
                        CudaKernelContext &ctx) {
  auto entry = findEntry(node);
  if (!entry)
    return entry.takeError();
  CudaPreparedKernel kernel;
  kernel.entry = *entry;
  kernel.scratchBytes = kernel.entry->scratch ? kernel.entry->scratch(node) : 0;
  if (!kernel.entry->prepare) {
    if (llvm::Error err = kernel.entry->check(node))
      return err;
    return kernel;
  }
  auto descriptor = kernel.entry->prepare(node, preparation, ctx);
  if (!descriptor)
    return descriptor.takeError();
  kernel.descriptor = std::move(*descriptor);
  return kernel;
}

llvm::Error cuda::runCudaKernel(const CudaPreparedKernel &kernel,
                                const NodeLaunch &launch,
                                CudaKernelContext &ctx) {
  assert(kernel.entry && "a prepared kernel has its entry");
  CudaCall call{*launch.node, launch, ctx, kernel.descriptor.get()};
  return kernel.entry->run(call);
}

bool gmopt::hasCudaKernelFor(llvm::StringRef domain, llvm::StringRef opType) {
  return getTable().count((domain + "::" + opType).str()) != 0;
}

llvm::Error gmopt::checkCudaNode(const Node &node) {
  return cuda::checkCudaKernel(node);
}
