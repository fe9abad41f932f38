//===- CudnnDispatch.cpp - The CUDA kernel table's CNN entries ------------===//
//
// The CNN entries of the CUDA kernel table and what they share: Conv,
// ConvGrad (dX, dW, dB as ONNX Runtime's com.microsoft ConvGrad outputs
// them) and batch norm (BatchNormalization in inference and training form,
// BatchNormInternal, BatchNormalizationGrad) on cuDNN's legacy API (cuDNN
// 9's libcudnn_cnn / libcudnn_ops), NCHW, 1-D ops as 2-D ones of height 1
// (CudnnConvDispatch.cpp, CudnnBatchNormDispatch.cpp); and the pools
// (MaxPool with Indices, AveragePool, GlobalAveragePool, GlobalMaxPool,
// MaxPoolGrad, AveragePoolGrad) on gmopt's own kernels
// (CudaPoolDispatch.cpp). This file makes the cuDNN handle when the device
// initializes, holds the shape checks and cuDNN helpers the families share
// (CnnDispatch.h) and puts their entries in the table.
//
// Types: every entry takes fp32, f16 or bf16 storage, one type per node
// (each family's file says how it computes). Every cuDNN call is checked,
// its failure an llvm::Error naming the call and the node. Where cuDNN was
// not found at configure time, the cuDNN entries refuse their nodes with
// "built without cuDNN".
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnDispatch.h"
#include "backend/cuda/CudaLibraries.h"

#include <cassert>
#include <climits>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;
using namespace gmopt::cuda::dispatch::cnn;

llvm::Error cnn::checkShape(const Node &node, const Value *value,
                            llvm::ArrayRef<int64_t> shape,
                            llvm::StringRef what) {
  if (value && llvm::ArrayRef<int64_t>(shapeOf(value)) != shape)
    return nodeError(node, what + " has the wrong shape");
  return llvm::Error::success();
}

llvm::Error cnn::checkChannels(const Node &node, const Value *value,
                               int64_t channels, llvm::StringRef what) {
  if (value &&
      static_cast<int64_t>(value->getType().getNumElements()) != channels)
    return nodeError(node, what + " must have " + llvm::Twine(channels) +
                               " elements (one per channel)");
  return llvm::Error::success();
}

#ifdef GMOPT_HAVE_CUDNN

llvm::Error cnn::cudnnCallError(const Node &node, llvm::StringRef call,
                                cudnnStatus_t status) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} failed: {1} (cuDNN status {2}) (node {3})", call,
                    cudnnGetErrorString(status), static_cast<int>(status),
                    node.describe()));
}

bool cnn::fitsInt(llvm::ArrayRef<int64_t> dims) {
  return llvm::all_of(dims, [](int64_t d) { return d >= 0 && d <= INT_MAX; }) &&
         product(dims) <= INT_MAX;
}

cudnnDataType_t cnn::cudnnTypeOf(Storage storage) {
  switch (storage) {
  case Storage::F16:
    return CUDNN_DATA_HALF;
  case Storage::BF16:
    return CUDNN_DATA_BFLOAT16;
  default:
    assert(storage == Storage::F32 && "the CNN checks admit float storage");
    return CUDNN_DATA_FLOAT;
  }
}

llvm::Error cuda::createCudnnState(CudaKernelContext &ctx) {
  // Made before any step (cudnnCreate allocates), but a failure only
  // disables the cuDNN entries: a graph without convolutions or batch norm
  // still runs where cuDNN's libraries are absent.
  auto state = std::make_shared<CudnnState>();
  if (llvm::Error err = loadCudnn()) {
    state->unavailable = llvm::toString(std::move(err));
    ctx.cudnn = std::move(state);
    return llvm::Error::success();
  }
  cudnnStatus_t status = cudnnCreate(&state->handle);
  const char *call = "cudnnCreate";
  if (status == CUDNN_STATUS_SUCCESS) {
    call = "cudnnSetStream";
    status = cudnnSetStream(state->handle, ctx.stream);
  }
  if (status != CUDNN_STATUS_SUCCESS) {
    if (state->handle)
      (void)cudnnDestroy(state->handle);
    state->handle = nullptr;
    state->unavailable =
        llvm::formatv("{0} failed: {1} (cuDNN status {2})", call,
                      cudnnGetErrorString(status), static_cast<int>(status))
            .str();
  }
  ctx.cudnn = std::move(state);
  return llvm::Error::success();
}

llvm::Error cnn::requireCudnn(const Node &node, const CudaKernelContext &ctx) {
  if (ctx.cudnn && ctx.cudnn->handle)
    return llvm::Error::success();
  return nodeError(node, "cuDNN is unavailable on this machine: " +
                             (ctx.cudnn ? ctx.cudnn->unavailable
                                        : std::string("no cuDNN state")));
}

llvm::Error cnn::requireCudnnLibrary(const Node &node) {
  if (llvm::Error err = loadCudnn())
    return nodeError(node, "cuDNN is unavailable on this machine: " +
                               llvm::toString(std::move(err)));
  return llvm::Error::success();
}

#else // !GMOPT_HAVE_CUDNN

llvm::Error cuda::createCudnnState(CudaKernelContext &) {
  return llvm::Error::success();
}

namespace {

llvm::Error refuseWithoutCudnn(const Node &node) {
  return nodeError(node, "gmopt was built without cuDNN (no cudnn.h / "
                         "libcudnn at configure time); run it with "
                         "--backend=cpu");
}

llvm::Error runWithoutCudnn(CudaCall &call) {
  return refuseWithoutCudnn(call.node);
}

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareWithoutCudnn(const Node &node, const KernelPreparation &,
                    CudaKernelContext &) {
  return refuseWithoutCudnn(node);
}

} // namespace

#endif // GMOPT_HAVE_CUDNN

bool gmopt::isCudnnBuilt() {
#ifdef GMOPT_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

void cuda::dispatch::addCnnKernels(llvm::StringMap<KernelEntry> &table) {
  // A convolution chooses its cuDNN algorithms at prepare and batch norm
  // makes its descriptors there, on the device; without cuDNN both refuse
  // their nodes at prepare.
#ifdef GMOPT_HAVE_CUDNN
  KernelEntry convolution = {checkConv, runConv, prepareConv};
  KernelEntry normalization = {checkBatchNorm, runBatchNorm, prepareBatchNorm};
#else
  KernelEntry convolution = {refuseWithoutCudnn, runWithoutCudnn,
                             prepareWithoutCudnn};
  KernelEntry normalization = convolution;
#endif
  convolution.preparesOnDevice = normalization.preparesOnDevice = true;
  addEntry(table, "", "Conv", convolution);
  addEntry(table, kMsDomain, "ConvGrad", convolution);
  // Older ONNX Runtime releases registered ConvGrad in the ONNX domain.
  addEntry(table, "", "ConvGrad", convolution);
  addEntry(table, "", "BatchNormalization", normalization);
  addEntry(table, kMsDomain, "BatchNormInternal", normalization);
  addEntry(table, kMsDomain, "BatchNormalizationGrad", normalization);
  for (const char *op : {"MaxPool", "AveragePool", "AveragePoolGrad"})
    addEntry(table, "", op, poolEntry());
  for (const char *op : {"GlobalAveragePool", "GlobalMaxPool"})
    addEntry(table, "", op, globalPoolEntry());
  addEntry(table, "", "MaxPoolGrad", maxPoolGradEntry());
}
