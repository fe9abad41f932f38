//===- CudnnBatchNormDispatch.cpp - Batch norm on cuDNN ---------*- C++ -*-===//
//
// The CUDA kernel table's batch norm (BatchNormalization in inference and
// training form, BatchNormInternal, BatchNormalizationGrad) on cuDNN's
// legacy API, X seen as cuDNN's NCHW [N, C, spatial, 1]. X, Y, dY and dX
// are read and written in the node's storage (fp32, f16 or bf16) while
// scale, bias, mean and variance (and the statistics it writes) stay fp32,
// as cuDNN requires. The running statistics are ONNX's
// (launchBatchNormStats), not cuDNN's. Per-channel statistics cuDNN writes
// but the node does not output go to the node's planned workspace, which an
// eager run does not have. Preparing a node decodes it and makes its cuDNN
// descriptors once; a launch reads them. Compiled only where cuDNN's header
// was found.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnDispatch.h"
#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/CudnnGeometry.h"

#ifdef GMOPT_HAVE_CUDNN

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;
using namespace gmopt::cuda::dispatch::cnn;

namespace {

/// X of a batch-norm node seen as cuDNN's [N, C, spatial, 1].
struct BatchNormShape {
  int64_t batch = 0, channels = 0, spatial = 1;
};

llvm::Expected<BatchNormShape> batchNormShape(const Node &node,
                                              const Value *x) {
  Shape s = shapeOf(x);
  if (s.size() < 2)
    return nodeError(node, "X must have rank >= 2");
  BatchNormShape b;
  b.batch = s[0];
  b.channels = s[1];
  b.spatial = product(llvm::ArrayRef<int64_t>(s).drop_front(2));
  if (!fitsInt({b.batch, b.channels, b.spatial}))
    return nodeError(node, "extents exceed cuDNN's 32-bit dimensions");
  return b;
}

} // namespace

llvm::Error cnn::checkBatchNorm(const Node &node) {
  if (llvm::Error err = requireCudnnLibrary(node))
    return err;
  bool grad = node.getOpType() == "BatchNormalizationGrad";
  if (node.getNumOperands() < 5 ||
      llvm::any_of(node.getOperands(), [](const Value *v) { return !v; }) ||
      !node.getResult(0))
    return nodeError(node, "five operands and the first result are required");
  // X, Y (dY, X, dX) share the data storage; the per-channel tensors are
  // fp32 whatever it is, as cuDNN's batch norm takes them.
  unsigned channelBegin = grad ? 2 : 1;
  llvm::SmallVector<unsigned, 8> channelOperands, channelResults;
  for (unsigned i = channelBegin; i < node.getNumOperands(); ++i)
    channelOperands.push_back(i);
  for (unsigned i = 1; i < node.getNumResults(); ++i)
    channelResults.push_back(i);
  if (auto storage = commonFloatStorage(node, channelOperands, channelResults);
      !storage)
    return storage.takeError();
  auto requireF32 = [&](const Value *value) -> llvm::Error {
    if (value && value->getType().getDType() != DType::F32)
      return nodeError(node, "scale, bias, mean and variance have element "
                             "type " +
                                 dtypeName(value->getType().getDType()) +
                                 "; cuDNN's batch norm takes them in f32");
    return llvm::Error::success();
  };
  for (unsigned i : channelOperands)
    if (llvm::Error err = requireF32(node.getOperand(i)))
      return err;
  for (unsigned i : channelResults)
    if (llvm::Error err = requireF32(node.getResult(i)))
      return err;
  const Value *x = node.getOperand(grad ? 1 : 0);
  auto shape = batchNormShape(node, x);
  if (!shape)
    return shape.takeError();
  if (llvm::Error err =
          checkShape(node, node.getResult(0), shapeOf(x), grad ? "dX" : "Y"))
    return err;
  if (grad)
    if (llvm::Error err =
            checkShape(node, node.getOperand(0), shapeOf(x), "dY"))
      return err;
  for (unsigned i = grad ? 2 : 1; i < 5; ++i)
    if (llvm::Error err = checkChannels(node, node.getOperand(i),
                                        shape->channels, "a channel operand"))
      return err;
  for (unsigned i = 1; i < node.getNumResults(); ++i)
    if (llvm::Error err = checkChannels(node, node.getResult(i),
                                        shape->channels, "a channel result"))
      return err;
  if (node.getFloatAttr("epsilon", 1e-5f) < CUDNN_BN_MIN_EPSILON)
    return nodeError(node, "epsilon is below cuDNN's minimum");
  return llvm::Error::success();
}

namespace {

/// Two per-channel fp32 vectors: \p first and \p second when present, else
/// the node's planned workspace slice.
llvm::Error channelPair(CudaCall &call, int64_t channels, void *&first,
                        void *&second) {
  if (first && second)
    return llvm::Error::success();
  uint64_t needed = 2 * static_cast<uint64_t>(channels) * sizeof(float);
  if (!call.launch.workspace || call.launch.workspaceBytes < needed)
    return nodeError(call.node,
                     "cuDNN writes per-channel statistics this node does not "
                     "output; they need the node's planned workspace, which "
                     "an eager (baseline) run does not have");
  auto *base = static_cast<float *>(call.launch.workspace);
  if (!first)
    first = base;
  if (!second)
    second = base + channels;
  return llvm::Error::success();
}

} // namespace

