//===- CudnnDispatch.cpp - The CUDA kernel table's CNN entries ------------===//
//
// Conv, ConvGrad (dX, dW, dB as ONNX Runtime's com.microsoft ConvGrad
// outputs them) and batch norm (BatchNormalization in inference and
// training form, BatchNormInternal, BatchNormalizationGrad) on cuDNN's
// legacy API (cuDNN 9's libcudnn_cnn / libcudnn_ops), NCHW, 1-D ops as 2-D
// ones of height 1; and the pools (MaxPool with Indices, AveragePool,
// GlobalAveragePool, GlobalMaxPool, MaxPoolGrad, AveragePoolGrad) on
// gmopt's own kernels (CnnKernels.cu, the reductions of RowKernels.cu).
//
// Types: every entry takes fp32, f16 or bf16 storage, one type per node.
// Convolutions compute in fp32 (cuDNN's FLOAT compute type): fp32 data
// with FMA math (no TF32 unless --allow-tf32), 16-bit data with whatever
// math cuDNN ranks first, tensor cores included (their products and sums
// are fp32); a 16-bit bias and its gradient are gmopt's kernels (fp32 sums,
// rounded once), cuDNN documenting no bf16 for cudnnAddTensor /
// cudnnConvolutionBackwardBias. Batch norm reads and writes X, Y, dY and dX in
// the node's storage while scale, bias, mean and variance (and the statistics
// it writes) stay fp32, as cuDNN requires. The pools widen each element to
// fp32, compute in fp32 and round once (PoolMath.h). A 16-bit MaxPoolGrad
// sums into an fp32 accumulator in its planned workspace and rounds once
// (an eager run, without a slice, adds with 16-bit atomics).
//
// Asymmetric pads (begin != end, e.g. SAME_UPPER with an even kernel):
// cuDNN's descriptors take one pad per axis for both ends, so such a
// convolution pads X explicitly, with zeros, into its planned workspace and
// convolves that with zero pads; ConvGrad computes the padded input's
// gradient there and crops it into dX (ConvWorkspaceLayout, CudnnGeometry.h,
// sizes the extra bytes). An eager run has no slice and refuses such a node.
//
// Workspace: the CUDA workspace model (CudnnGeometry.h) gives every
// convolution node a slice bounded from its shapes alone, so plans made
// without a GPU reserve it. At a node's first launch the algorithms
// cuDNN's heuristics rank (cudnnGet*Algorithm_v7, fastest first) are
// tried in order, deterministic ones first: the first whose
// workspace (cudnnGet*WorkspaceSize) fits the planned slice is kept for
// the node. An eager launch has no slice and gets a zero-workspace
// algorithm (implicit GEMM, which always exists). Nothing is allocated
// inside a step. Every cuDNN call is checked, its failure an llvm::Error
// naming the call and the node. Where cuDNN was not found at configure
// time, the cuDNN entries refuse their nodes with "built without cuDNN".
//
//===----------------------------------------------------------------------===//

#include "backend/cuda/CnnKernels.h"
#include "backend/cuda/CudaDispatchSupport.h"
#include "backend/cuda/CudaLibraries.h"
#include "backend/cuda/CudnnGeometry.h"

#include "llvm/ADT/DenseMap.h"

#ifdef GMOPT_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <cassert>
#include <climits>

using namespace gmopt;
using namespace gmopt::cuda;
using namespace gmopt::cuda::dispatch;

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

/// Errors unless \p value (when present) has \p shape.
llvm::Error checkShape(const Node &node, const Value *value,
                       llvm::ArrayRef<int64_t> shape, llvm::StringRef what) {
  if (value && llvm::ArrayRef<int64_t>(shapeOf(value)) != shape)
    return nodeError(node, what + " has the wrong shape");
  return llvm::Error::success();
}

