//===- CudaDispatch.h - Decoding a node into CUDA launches -----*- C++ -*-===//
//
// Internal to the CUDA backend (built only with the toolkit): the kernel
// table that maps a node to its CUDA kernels. checkCudaKernel decides at
// prepare time, from the node's op, attributes and static types alone,
// whether the node can run (an op without a CUDA kernel, an unsupported
// element type or layout is an error naming the node); runCudaKernel
// decodes shapes and attributes and enqueues the launches on the stream.
// Every failing CUDA or cuBLASLt call becomes an llvm::Error naming the
// call and the node.
//
//===----------------------------------------------------------------------===//

#ifndef GMOPT_BACKEND_CUDA_CUDADISPATCH_H
#define GMOPT_BACKEND_CUDA_CUDADISPATCH_H

#include "backend/Device.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Error.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

namespace gmopt {

class NcclCommunicator;

namespace cuda {

/// A GEMM node's cuBLASLt descriptors and chosen algorithm (CudaMatMul.cpp).
struct CudaGemmPlan;
/// The cuDNN handle and each convolution node's descriptors and algorithms
/// (CudnnDispatch.cpp; empty in a build without cuDNN).
struct CudnnState;

/// What kernels need besides their operands: the stream, the cuBLASLt
/// handle, the random seed and step, and host-side constants that must
/// outlive an asynchronous copy (Shape's output).
struct CudaKernelContext {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t blasLt = nullptr;
  uint64_t seed = 0;
  uint64_t step = 0;
  /// Allow TF32 tensor cores in fp32 GEMMs (off: full fp32).
  bool allowTf32 = false;
  /// The number of the launch within the step (fault reports).
  int32_t launchId = 0;
  /// Host values copied to the device by Shape, kept per node so the
  /// source outlives the asynchronous copy.
  llvm::DenseMap<const Node *, std::vector<int64_t>> hostConstants;
  /// Each GEMM node's descriptors and algorithm, made at its first launch
  /// (the heuristic query costs more than a small GEMM).
  llvm::DenseMap<const Node *, std::shared_ptr<CudaGemmPlan>> gemmPlans;
  /// cuDNN's handle (on the stream) and per-node plans, made by
  /// createCudnnState when the device initializes; null without cuDNN.
  std::shared_ptr<CudnnState> cudnn;
  /// The data-parallel ranks' NCCL communicator (NcclCollectives.h), owned
  /// by the device; null when the module has no collective or NCCL is
  /// absent (a one-rank all-reduce is then a copy).
  NcclCommunicator *communicator = nullptr;
  /// An eager run's memory pool (the baseline's, CudaDevice's), where a
  /// kernel without a planned workspace slice takes stream-ordered scratch;
  /// null in planned mode.
  cudaMemPool_t scratchPool = nullptr;
};

/// Creates ctx.cudnn (the cuDNN handle, bound to ctx.stream) where gmopt was
/// built with cuDNN; success and nothing otherwise (the CNN entries then
/// refuse their nodes at prepare time). A failing cudnnCreate is kept as
/// the reason the cuDNN nodes fail with, not an error of the device.
llvm::Error createCudnnState(CudaKernelContext &ctx);

/// An error naming the failed \p call and \p node, with CUDA's message.
llvm::Error cudaCallError(const Node &node, llvm::StringRef call,
                          cudaError_t status);
/// The same for a cuBLASLt status.
llvm::Error blasLtCallError(const Node &node, llvm::StringRef call,
                            cublasStatus_t status);

/// Success when \p node can run on the CUDA kernels, else an error naming
/// it and what is missing.
llvm::Error checkCudaKernel(const Node &node);
/// Enqueues \p launch's kernels on ctx.stream.
llvm::Error runCudaKernel(const NodeLaunch &launch, CudaKernelContext &ctx);

/// MatMul, Gemm and FusedMatMul through cuBLASLt (CudaMatMul.cpp).
llvm::Error checkCudaMatMul(const Node &node);
llvm::Error runCudaMatMul(const NodeLaunch &launch, CudaKernelContext &ctx);

/// One fp32 row-major strided-batch product Y[b] = op(A[b]) op(B[b]) for
/// b < batch, A [m, k] ([k, m] when transA) and B [k, n] ([n, k] when
/// transB), matrices stored one after the other (Einsum's lowering).
struct CudaStridedGemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
};
/// Runs \p gemm for \p launch's node on cuBLASLt (CudaMatMul.cpp), with
/// the node's descriptors and algorithm cached as MatMul's are.
llvm::Error runCudaStridedGemm(const CudaStridedGemm &gemm, const void *a,
                               const void *b, void *y, const NodeLaunch &launch,
                               CudaKernelContext &ctx);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDADISPATCH_H
