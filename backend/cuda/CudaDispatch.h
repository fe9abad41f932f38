//===- CudaDispatch.h - Decoding a node into CUDA launches -----*- C++ -*-===//
//
// Internal to the CUDA backend (built only with the toolkit): the kernel
// table that maps a node to its CUDA kernels, keyed by the node's schema.
// prepareCudaKernel runs once per node when the device prepares it: it
// finds the entry, checks the node's arity against its schema and decides,
// from the node's op, attributes and static types alone, whether the node
// can run (an op without a CUDA kernel, an unsupported element type or
// layout is an error naming the node); entries that decode ahead of time
// keep a descriptor (the decoded shapes and attributes, a GEMM's chosen
// cuBLASLt algorithm). runCudaKernel enqueues a prepared kernel's launches
// on the stream with no lookup. checkCudaKernel is the same decision
// without a device.
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

namespace dispatch {
struct KernelEntry;
} // namespace dispatch

/// A GEMM node's cuBLASLt descriptors and chosen algorithm (CudaMatMul.cpp).
struct CudaGemmPlan;
/// The cuDNN handle and each convolution node's descriptors and algorithms
/// (CnnDispatch.h; empty in a build without cuDNN).
struct CudnnState;

/// What kernels need besides their operands: the stream, the cuBLASLt
/// handle, the random seed and step (host values a launch copies, such as
/// Shape's output, live in its prepared kernel).
struct CudaKernelContext {
  /// The compute stream: every kernel and copy of a node.
  cudaStream_t stream = nullptr;
  /// The communication stream the overlapped all-reduce runs NCCL on,
  /// ordered after `stream` by events (owned by the device).
  cudaStream_t commStream = nullptr;
  /// Set while a step is captured for a CUDA graph: random kernels read
  /// the step here on the device (DropoutParams::stepOnDevice).
  const uint64_t *stepOnDevice = nullptr;
  cublasLtHandle_t blasLt = nullptr;
  uint64_t seed = 0;
  uint64_t step = 0;
  /// Allow TF32 tensor cores in fp32 GEMMs (off: full fp32).
  bool allowTf32 = false;
  /// The number of the launch within the step (fault reports).
  int32_t launchId = 0;
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

/// What a kernel-table entry decoded from its node once, when the node
/// was prepared (shapes, attributes, a chosen algorithm); each launch reads
/// it instead of decoding again.
class CudaKernelDescriptor {
public:
  virtual ~CudaKernelDescriptor();
};

/// A node's CUDA kernel, prepared once: its table entry, what the entry
/// decoded (null for entries that decode at launch) and the scratch its
/// entry's rule sizes for the node (what the CUDA workspace model plans).
struct CudaPreparedKernel {
  const dispatch::KernelEntry *entry = nullptr;
  std::unique_ptr<CudaKernelDescriptor> descriptor;
  uint64_t scratchBytes = 0;
};

/// Success when \p node can run on the CUDA kernels, else an error naming
/// it and what is missing (prepareCudaKernel's decision, without a device).
llvm::Error checkCudaKernel(const Node &node);
/// Prepares \p node's kernel for every launch: the entry found by schema,
/// the arity checked, and the entry's descriptor decoded (with ctx's
/// cuBLASLt handle, for \p preparation's workspace).
llvm::Expected<CudaPreparedKernel>
prepareCudaKernel(const Node &node, const KernelPreparation &preparation,
                  CudaKernelContext &ctx);
/// Enqueues \p kernel's launches for \p launch on ctx.stream.
llvm::Error runCudaKernel(const CudaPreparedKernel &kernel,
                          const NodeLaunch &launch, CudaKernelContext &ctx);

/// MatMul, Gemm and FusedMatMul through cuBLASLt (CudaMatMul.cpp): the
/// check, the descriptor (geometry and the cuBLASLt algorithm for
/// \p preparation's workspace, chosen once), and a launch reading it.
llvm::Error checkCudaMatMul(const Node &node);
llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
prepareCudaMatMul(const Node &node, const KernelPreparation &preparation,
                  CudaKernelContext &ctx);
llvm::Error runCudaMatMul(const CudaKernelDescriptor &descriptor,
                          const NodeLaunch &launch, CudaKernelContext &ctx);

/// One fp32 row-major strided-batch product Y[b] = op(A[b]) op(B[b]) for
/// b < batch, A [m, k] ([k, m] when transA) and B [k, n] ([n, k] when
/// transB), matrices stored one after the other (Einsum's lowering).
struct CudaStridedGemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transA = false, transB = false;
};
/// The cuBLASLt descriptors and algorithm of \p gemm for \p node, chosen
/// once for \p preparation's workspace (CudaMatMul.cpp; Einsum's lowering
/// calls it when its node is prepared).
llvm::Expected<std::shared_ptr<CudaGemmPlan>>
prepareCudaStridedGemm(const Node &node, const CudaStridedGemm &gemm,
                       const KernelPreparation &preparation,
                       CudaKernelContext &ctx);
/// Runs the GEMM \p plan prepared for \p launch's node on cuBLASLt.
llvm::Error runCudaStridedGemm(const CudaGemmPlan &plan, const void *a,
                               const void *b, void *y, const NodeLaunch &launch,
                               CudaKernelContext &ctx);

} // namespace cuda
} // namespace gmopt

#endif // GMOPT_BACKEND_CUDA_CUDADISPATCH_H