/// Errors unless \p value (when present) has \p channels elements.
llvm::Error checkChannels(const Node &node, const Value *value,
                          int64_t channels, llvm::StringRef what) {
  if (value &&
      static_cast<int64_t>(value->getType().getNumElements()) != channels)
    return nodeError(node, what + " must have " + llvm::Twine(channels) +
                               " elements (one per channel)");
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Pools (gmopt's kernels)
//===----------------------------------------------------------------------===//

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

llvm::Error runPool(CudaCall &call) {
  WindowParams g = *resolvePoolParams(call.node);
  llvm::StringRef op = call.node.getOpType();
  Storage storage = *storageOf(call.in(0)->getType().getDType());
  if (op == "MaxPool")
    return call.check(launchMaxPool(storage, call.inPtr(0), call.outPtr(0),
                                    call.outAs<int64_t>(1), g, call.ctx.stream),
                      "MaxPool kernel");
  if (op == "AveragePool")
    return call.check(launchAveragePool(storage, call.inPtr(0), call.outPtr(0),
                                        g, call.ctx.stream),
                      "AveragePool kernel");
  return call.check(launchAveragePoolGrad(storage, call.inPtr(0),
                                          call.outPtr(0), g, call.ctx.stream),
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

llvm::Error runGlobalPool(CudaCall &call) {
  Shape in = shapeOf(call.in(0));
  RowShape rows;
  rows.outer = in[0] * in[1];
  rows.n = product(llvm::ArrayRef<int64_t>(in).drop_front(2));
  rows.inner = 1;
  bool max = call.node.getOpType() == "GlobalMaxPool";
  return call.check(launchReduce(max ? ReduceKind::Max : ReduceKind::Mean,
                                 *storageOf(call.in(0)->getType().getDType()),
                                 call.inPtr(0), call.outPtr(0), rows,
                                 call.ctx.stream),
                    max ? "GlobalMaxPool kernel" : "GlobalAveragePool kernel");
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

llvm::Error runMaxPoolGrad(CudaCall &call) {
  // dX[Indices[i]] += dY[i] over the flattened dX: GatherGrad's scatter
  // (fp32 atomics: overlapping windows sum in no fixed order); an index
  // outside dX raises the device fault naming this node.
  if (llvm::Error err = call.markFaultable())
    return err;
  int64_t dxElements = call.out(0)->getType().getNumElements();
  int64_t dyElements = call.in(0)->getType().getNumElements();
  Storage storage = *storageOf(call.in(0)->getType().getDType());
  if (storage != Storage::F32) {
    // 16-bit: fp32 sums in the planned accumulator, rounded once; an eager
    // run has none and adds in 16 bits.
    uint64_t needed = static_cast<uint64_t>(dxElements) * sizeof(float);
    float *accumulator =
        call.launch.workspace && call.launch.workspaceBytes >= needed
            ? static_cast<float *>(call.launch.workspace)
            : nullptr;
    ScatterRows rows;
    rows.axisExtent = dxElements;
    rows.indexCount = dyElements;
    return call.check(launchScatterAdd16(storage, call.inPtr(0), call.inPtr(1),
                                         /*indices32=*/false, call.outPtr(0),
                                         accumulator, rows, call.ctx.stream),
                      "MaxPoolGrad kernel");
  }
  return call.check(launchGatherGrad(call.inAs<float>(0), call.inPtr(1),
                                     /*indices32=*/false, call.outAs<float>(0),
                                     1, dxElements, dyElements, 1,
                                     call.ctx.stream),
                    "MaxPoolGrad kernel");
}

} // namespace

//===----------------------------------------------------------------------===//
// Convolution and batch norm (cuDNN)
//===----------------------------------------------------------------------===//

#ifdef GMOPT_HAVE_CUDNN

namespace {

/// An error naming the failed cuDNN \p call and \p node.
llvm::Error cudnnCallError(const Node &node, llvm::StringRef call,
                           cudnnStatus_t status) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} failed: {1} (cuDNN status {2}) (node {3})", call,
                    cudnnGetErrorString(status), static_cast<int>(status),
                    node.describe()));
}

/// Checks one cuDNN call of \p node.
#define CUDNN_CHECK(node, call)                                                \
  do {                                                                         \
    cudnnStatus_t status_ = (call);                                            \
    if (status_ != CUDNN_STATUS_SUCCESS)                                       \
      return cudnnCallError(node, #call, status_);                             \
  } while (false)

/// The extents of \p value fit cuDNN's int dimensions.
bool fitsInt(llvm::ArrayRef<int64_t> dims) {
  return llvm::all_of(dims, [](int64_t d) { return d >= 0 && d <= INT_MAX; }) &&
         product(dims) <= INT_MAX;
}

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
cudnnDataType_t cudnnTypeOf(Storage storage) {
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

/// A convolution node's descriptors and the algorithms chosen for the
/// workspace bytes it was made for.
struct ConvPlan {
  Descriptors owned;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  /// One per direction, each with the math type of its algorithm.
  cudnnConvolutionDescriptor_t forward = nullptr, data = nullptr,
                               filter = nullptr;
  cudnnConvolutionFwdAlgo_t forwardAlgo =
      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t dataAlgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filterAlgo =
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  /// The cuDNN scratch bytes the algorithms were chosen for.
  uint64_t workspaceBytes = 0;
};

} // namespace

/// The handle and the per-node convolution plans.
struct cuda::CudnnState {
  cudnnHandle_t handle = nullptr;
  /// Why there is no handle (cudnnCreate failed: e.g. cuDNN's libraries
  /// are missing on this machine); the CNN nodes then fail with it.
  std::string unavailable;
  llvm::DenseMap<const Node *, std::shared_ptr<ConvPlan>> convPlans;
  CudnnState() = default;
  CudnnState(const CudnnState &) = delete;
  CudnnState &operator=(const CudnnState &) = delete;
  ~CudnnState() {
    convPlans.clear();
    if (handle)
      (void)cudnnDestroy(handle);
  }
};

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

namespace {

/// Errors, naming \p node, unless the device has a cuDNN handle.
llvm::Error requireCudnn(const Node &node, const CudaKernelContext &ctx) {
  if (ctx.cudnn && ctx.cudnn->handle)
    return llvm::Error::success();
  return nodeError(node, "cuDNN is unavailable on this machine: " +
                             (ctx.cudnn ? ctx.cudnn->unavailable
                                        : std::string("no cuDNN state")));
}

/// Errors, naming \p node, when cuDNN's library cannot be opened here, so
/// --backend=auto runs such a graph on the CPU instead.
llvm::Error requireCudnnLibrary(const Node &node) {
  if (llvm::Error err = loadCudnn())
    return nodeError(node, "cuDNN is unavailable on this machine: " +
                               llvm::toString(std::move(err)));
  return llvm::Error::success();
}

llvm::Error checkConv(const Node &node) {
  if (llvm::Error err = requireCudnnLibrary(node))
    return err;
  if (auto storage = commonFloatStorage(node); !storage)
    return storage.takeError();
  auto params = resolveConvParams(node);
  if (!params)
    return params.takeError();
  const WindowParams &g = params->window;
  // The padded input (asymmetric pads) is what cuDNN sees.
  const WindowParams &seen = getConvWorkspaceLayout(node, *params).cudnn.window;
  if (!fitsInt({g.batch, g.channels, seen.inH, seen.inW}) ||
      !fitsInt({g.batch, params->outChannels, g.outH, g.outW}) ||
      !fitsInt({params->outChannels, params->groupIn, g.kernelH, g.kernelW}))
    return nodeError(node, "extents exceed cuDNN's 32-bit dimensions");
  Shape x = {g.batch, g.channels};
  Shape w = {params->outChannels, params->groupIn};
  if (params->spatialDims == 2) {
    x.append({g.inH, g.inW});
    w.append({g.kernelH, g.kernelW});
  } else {
    x.push_back(g.inW);
    w.push_back(g.kernelW);
  }
  if (node.getOpType() == "Conv")
    return checkChannels(
        node, node.getNumOperands() > 2 ? node.getOperand(2) : nullptr,
        params->outChannels, "B");
  auto result = [&](unsigned i) {
    return i < node.getNumResults() ? node.getResult(i) : nullptr;
  };
  if (llvm::Error err = checkShape(node, result(0), x, "dX"))
    return err;
  if (llvm::Error err = checkShape(node, result(1), w, "dW"))
    return err;
  return checkChannels(node, result(2), params->outChannels, "dB");
}

/// The first of \p perf (cuDNN's ranking, fastest first) that succeeded,
/// is deterministic when \p deterministicOnly, and whose workspace under
/// the math type it will run with fits \p limit; that math type is set on
/// \p conv. \p size queries an algorithm's workspace. \p anyMath (16-bit
/// data, whose tensor-core products accumulate in fp32 anyway, or
/// --allow-tf32) keeps the candidate's math type; else only FMA math runs.
template <typename Perf, typename SizeFn>
std::optional<Perf> pickAlgorithm(llvm::ArrayRef<Perf> perf,
                                  cudnnConvolutionDescriptor_t conv,
                                  bool anyMath, uint64_t limit, SizeFn size) {
  for (bool deterministicOnly : {true, false})
    for (const Perf &candidate : perf) {
      if (candidate.status != CUDNN_STATUS_SUCCESS)
        continue;
      if (deterministicOnly && candidate.determinism != CUDNN_DETERMINISTIC)
        continue;
      cudnnMathType_t math = anyMath ? candidate.mathType : CUDNN_FMA_MATH;
      if (!anyMath && candidate.mathType != CUDNN_FMA_MATH &&
          candidate.mathType != CUDNN_DEFAULT_MATH)
        continue;
      if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS)
        continue;
      size_t bytes = 0;
      if (size(candidate, bytes) != CUDNN_STATUS_SUCCESS || bytes > limit)
        continue;
      return candidate;
    }
  return std::nullopt;
}

/// The descriptors and algorithms of convolution \p p (the one cuDNN is
/// asked for: over the padded input where the node pads explicitly) on
/// \p storage data, for \p workspaceBytes of cuDNN scratch.
llvm::Expected<std::shared_ptr<ConvPlan>>
makeConvPlan(const Node &node, const ConvParams &p, Storage storage,
             uint64_t workspaceBytes, CudaKernelContext &ctx) {
  cudnnHandle_t handle = ctx.cudnn->handle;
  auto plan = std::make_shared<ConvPlan>();
  ConvPlan &d = *plan;
  d.workspaceBytes = workspaceBytes;
  const WindowParams &g = p.window;
  cudnnDataType_t type = cudnnTypeOf(storage);
  bool anyMath = ctx.allowTf32 || storage != Storage::F32;
  auto x = d.owned.tensor(node, type, g.batch, g.channels, g.inH, g.inW);
  if (!x)
    return x.takeError();
  d.x = *x;
  auto y = d.owned.tensor(node, type, g.batch, p.outChannels, g.outH, g.outW);
  if (!y)
    return y.takeError();
  d.y = *y;
  auto bias = d.owned.tensor(node, type, 1, p.outChannels, 1, 1);
  if (!bias)
    return bias.takeError();
  d.bias = *bias;
  CUDNN_CHECK(node, cudnnCreateFilterDescriptor(&d.w));
  d.owned.filters.push_back(d.w);
  CUDNN_CHECK(node, cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NCHW,
                                               p.outChannels, p.groupIn,
                                               g.kernelH, g.kernelW));
  for (cudnnConvolutionDescriptor_t *conv : {&d.forward, &d.data, &d.filter}) {
    CUDNN_CHECK(node, cudnnCreateConvolutionDescriptor(conv));
    d.owned.convolutions.push_back(*conv);
    CUDNN_CHECK(node, cudnnSetConvolution2dDescriptor(
                          *conv, g.padTop, g.padLeft, g.strideH, g.strideW,
                          g.dilationH, g.dilationW, CUDNN_CROSS_CORRELATION,
                          CUDNN_DATA_FLOAT));
    CUDNN_CHECK(node, cudnnSetConvolutionGroupCount(*conv, p.groups));
    // The math type the heuristics rank for (pickAlgorithm then sets each
    // candidate's own).
    cudnnMathType_t math = storage != Storage::F32 ? CUDNN_TENSOR_OP_MATH
                           : ctx.allowTf32         ? CUDNN_DEFAULT_MATH
                                                   : CUDNN_FMA_MATH;
    CUDNN_CHECK(node, cudnnSetConvolutionMathType(*conv, math));
  }
  // cuDNN must see the output extents the graph has.
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(node, cudnnGetConvolution2dForwardOutputDim(d.forward, d.x, d.w,
                                                          &n, &c, &h, &w));
  if (n != g.batch || c != p.outChannels || h != g.outH || w != g.outW)
    return nodeError(node, llvm::formatv("cuDNN computes an output of "
                                         "[{0}, {1}, {2}, {3}], the graph has "
                                         "[{4}, {5}, {6}, {7}]",
                                         n, c, h, w, g.batch, p.outChannels,
                                         g.outH, g.outW)
                               .str());
  bool grad = node.getOpType() == "ConvGrad";
  auto noAlgorithm = [&](llvm::StringRef direction) {
    return nodeError(node, "cuDNN has no " + direction +
                               " algorithm within the " +
                               llvm::Twine(workspaceBytes) + "-byte workspace");
  };
  if (!grad) {
    int count = 0;
    CUDNN_CHECK(node,
                cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionForwardAlgorithm_v7(
                          handle, d.x, d.w, d.forward, d.y, perf.size(),
                          &returned, perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionFwdAlgoPerf_t>(
        perf, d.forward, anyMath, workspaceBytes,
        [&](const cudnnConvolutionFwdAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(
              handle, d.x, d.w, d.forward, d.y, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("forward");
    d.forwardAlgo = chosen->algo;
    return plan;
  }
  if (node.getResult(0)) {
    int count = 0;
    CUDNN_CHECK(
        node, cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          handle, d.w, d.y, d.data, d.x, perf.size(), &returned,
                          perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
        perf, d.data, anyMath, workspaceBytes,
        [&](const cudnnConvolutionBwdDataAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(
              handle, d.w, d.y, d.data, d.x, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("backward-data");
    d.dataAlgo = chosen->algo;
  }
  if (node.getNumResults() > 1 && node.getResult(1)) {
    int count = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(
                          handle, &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(count, 1));
    int returned = 0;
    CUDNN_CHECK(node, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          handle, d.x, d.y, d.filter, d.w, perf.size(),
                          &returned, perf.data()));
    perf.resize(returned);
    auto chosen = pickAlgorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
        perf, d.filter, anyMath, workspaceBytes,
        [&](const cudnnConvolutionBwdFilterAlgoPerf_t &c, size_t &bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(
              handle, d.x, d.y, d.filter, d.w, c.algo, &bytes);
        });
    if (!chosen)
      return noAlgorithm("backward-filter");
    d.filterAlgo = chosen->algo;
  }
  return plan;
}

llvm::Error runConv(CudaCall &call) {
  const Node &node = call.node;
  auto params = resolveConvParams(node);
  if (!params)
    return params.takeError();
  const WindowParams &g = params->window;
  bool grad = node.getOpType() == "ConvGrad";
  if (g.batch * g.channels * g.inSize() == 0 ||
      g.batch * params->outChannels * g.outSize() == 0) {
    // An empty convolution: every output is zero.
    for (unsigned i = 0; i < node.getNumResults(); ++i)
      if (call.out(i) && call.out(i)->getType().getSizeInBytes())
        if (llvm::Error err = call.check(
                cudaMemsetAsync(call.outPtr(i), 0,
                                call.out(i)->getType().getSizeInBytes(),
                                call.ctx.stream),
                "cudaMemsetAsync"))
          return err;
    return llvm::Error::success();
  }
  if (llvm::Error err = requireCudnn(node, call.ctx))
    return err;
  Storage storage = *storageOf(call.in(0)->getType().getDType());
  ConvWorkspaceLayout layout = getConvWorkspaceLayout(node, *params);
  uint64_t sliceBytes = call.launch.planned ? call.launch.workspaceBytes : 0;
  auto *slice = static_cast<char *>(call.launch.workspace);
  if (layout.explicitPadding && (!slice || sliceBytes < layout.scratchOffset))
    return nodeError(node,
                     "asymmetric pads are padded explicitly into the node's "
                     "planned workspace, which an eager (baseline) run does "
                     "not have");
  uint64_t workspaceBytes = slice && sliceBytes > layout.scratchOffset
                                ? sliceBytes - layout.scratchOffset
                                : 0;
  void *workspace = workspaceBytes ? slice + layout.scratchOffset : nullptr;
  std::shared_ptr<ConvPlan> &cached = call.ctx.cudnn->convPlans[&node];
  if (!cached || cached->workspaceBytes != workspaceBytes) {
    auto plan =
        makeConvPlan(node, layout.cudnn, storage, workspaceBytes, call.ctx);
    if (!plan)
      return plan.takeError();
    cached = std::move(*plan);
  }
  const ConvPlan &d = *cached;
  cudnnHandle_t handle = call.ctx.cudnn->handle;
  int64_t elementBytes = dispatch::elementBytes(call.in(grad ? 1 : 0));
  // X as cuDNN reads it: the node's, or padded into the slice.
  const void *x = call.inPtr(grad ? 1 : 0);
  if (layout.explicitPadding && layout.paddedXBytes) {
    void *padded = slice + layout.paddedXOffset;
    if (llvm::Error err = call.check(
            launchConvPad(x, padded, elementBytes, layout.pad, call.ctx.stream),
            "convolution pad kernel"))
      return err;
    x = padded;
  }
  // 16-bit data scales in fp32 as well (cuDNN's scaling type for HALF and
  // BFLOAT16 is float).
  const float one = 1, zero = 0;
  if (!grad) {
    CUDNN_CHECK(node, cudnnConvolutionForward(
                          handle, &one, d.x, x, d.w, call.inPtr(1), d.forward,
                          d.forwardAlgo, workspace, workspaceBytes, &zero, d.y,
                          call.outPtr(0)));
    if (!call.in(2))
      return llvm::Error::success();
    if (storage != Storage::F32)
      return call.check(launchConvBias16(storage, call.outPtr(0), call.inPtr(2),
                                         g.batch, params->outChannels,
                                         g.outSize(), call.ctx.stream),
                        "convolution bias kernel");
    CUDNN_CHECK(node, cudnnAddTensor(handle, &one, d.bias, call.inPtr(2), &one,
                                     d.y, call.outPtr(0)));
    return llvm::Error::success();
  }
  // ConvGrad(dY, X, W) -> (dX?, dW?, dB?), one after another on the stream
  // (each may use the whole scratch).
  if (call.out(0)) {
    void *dx =
        layout.explicitPadding ? slice + layout.paddedDxOffset : call.outPtr(0);
    CUDNN_CHECK(node, cudnnConvolutionBackwardData(
                          handle, &one, d.w, call.inPtr(2), d.y, call.inPtr(0),
                          d.data, d.dataAlgo, workspace, workspaceBytes, &zero,
                          d.x, dx));
    if (layout.explicitPadding)
      if (llvm::Error err =
              call.check(launchConvCrop(dx, call.outPtr(0), elementBytes,
                                        layout.pad, call.ctx.stream),
                         "convolution crop kernel"))
        return err;
  }
  if (call.out(1))
    CUDNN_CHECK(node, cudnnConvolutionBackwardFilter(
                          handle, &one, d.x, x, d.y, call.inPtr(0), d.filter,
                          d.filterAlgo, workspace, workspaceBytes, &zero, d.w,
                          call.outPtr(1)));
  if (!call.out(2))
    return llvm::Error::success();
  if (storage != Storage::F32)
    return call.check(
        launchConvBiasGrad16(storage, call.inPtr(0), call.outPtr(2), g.batch,
                             params->outChannels, g.outSize(), call.ctx.stream),
        "convolution bias-gradient kernel");
  CUDNN_CHECK(node,
              cudnnConvolutionBackwardBias(handle, &one, d.y, call.inPtr(0),
                                           &zero, d.bias, call.outPtr(2)));
  return llvm::Error::success();
}

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

llvm::Error checkBatchNorm(const Node &node) {
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

llvm::Error runBatchNorm(CudaCall &call) {
  const Node &node = call.node;
  bool grad = node.getOpType() == "BatchNormalizationGrad";
  BatchNormShape b = *batchNormShape(node, call.in(grad ? 1 : 0));
  if (llvm::Error err = requireCudnn(node, call.ctx))
    return err;
  if (b.batch * b.channels * b.spatial == 0)
    return nodeError(node, "an empty batch is not supported by cuDNN's batch "
                           "norm");
  cudnnHandle_t handle = call.ctx.cudnn->handle;
  Descriptors owned;
  // A 16-bit X gets a float channel descriptor from
  // cudnnDeriveBNTensorDescriptor.
  Storage storage = *storageOf(call.in(grad ? 1 : 0)->getType().getDType());
  auto x = owned.tensor(node, cudnnTypeOf(storage), b.batch, b.channels,
                        b.spatial, 1);
  if (!x)
    return x.takeError();
  cudnnTensorDescriptor_t channelDesc = nullptr;
  CUDNN_CHECK(node, cudnnCreateTensorDescriptor(&channelDesc));
  owned.tensors.push_back(channelDesc);
  CUDNN_CHECK(node, cudnnDeriveBNTensorDescriptor(channelDesc, *x,
                                                  CUDNN_BATCHNORM_SPATIAL));
  double epsilon = node.getFloatAttr("epsilon", 1e-5f);
  const float one = 1, zero = 0;
  if (grad) {
    void *dScale = call.outPtr(1), *dBias = call.outPtr(2);
    if (llvm::Error err = channelPair(call, b.channels, dScale, dBias))
      return err;
    CUDNN_CHECK(node, cudnnBatchNormalizationBackward(
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one,
                          &zero, *x, call.inPtr(1), *x, call.inPtr(0), *x,
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
  stats.momentum = node.getFloatAttr("momentum", 0.9f);
  stats.epsilon = epsilon;
  stats.training = isBatchNormTraining(node);
  if (stats.training) {
    void *savedMean = call.outPtr(3), *savedInvStd = call.outPtr(4);
    if (llvm::Error err = channelPair(call, b.channels, savedMean, savedInvStd))
      return err;
    // The running statistics are ONNX's (launchBatchNormStats), not
    // cuDNN's: none are passed here.
    CUDNN_CHECK(node, cudnnBatchNormalizationForwardTraining(
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, *x,
                          call.inPtr(0), *x, call.outPtr(0), channelDesc,
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
                          handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, *x,
                          call.inPtr(0), *x, call.outPtr(0), channelDesc,
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

} // namespace

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
  auto add = [&](llvm::StringRef domain, llvm::StringRef op, CheckFn check,
                 RunFn run) {
    table[(domain + "::" + op).str()] = {check, run};
  };
#ifdef GMOPT_HAVE_CUDNN
  CheckFn conv = checkConv, batchNorm = checkBatchNorm;
  RunFn runConvFn = runConv, runBatchNormFn = runBatchNorm;
#else
  CheckFn conv = refuseWithoutCudnn, batchNorm = refuseWithoutCudnn;
  RunFn runConvFn = runWithoutCudnn, runBatchNormFn = runWithoutCudnn;
#endif
  add("", "Conv", conv, runConvFn);
  add(kMsDomain, "ConvGrad", conv, runConvFn);
  // Older ONNX Runtime releases registered ConvGrad in the ONNX domain.
  add("", "ConvGrad", conv, runConvFn);
  add("", "BatchNormalization", batchNorm, runBatchNormFn);
  add(kMsDomain, "BatchNormInternal", batchNorm, runBatchNormFn);
  add(kMsDomain, "BatchNormalizationGrad", batchNorm, runBatchNormFn);
  for (const char *op : {"MaxPool", "AveragePool", "AveragePoolGrad"})
    add("", op, checkPool, runPool);
  for (const char *op : {"GlobalAveragePool", "GlobalMaxPool"})
    add("", op, checkGlobalPool, runGlobalPool);
  add("", "MaxPoolGrad", checkMaxPoolGrad, runMaxPoolGrad);
}
