//===- CnnDispatch.h - What the CUDA CNN entries share ----------*- C++ -*-===//
//
// Internal to the CNN entries of the CUDA kernel table: the shape checks
// they share, and, where cuDNN's header was found at configure time, the
// cuDNN call check, the descriptor owner, the handle state and the handle
// checks the convolution and batch-norm entries share; the check and run
// functions of each family, which addCnnKernels (CudnnDispatch.cpp) puts
// in the table. The families: the pools on gmopt's kernels
// (CudaPoolDispatch.cpp), convolutions (CudnnConvDispatch.cpp) and batch
// norm (CudnnBatchNormDispatch.cpp) on cuDNN.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CNNDISPATCH_H
#define GMOPT_BACKEND_CUDA_CNNDISPATCH_H

#include "backend/cuda/CudaDispatchSupport.h"

#ifdef GMOPT_HAVE_CUDNN
#include "llvm/ADT/DenseMap.h"

#include <cudnn.h>
#endif

#include <memory>
#include <string>

namespace gmopt {
namespace cuda {
namespace dispatch {
namespace cnn {

/// Errors unless \p value (when present) has \p shape.
llvm::Error checkShape(const Node &node, const Value *value,
                       llvm::ArrayRef<int64_t> shape, llvm::StringRef what);

/// Errors unless \p value (when present) has \p channels elements.
llvm::Error checkChannels(const Node &node, const Value *value,
                          int64_t channels, llvm::StringRef what);

//===----------------------------------------------------------------------===//
// Pools (gmopt's kernels; CudaPoolDispatch.cpp)
//===----------------------------------------------------------------------===//

/// The entries of MaxPool, AveragePool and AveragePoolGrad; of
/// GlobalAveragePool and GlobalMaxPool; of MaxPoolGrad: each node decoded
/// once, at prepare.
KernelEntry poolEntry();
KernelEntry globalPoolEntry();
KernelEntry maxPoolGradEntry();

#ifdef GMOPT_HAVE_CUDNN

//===----------------------------------------------------------------------===//
// cuDNN (CudnnDispatch.cpp)
//===----------------------------------------------------------------------===//

/// An error naming the failed cuDNN \p call and \p node.
llvm::Error cudnnCallError(const Node &node, llvm::StringRef call,
                           cudnnStatus_t status);

/// Checks one cuDNN call of \p node.
#define CUDNN_CHECK(node, call)                                                \
  do {                                                                         \
    cudnnStatus_t status_ = (call);                                            \
    if (status_ != CUDNN_STATUS_SUCCESS)                                       \
      return cudnnCallError(node, #call, status_);                             \
  } while (false)

/// The extents of \p value fit cuDNN's int dimensions.
bool fitsInt(llvm::ArrayRef<int64_t> dims);

/// Owns the cuDNN descriptors of one node.
struct Descriptors {
  llvm::SmallVector<cudnnTensorDescriptor_t, 4> tensors;
  llvm::SmallVector<cudnnFilterDescriptor_t, 1> filters;
  llvm::SmallVector<cudnnConvolutionDescriptor_t, 3> convolutions;
  Descriptors() = default;
  Descriptors(const Descriptors &) = delete;
  Descriptors &operator=(const Descriptors &) = delete;
  ~Descriptors() {
    // Destruction failures leak host memory only and cannot be reported.
    for (cudnnTensorDescriptor_t d : tensors)
      (void)cudnnDestroyTensorDescriptor(d);
    for (cudnnFilterDescriptor_t d : filters)
      (void)cudnnDestroyFilterDescriptor(d);
    for (cudnnConvolutionDescriptor_t d : convolutions)
      (void)cudnnDestroyConvolutionDescriptor(d);
  }
  llvm::Expected<cudnnTensorDescriptor_t>
  tensor(const Node &node, cudnnDataType_t type, int n, int c, int h, int w) {
    cudnnTensorDescriptor_t d = nullptr;
    CUDNN_CHECK(node, cudnnCreateTensorDescriptor(&d));
    tensors.push_back(d);
    CUDNN_CHECK(node, cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, n,
                                                 c, h, w));
    return d;
  }
};

/// cuDNN's data type of float storage \p storage.
cudnnDataType_t cudnnTypeOf(Storage storage);

/// A convolution node's descriptors and algorithms (CudnnConvDispatch.cpp).
struct ConvPlan;

/// Errors, naming \p node, unless the device has a cuDNN handle.
llvm::Error requireCudnn(const Node &node, const CudaKernelContext &ctx);

/// Errors, naming \p node, when cuDNN's library cannot be opened here, so
/// --backend=auto runs such a graph on the CPU instead.
llvm::Error requireCudnnLibrary(const Node &node);

//===----------------------------------------------------------------------===//
// Convolutions (CudnnConvDispatch.cpp) and batch norm
// (CudnnBatchNormDispatch.cpp)
//===----------------------------------------------------------------------===//

/// Conv and ConvGrad: the check, the prepare that decodes the node and
/// chooses cuDNN's algorithms for its planned workspace (on the device's
/// handle), and a launch reading what it chose.
llvm::Error checkConv(const Node &node);
llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareConv(const Node &node, const KernelPreparation &preparation,
            CudaKernelContext &ctx);
llvm::Error runConv(CudaCall &call);

/// BatchNormalization, BatchNormInternal and BatchNormalizationGrad: the
/// check, the prepare that decodes the node and makes its cuDNN
/// descriptors, and a launch reading them.
llvm::Error checkBatchNorm(const Node &node);
llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareBatchNorm(const Node &node, const KernelPreparation &preparation,
                 CudaKernelContext &ctx);
llvm::Error runBatchNorm(CudaCall &call);

#endif // GMOPT_HAVE_CUDNN

} // namespace cnn
} // namespace dispatch
} // namespace cuda
} // namespace gmopt

#ifdef GMOPT_HAVE_CUDNN

/// The handle (each convolution's descriptors and algorithms live in its
/// prepared kernel).
struct gmopt::cuda::CudnnState {
  cudnnHandle_t handle = nullptr;
  /// Why there is no handle (cudnnCreate failed: e.g. cuDNN's libraries
  /// are missing on this machine); the CNN nodes then fail with it.
  std::string unavailable;
  CudnnState() = default;
  CudnnState(const CudnnState &) = delete;
  CudnnState &operator=(const CudnnState &) = delete;
  ~CudnnState() {
    if (handle)
      (void)cudnnDestroy(handle);
  }
};

#endif // GMOPT_HAVE_CUDNN

#endif // GMOPT_BACKEND_CUDA_CNNDISPATCH_H
