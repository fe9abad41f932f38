//===- CudaMatMul.cpp - MatMul, Gemm, FusedMatMul on cuBLASLt -------------===//
//
// Matrix products on cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F;
// the TF32 variant only when allowed) for f32, f16 and bf16 storage.
// gmopt's tensors are row-major and cuBLASLt's layouts column-major, so
// row-major Y = op(A) op(B) is computed as column-major Y^T = op(B)^T
// op(A)^T: B is passed first, A second, with the transposes they carry.
// Batches are strided: GemmBatchPlan.h splits the output's numpy-broadcast
// batch into strided-batched calls (stride 0 for an operand broadcast along
// a call) and the host loops over the calls' base matrices, all on the
// stream with one set of descriptors and the same workspace. Gemm's C is first
// broadcast into Y by the strided-copy kernel and then accumulated with beta.
// The GEMM scratch is the node's planned workspace slice (the CUDA workspace
// model reserves kCudaGemmWorkspaceBytes); unplanned, cuBLASLt gets none.
// A node is decoded once, when it is prepared: its geometry, Gemm's C
// broadcast, and its descriptors and algorithm (the cuBLASLt heuristic,
// asked once for the workspace its launches get) are its descriptor, and a
// launch only enqueues the calls.
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CudaDevice.h"
#include "backend/cuda/CudaDispatch.h"
#include "backend/cuda/CudaKernels.h"
#include "backend/cuda/GemmBatchPlan.h"

#include "llvm/ADT/SmallVector.h"

#include <cassert>
#include <memory>

using namespace gmopt;
using namespace gmopt::cuda;

namespace {

using Shape = llvm::SmallVector<int64_t, 6>;

llvm::Error matMulError(const Node &node, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "CUDA kernel for '" + node.getOp().str() +
                                     "': " + message + " (node " +
                                     node.describe() + ")");
}

/// One strided-batch product, in row-major terms.
struct MatMulGeometry {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false;
  /// Products per strided-batched call.
  int64_t batch = 1;
  /// Element strides between consecutive matrices of a call (0: broadcast).
  int64_t strideA = 0, strideB = 0, strideY = 0;
  /// The calls of the broadcast batch (matrix counts, not elements).
  GemmBatchRuns runs;
  float alpha = 1, beta = 0;
  /// Gemm's C (operand 2) is present.
  bool hasC = false;
  cudaDataType_t dataType = CUDA_R_32F;
};

llvm::Expected<cudaDataType_t> dataTypeOf(const Node &node, DType dtype) {
  switch (dtype) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::F16:
    return CUDA_R_16F;
  case DType::BF16:
    return CUDA_R_16BF;
  default:
    return matMulError(node, "element type " + dtypeName(dtype) +
                                 " is not supported (f32, f16, bf16)");
  }
}