namespace {

/// A batch-norm node prepared once: its shape, attributes and cuDNN's
/// descriptors of X and of the per-channel tensors.
struct BatchNormDescriptor final : CudaKernelDescriptor {
  bool grad = false;
  bool training = false;
  BatchNormShape shape;
  double epsilon = 1e-5;
  float momentum = 0.9f;
  Descriptors owned;
  cudnnTensorDescriptor_t x = nullptr, channels = nullptr;
};

} // namespace

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
cnn::prepareBatchNorm(const Node &node, const KernelPreparation &,
                      CudaKernelContext &ctx) {
  if (llvm::Error err = checkBatchNorm(node))
    return err;
  if (llvm::Error err = requireCudnn(node, ctx))
    return err;
  auto d = std::make_unique<BatchNormDescriptor>();
  d->grad = node.getOpType() == "BatchNormalizationGrad";
  const Value *xValue = node.getOperand(d->grad ? 1 : 0);
  d->shape = *batchNormShape(node, xValue);
  const BatchNormShape &b = d->shape;
  if (b.batch * b.channels * b.spatial == 0)
    return nodeError(node, "an empty batch is not supported by cuDNN's batch "
                           "norm");
  d->epsilon = node.getFloatAttr("epsilon", 1e-5f);
  d->momentum = node.getFloatAttr("momentum", 0.9f);
  d->training = !d->grad && isBatchNormTraining(node);
  // A 16-bit X gets a float channel descriptor from
  // cudnnDeriveBNTensorDescriptor.
  Storage storage = *storageOf(xValue->getType().getDType());
  auto x = d->owned.tensor(node, cudnnTypeOf(storage), b.batch, b.channels,
                           b.spatial, 1);
  if (!x)
    return x.takeError();
  d->x = *x;
  CUDNN_CHECK(node, cudnnCreateTensorDescriptor(&d->channels));
  d->owned.tensors.push_back(d->channels);
  CUDNN_CHECK(node, cudnnDeriveBNTensorDescriptor(d->channels, d->x,
                                                  CUDNN_BATCHNORM_SPATIAL));
  return d;
}

llvm::Error cnn::runBatchNorm(CudaCall &call) {
  const Node &node = call.node;
  const auto &d = call.getDescriptor<BatchNormDescriptor>();
  const BatchNormShape &b = d.shape;
  cudnnHandle_t handle = call.ctx.cudnn->handle;
  cudnnTensorDescriptor_t x = d.x, channelDesc = d.channels;
  double epsilon = d.epsilon;
  const float one = 1, zero = 0;
  if (d.grad) {
    void *dScale = call.outPtr(1), *dBias = call.outPtr(2);
    if (llvm::Error err = channelPair(call, b.channels, dScale, dBias))
      return err;
    CUDNN_CHECK(node, cudnnBatchNormalizationBackward(
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                          &zero, x, call.inPtr(1), x, call.inPtr(0), x,
                          call.outPtr(0), channelDesc, call.inPtr(2), dScale,
                          dBias, epsilon, call.inPtr(3), call.inPtr(4)));
    return llvm::Error::success();
  }
  BatchNormStatsParams stats;
  stats.inputMean = call.inAs<float>(3);
  stats.inputVar = call.inAs<float>(4);
  stats.runningMean = call.outAs<float>(1);
  stats.runningVar = call.outAs<float>(2);
  stats.channels = b.channels;
  stats.momentum = d.momentum;
  stats.epsilon = epsilon;
  stats.training = d.training;
  if (stats.training) {
    void *savedMean = call.outPtr(3), *savedInvStd = call.outPtr(4);
    if (llvm::Error err = channelPair(call, b.channels, savedMean, savedInvStd))
      return err;
    // The running statistics are ONNX's (launchBatchNormStats), not
    // cuDNN's: none are passed here.
    CUDNN_CHECK(node, cudnnBatchNormalizationForwardTraining(
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x,
                          call.inPtr(0), x, call.outPtr(0), channelDesc,
                          call.inPtr(1), call.inPtr(2), 0.0, nullptr, nullptr,
                          epsilon, savedMean, savedInvStd));
    stats.batchMean = static_cast<const float *>(savedMean);
    stats.batchInvStd = static_cast<const float *>(savedInvStd);
    if (!stats.runningMean && !stats.runningVar)
      return llvm::Error::success();
  } else {
    // The running statistics may share bytes with the inputs (in place):
    // Y is computed first, the copies after.
    CUDNN_CHECK(node, cudnnBatchNormalizationForwardInference(
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x,
                          call.inPtr(0), x, call.outPtr(0), channelDesc,
                          call.inPtr(1), call.inPtr(2), call.inPtr(3),
                          call.inPtr(4), epsilon));
    stats.savedMean = call.outAs<float>(3);
    stats.savedInvStd = call.outAs<float>(4);
    if (!stats.runningMean && !stats.runningVar && !stats.savedMean &&
        !stats.savedInvStd)
      return llvm::Error::success();
  }
  return call.check(launchBatchNormStats(stats, call.ctx.stream),
                    "batch-norm statistics kernel");
}

#endif // GMOPT_HAVE_CUDNN
