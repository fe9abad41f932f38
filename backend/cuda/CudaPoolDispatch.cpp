//===- CudaPoolDispatch.cpp - The pools on gmopt's kernels ------*- C++ -*-===//
//
// The CUDA kernel table's pools: MaxPool (with Indices), AveragePool,
// AveragePoolGrad, GlobalAveragePool, GlobalMaxPool and MaxPoolGrad, on
// gmopt's own kernels (CnnKernels.cu, the reductions of RowKernels.cu, the
// scatter of IndexKernels.cu); no cuDNN. Every entry takes fp32, f16 or
// bf16 storage, one type per node; the pools widen each element to fp32,
// compute in fp32 and round once (PoolMath.h). A 16-bit MaxPoolGrad sums
// into an fp32 accumulator in its planned workspace and rounds once (an
// eager run, without a slice, adds with 16-bit atomics). Each node is
// decoded once, when it is prepared (window, storage, extents); a launch
// reads the plan.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnDispatch.h"
#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/CudnnGeometry.h"

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;
using namespace gmopt::cuda::dispatch::cnn;

namespace {

/// The element storage of \p value (F32, F16 or BF16), else an error
/// naming \p what.
llvm::Expected<Storage> floatStorageOf(const Node &node, const Value *value,
                                       llvm::StringRef what) {
  std::optional<Storage> storage = storageOf(value->getType().getDType());
  if (!storage || !isFloatStorage(*storage))
    return nodeError(node, what + " has element type " +
                               dtypeName(value->getType().getDType()) +
                               ", which is not supported (f32, f16, bf16)");
  return *storage;
}

llvm::Error checkPool(const Node &node) {
  bool max = node.getOpType() == "MaxPool";
  auto storage = commonFloatStorage(
      node, {}, max ? llvm::ArrayRef<unsigned>{1} : llvm::ArrayRef<unsigned>{});
  if (!storage)
    return storage.takeError();
  auto window = resolvePoolParams(node);
  if (!window)
    return window.takeError();
  if (max && node.getNumResults() > 1 && node.getResult(1)) {
    if (node.getResult(1)->getType().getDType() != DType::I64)
      return nodeError(node, "Indices must be int64");
    if (shapeOf(node.getResult(1)) != shapeOf(node.getResult(0)))
      return nodeError(node, "Y and Indices differ in shape");
  }
  return llvm::Error::success();
}

/// A pool node decoded once: its window, storage and kind.
struct PoolPlan {
  WindowParams window;
  Storage storage = Storage::F32;
  /// MaxPool, AveragePool or AveragePoolGrad; GlobalMaxPool or
  /// GlobalAveragePool.
  bool max = false, grad = false;
  /// Global pools: [N*C, spatial, 1].
  RowShape rows;
  /// MaxPoolGrad: dX's and dY's elements.
  int64_t dxElements = 0, dyElements = 0;
};

llvm::Expected<PoolPlan> decodePool(const Node &node) {
  if (llvm::Error err = checkPool(node))
    return err;
  PoolPlan p;
  p.window = *resolvePoolParams(node);
  p.storage = *storageOf(node.getOperand(0)->getType().getDType());
  p.max = node.getOpType() == "MaxPool";
  p.grad = node.getOpType() == "AveragePoolGrad";
  return p;
}

llvm::Error launchPool(CudaCall &call, const PoolPlan &p) {
  if (p.max)
    return call.check(launchMaxPool(p.storage, call.inPtr(0), call.outPtr(0),
                                    call.outAs<int64_t>(1), p.window,
                                    call.ctx.stream),
                      "MaxPool kernel");
  if (!p.grad)
    return call.check(launchAveragePool(p.storage, call.inPtr(0),
                                        call.outPtr(0), p.window,
                                        call.ctx.stream),
                      "AveragePool kernel");
  return call.check(launchAveragePoolGrad(p.storage, call.inPtr(0),
                                          call.outPtr(0), p.window,
                                          call.ctx.stream),
                    "AveragePoolGrad kernel");
}

llvm::Error checkGlobalPool(const Node &node) {
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  const Value *x = node.getOperand(0);
  Shape in = shapeOf(x);
  if (in.size() < 3)
    return nodeError(node, "X must have rank >= 3");
  Shape out(in.begin(), in.begin() + 2);
  out.append(in.size() - 2, 1);
  return checkShape(node, node.getResult(0), out, "Y");
}

llvm::Expected<PoolPlan> decodeGlobalPool(const Node &node) {
  if (llvm::Error err = checkGlobalPool(node))
    return err;
  Shape in = shapeOf(node.getOperand(0));
  PoolPlan p;
  p.rows.outer = in[0] * in[1];
  p.rows.n = product(llvm::ArrayRef<int64_t>(in).drop_front(2));
  p.rows.inner = 1;
  p.max = node.getOpType() == "GlobalMaxPool";
  p.storage = *storageOf(node.getOperand(0)->getType().getDType());
  return p;
}

llvm::Error launchGlobalPool(CudaCall &call, const PoolPlan &p) {
  return call.check(
      launchReduce(p.max ? ReduceKind::Max : ReduceKind::Mean, p.storage,
                   call.inPtr(0), call.outPtr(0), p.rows, call.ctx.stream),
      p.max ? "GlobalMaxPool kernel" : "GlobalAveragePool kernel");
}

llvm::Error checkMaxPoolGrad(const Node &node) {
  const Value *dy = node.getOperand(0);
  const Value *indices =
      node.getNumOperands() > 1 ? node.getOperand(1) : nullptr;
  const Value *dx = node.getResult(0);
  if (!dy || !indices || !dx)
    return nodeError(node, "dY, Indices and dX are required");
  auto storage = floatStorageOf(node, dy, "dY");
  if (!storage)
    return storage.takeError();
  if (dx->getType().getDType() != dy->getType().getDType())
    return nodeError(node, "dY and dX differ in element type");
  if (indices->getType().getDType() != DType::I64)
    return nodeError(node, "Indices must be int64");
  if (shapeOf(dy) != shapeOf(indices))
    return nodeError(node, "dY and Indices differ in shape");
  return llvm::Error::success();
}

llvm::Expected<PoolPlan> decodeMaxPoolGrad(const Node &node) {
  if (llvm::Error err = checkMaxPoolGrad(node))
    return err;
  PoolPlan p;
  p.dxElements = node.getResult(0)->getType().getNumElements();
  p.dyElements = node.getOperand(0)->getType().getNumElements();
  p.storage = *storageOf(node.getOperand(0)->getType().getDType());
  return p;
}

llvm::Error launchMaxPoolGrad(CudaCall &call, const PoolPlan &p) {
  // dX[Indices[i]] += dY[i] over the flattened dX: GatherGrad's scatter
  // (fp32 atomics: overlapping windows sum in no fixed order); an index
  // outside dX raises the device fault naming this node.
  if (llvm::Error err = call.markFaultable())
    return err;
  if (p.storage != Storage::F32) {
    // 16-bit: fp32 sums in the planned accumulator, rounded once; an eager
    // run has none and adds in 16 bits.
    uint64_t needed = static_cast<uint64_t>(p.dxElements) * sizeof(float);
    float *accumulator =
        call.launch.workspace && call.launch.workspaceBytes >= needed
            ? static_cast<float *>(call.launch.workspace)
            : nullptr;
    ScatterRows rows;
    rows.axisExtent = p.dxElements;
    rows.indexCount = p.dyElements;
    return call.check(launchScatterAdd16(p.storage, call.inPtr(0),
                                         call.inPtr(1), /*indices32=*/false,
                                         call.outPtr(0), accumulator, rows,
                                         call.ctx.stream),
                      "MaxPoolGrad kernel");
  }
  return call.check(launchGatherGrad(call.inAs<float>(0), call.inPtr(1),
                                     /*indices32=*/false, call.outAs<float>(0),
                                     1, p.dxElements, p.dyElements, 1,
                                     call.ctx.stream),
                    "MaxPoolGrad kernel");
}

} // namespace

KernelEntry cnn::poolEntry() {
  return decodedEntry<PoolPlan, decodePool, launchPool>();
}

KernelEntry cnn::globalPoolEntry() {
  return decodedEntry<PoolPlan, decodeGlobalPool, launchGlobalPool>();
}

KernelEntry cnn::maxPoolGradEntry() {
  return decodedEntry<PoolPlan, decodeMaxPoolGrad, launchMaxPoolGrad>();
}