llvm::Expected<MatMulGeometry> matMulGeometry(const Node &node) {
  MatMulGeometry g;
  const Value *a = node.getOperand(0), *b = node.getOperand(1);
  const Value *y = node.getResult(0);
  DType dtype = a->getType().getDType();
  if (b->getType().getDType() != dtype || y->getType().getDType() != dtype)
    return matMulError(node, "operands and result differ in element type");
  auto dataType = dataTypeOf(node, dtype);
  if (!dataType)
    return dataType.takeError();
  g.dataType = *dataType;
  Shape sa, sb;
  for (int64_t d : a->getType().getStaticShape())
    sa.push_back(d);
  for (int64_t d : b->getType().getStaticShape())
    sb.push_back(d);
  bool gemm = node.getOpType() == "Gemm";
  if (gemm) {
    if (sa.size() != 2 || sb.size() != 2)
      return matMulError(node, "Gemm operands must be 2-D");
    g.transA = node.getIntAttr("transA", 0) != 0;
    g.transB = node.getIntAttr("transB", 0) != 0;
    g.alpha = node.getFloatAttr("alpha", 1.0f);
    g.beta = node.getFloatAttr("beta", 1.0f);
    g.hasC = node.getNumOperands() > 2 && node.getOperand(2);
    if (g.hasC && node.getOperand(2)->getType().getDType() != dtype)
      return matMulError(node, "C differs in element type");
  } else if (node.getOpType() == "FusedMatMul") {
    g.transA = node.getIntAttr("transA", 0) != 0;
    g.transB = node.getIntAttr("transB", 0) != 0;
    g.alpha = node.getFloatAttr("alpha", 1.0f);
    if (node.getIntAttr("transBatchA", 0) || node.getIntAttr("transBatchB", 0))
      return matMulError(node, "transBatchA/transBatchB are not supported by "
                               "the CUDA kernels yet");
  }
  // numpy promotion of 1-D operands.
  if (sa.size() == 1)
    sa.insert(sa.begin(), 1);
  if (sb.size() == 1)
    sb.push_back(1);
  if (sa.size() < 2 || sb.size() < 2)
    return matMulError(node, "operands must have at least one dimension");
  int64_t ra = sa.size(), rb = sb.size();
  g.m = g.transA ? sa[ra - 1] : sa[ra - 2];
  g.k = g.transA ? sa[ra - 2] : sa[ra - 1];
  int64_t kb = g.transB ? sb[rb - 1] : sb[rb - 2];
  g.n = g.transB ? sb[rb - 2] : sb[rb - 1];
  if (kb != g.k)
    return matMulError(node, "inner dimensions differ (" + llvm::Twine(g.k) +
                                 " and " + llvm::Twine(kb) + ")");
  // The batch as strided-batched calls, from the stored shapes (the 1-D
  // promotion above adds no batch dimension).
  if (!planGemmBatch(a->getType().getStaticShape(),
                     b->getType().getStaticShape(), g.runs))
    return matMulError(node, "the batch dimensions do not broadcast, or "
                             "broadcast over too many dimensions");
  g.batch = g.runs.count;
  g.strideA = g.runs.strideA * g.m * g.k;
  g.strideB = g.runs.strideB * g.k * g.n;
  g.strideY = g.runs.strideY * g.m * g.n;
  return g;
}

llvm::Error setBatch(const Node &node, cublasLtMatrixLayout_t layout,
                     int64_t batch, int64_t stride) {
  int32_t count = static_cast<int32_t>(batch);
  cublasStatus_t status = cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
        sizeof(stride));
  if (status != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatrixLayoutSetAttribute", status);
  return llvm::Error::success();
}

} // namespace

/// The cuBLASLt descriptors of one GEMM node, its algorithm and the
/// workspace bytes it was chosen for; destroys the descriptors.
struct cuda::CudaGemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  uint64_t workspaceBytes = 0;
  CudaGemmPlan() = default;
  CudaGemmPlan(const CudaGemmPlan &) = delete;
  CudaGemmPlan &operator=(const CudaGemmPlan &) = delete;
  ~CudaGemmPlan() {
    // Destruction failures cannot be reported; they leak host memory only.
    if (preference)
      (void)cublasLtMatmulPreferenceDestroy(preference);
    if (out)
      (void)cublasLtMatrixLayoutDestroy(out);
    if (second)
      (void)cublasLtMatrixLayoutDestroy(second);
    if (first)
      (void)cublasLtMatrixLayoutDestroy(first);
    if (op)
      (void)cublasLtMatmulDescDestroy(op);
  }
};

namespace {

/// Creates \p node's descriptors and picks its algorithm for
/// \p workspaceBytes of scratch.
llvm::Expected<std::shared_ptr<CudaGemmPlan>>
makeGemmPlan(const Node &node, const MatMulGeometry &geometry,
             uint64_t workspaceBytes, CudaKernelContext &ctx) {
  const MatMulGeometry *g = &geometry;
  auto plan = std::make_shared<CudaGemmPlan>();
  CudaGemmPlan &d = *plan;
  d.workspaceBytes = workspaceBytes;
  cublasComputeType_t compute = ctx.allowTf32 && g->dataType == CUDA_R_32F
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  cublasStatus_t status = cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F);
  if (status != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatmulDescCreate", status);
  // Column-major Y^T = op(B)^T op(A)^T: B first, A second.
  cublasOperation_t opFirst = g->transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = g->transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  if ((status = cublasLtMatmulDescSetAttribute(
           d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst))) !=
          CUBLAS_STATUS_SUCCESS ||
      (status = cublasLtMatmulDescSetAttribute(
           d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond))) !=
          CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatmulDescSetAttribute", status);
  // Stored column-major shapes: B is [N, K] (ld N) or, transposed, [K, N]
  // (ld K); A is [K, M] (ld K) or [M, K] (ld M); Y^T is [N, M] (ld N).
  uint64_t firstRows = g->transB ? g->k : g->n;
  uint64_t firstCols = g->transB ? g->n : g->k;
  uint64_t secondRows = g->transA ? g->m : g->k;
  uint64_t secondCols = g->transA ? g->k : g->m;
  if ((status = cublasLtMatrixLayoutCreate(&d.first, g->dataType, firstRows,
                                           firstCols, firstRows)) !=
          CUBLAS_STATUS_SUCCESS ||
      (status = cublasLtMatrixLayoutCreate(&d.second, g->dataType, secondRows,
                                           secondCols, secondRows)) !=
          CUBLAS_STATUS_SUCCESS ||
      (status = cublasLtMatrixLayoutCreate(&d.out, g->dataType, g->n, g->m,
                                           g->n)) != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatrixLayoutCreate", status);
  if (g->batch > 1) {
    if (llvm::Error err = setBatch(node, d.first, g->batch, g->strideB))
      return err;
    if (llvm::Error err = setBatch(node, d.second, g->batch, g->strideA))
      return err;
    if (llvm::Error err = setBatch(node, d.out, g->batch, g->strideY))
      return err;
  }
  if ((status = cublasLtMatmulPreferenceCreate(&d.preference)) !=
          CUBLAS_STATUS_SUCCESS ||
      (status = cublasLtMatmulPreferenceSetAttribute(
           d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           &workspaceBytes, sizeof(workspaceBytes))) != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatmulPreferenceCreate", status);
  // The calls of a broadcast batch start past the operands' (256-byte
  // aligned) addresses: the algorithm may assume only what every call's
  // base keeps. cuBLASLt's first operand is B, its second A.
  int64_t bytes = g->dataType == CUDA_R_32F ? 4 : 2;
  uint32_t alignments[4] = {g->runs.baseAlignment(1, g->k * g->n * bytes),
                            g->runs.baseAlignment(0, g->m * g->k * bytes),
                            g->runs.baseAlignment(2, g->m * g->n * bytes),
                            g->runs.baseAlignment(2, g->m * g->n * bytes)};
  const cublasLtMatmulPreferenceAttributes_t alignmentAttributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    if ((status = cublasLtMatmulPreferenceSetAttribute(
             d.preference, alignmentAttributes[i], &alignments[i],
             sizeof(alignments[i]))) != CUBLAS_STATUS_SUCCESS)
      return blasLtCallError(node, "cublasLtMatmulPreferenceSetAttribute",
                             status);
  cublasLtMatmulHeuristicResult_t heuristic;
  int found = 0;
  status = cublasLtMatmulAlgoGetHeuristic(ctx.blasLt, d.op, d.first, d.second,
                                          d.out, d.out, d.preference, 1,
                                          &heuristic, &found);
  if (status != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(node, "cublasLtMatmulAlgoGetHeuristic", status);
  if (found == 0)
    return matMulError(node, "cuBLASLt found no algorithm for this GEMM");
  d.algo = heuristic.algo;
  return plan;
}

} // namespace

llvm::Error cuda::checkCudaMatMul(const Node &node) {
  auto g = matMulGeometry(node);
  if (!g)
    return g.takeError();
  if (g->batch > INT32_MAX)
    return matMulError(node, "too many matrices in one batch");
  if (g->hasC) {
    Shape c;
    for (int64_t d : node.getOperand(2)->getType().getStaticShape())
      c.push_back(d);
    // C broadcasts to [M, N].
    if (c.size() > 2 ||
        (c.size() == 2 &&
         !((c[0] == g->m || c[0] == 1) && (c[1] == g->n || c[1] == 1))) ||
        (c.size() == 1 && !(c[0] == g->n || c[0] == 1)))
      return matMulError(node, "C does not broadcast to [M, N]");
  }
  return llvm::Error::success();
}

namespace {

/// A MatMul, Gemm or FusedMatMul node decoded once.
struct MatMulDescriptor final : CudaKernelDescriptor {
  MatMulGeometry geometry;
  /// Gemm's C broadcast into Y, and Y's element bytes (hasC only).
  BroadcastIndexing cIndexing;
  int64_t elementBytes = 0;
  /// The descriptors and algorithm; null when the product is empty.
  std::shared_ptr<CudaGemmPlan> plan;
  /// The workspace bytes every launch gets (and the algorithm was chosen
  /// for).
  uint64_t workspaceBytes = 0;
};

} // namespace

llvm::Expected<std::unique_ptr<CudaKernelDescriptor>>
cuda::prepareCudaMatMul(const Node &node, const KernelPreparation &preparation,
                        CudaKernelContext &ctx) {
  if (llvm::Error err = checkCudaMatMul(node))
    return err;
  auto g = matMulGeometry(node);
  if (!g)
    return g.takeError();
  auto d = std::make_unique<MatMulDescriptor>();
  d->geometry = *g;
  d->workspaceBytes = preparation.planned ? preparation.workspaceBytes : 0;
  if (g->hasC && g->m * g->n != 0) {
    Shape cShape;
    for (int64_t dim : node.getOperand(2)->getType().getStaticShape())
      cShape.push_back(dim);
    while (cShape.size() < 2)
      cShape.insert(cShape.begin(), 1);
    BroadcastIndexing &ix = d->cIndexing;
    ix.rank = 2;
    ix.extent[0] = g->m;
    ix.extent[1] = g->n;
    ix.stride[0][0] = cShape[0] == 1 ? 0 : cShape[1];
    ix.stride[0][1] = cShape[1] == 1 ? 0 : 1;
    ix.stride[BroadcastIndexing::kOutput][0] = g->n;
    ix.stride[BroadcastIndexing::kOutput][1] = 1;
    ix.flat[0] = false;
    ix.flat[BroadcastIndexing::kOutput] = false;
    d->elementBytes = static_cast<int64_t>(
        node.getResult(0)->getType().getSizeInBytes() / (g->m * g->n));
  }
  bool empty = (g->k == 0 && !g->hasC) || g->m * g->n * g->batch == 0;
  if (!empty) {
    auto plan = makeGemmPlan(node, *g, d->workspaceBytes, ctx);
    if (!plan)
      return plan.takeError();
    d->plan = std::move(*plan);
  }
  return d;
}

llvm::Error cuda::runCudaMatMul(const CudaKernelDescriptor &descriptor,
                                const NodeLaunch &launch,
                                CudaKernelContext &ctx) {
  const Node &node = *launch.node;
  const auto &prepared = static_cast<const MatMulDescriptor &>(descriptor);
  const MatMulGeometry *g = &prepared.geometry;
  assert((launch.planned ? launch.workspaceBytes : 0) ==
             prepared.workspaceBytes &&
         "a launch gets the workspace its kernel was prepared for");
  void *y = launch.results[0];
  uint64_t outBytes = node.getResult(0)->getType().getSizeInBytes();
  if (g->k == 0 && !g->hasC) {
    // An empty contraction: Y = 0.
    cudaError_t status = cudaMemsetAsync(y, 0, outBytes, ctx.stream);
    return status == cudaSuccess
               ? llvm::Error::success()
               : cudaCallError(node, "cudaMemsetAsync", status);
  }
  if (g->m * g->n * g->batch == 0)
    return llvm::Error::success();
  float beta = 0;
  if (g->hasC) {
    // Y = broadcast(C), then Y = alpha * AB + beta * Y.
    cudaError_t status =
        launchStridedCopy(prepared.elementBytes, launch.operands[2], y,
                          g->m * g->n, prepared.cIndexing, ctx.stream);
    if (status != cudaSuccess)
      return cudaCallError(node, "strided copy kernel (Gemm C)", status);
    beta = g->beta;
  }
  uint64_t workspaceBytes = prepared.workspaceBytes;
  const CudaGemmPlan &d = *prepared.plan;
  float alpha = g->alpha;
  // One call per base of the broadcast batch; the calls write disjoint
  // output matrices, so they share the workspace in stream order.
  int64_t bytes = g->dataType == CUDA_R_32F ? 4 : 2;
  auto *aBytes = static_cast<const uint8_t *>(launch.operands[0]);
  auto *bBytes = static_cast<const uint8_t *>(launch.operands[1]);
  auto *yBytes = static_cast<uint8_t *>(y);
  for (int64_t call = 0, calls = g->runs.calls(); call < calls; ++call) {
    GemmCallBase base = g->runs.base(call);
    const uint8_t *aCall = aBytes + base.a * g->m * g->k * bytes;
    const uint8_t *bCall = bBytes + base.b * g->k * g->n * bytes;
    uint8_t *yCall = yBytes + base.y * g->m * g->n * bytes;
    cublasStatus_t status =
        cublasLtMatmul(ctx.blasLt, d.op, &alpha, bCall, d.first, aCall,
                       d.second, &beta, yCall, d.out, yCall, d.out, &d.algo,
                       workspaceBytes ? launch.workspace : nullptr,
                       workspaceBytes, ctx.stream);
    if (status != CUBLAS_STATUS_SUCCESS)
      return blasLtCallError(node, "cublasLtMatmul", status);
  }
  return llvm::Error::success();
}

llvm::Expected<std::shared_ptr<CudaGemmPlan>>
cuda::prepareCudaStridedGemm(const Node &node, const CudaStridedGemm &gemm,
                             const KernelPreparation &preparation,
                             CudaKernelContext &ctx) {
  MatMulGeometry g;
  g.m = gemm.m;
  g.n = gemm.n;
  g.k = gemm.k;
  g.transA = gemm.transA;
  g.transB = gemm.transB;
  g.batch = gemm.batch;
  g.strideA = gemm.batch > 1 ? gemm.m * gemm.k : 0;
  g.strideB = gemm.batch > 1 ? gemm.k * gemm.n : 0;
  g.strideY = gemm.batch > 1 ? gemm.m * gemm.n : 0;
  g.dataType = CUDA_R_32F;
  if (g.batch > INT32_MAX)
    return matMulError(node, "too many matrices in one batch");
  return makeGemmPlan(
      node, g, preparation.planned ? preparation.workspaceBytes : 0, ctx);
}

llvm::Error cuda::runCudaStridedGemm(const CudaGemmPlan &plan, const void *a,
                                     const void *b, void *y,
                                     const NodeLaunch &launch,
                                     CudaKernelContext &ctx) {
  assert((launch.planned ? launch.workspaceBytes : 0) == plan.workspaceBytes &&
         "a launch gets the workspace its kernel was prepared for");
  uint64_t workspaceBytes = plan.workspaceBytes;
  float alpha = 1, beta = 0;
  cublasStatus_t status = cublasLtMatmul(
      ctx.blasLt, plan.op, &alpha, b, plan.first, a, plan.second, &beta, y,
      plan.out, y, plan.out, &plan.algo,
      workspaceBytes ? launch.workspace : nullptr, workspaceBytes, ctx.stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    return blasLtCallError(*launch.node, "cublasLtMatmul", status);
  return llvm::Error::success();
}
